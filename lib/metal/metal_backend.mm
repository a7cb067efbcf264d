// The Metal backend: turns lib/metal/metal_plan's dispatch plan into Metal calls. No arithmetic
// or policy lives here; the kernels are lib/metal/*.metal, embedded at build time
// (metal_sources.cpp) and compiled on first use with safe math.
#include "metal_device.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.hpp"

namespace mtk {

// The kernel sources, generated from lib/metal/*.metal and headers by lib/metal/metal.mk.
extern const char kMetalTopkSource[];

namespace metal {

std::string describe(NSError* error) {
  if (error == nil) return "no error description";
  NSString* text = [error localizedDescription];
  return text ? [text UTF8String] : "no error description";
}

namespace {

// MTLCopyAllDevices (macOS 10.11) lists every GPU; index 0 is not necessarily the default.
ObjcRef<id<MTLDevice>> open_device(int device_index) {
  ObjcRef<NSArray<id<MTLDevice>>*> devices = ObjcRef<NSArray<id<MTLDevice>>*>::adopt(MTLCopyAllDevices());
  const NSUInteger count = devices ? [devices.get() count] : 0;
  if (device_index < 0 || static_cast<NSUInteger>(device_index) >= count) {
    fail(MTK_ERROR_BACKEND_UNAVAILABLE, "Metal device ", device_index, " does not exist (", count,
         " Metal devices present)");
  }
  return ObjcRef<id<MTLDevice>>::retain([devices.get() objectAtIndex:static_cast<NSUInteger>(device_index)]);
}

}  // namespace

MetalDevice::MetalDevice(int device_index) {
  objc_call("opening the Metal device", [&] {
    device_ = open_device(device_index);
    queue_ = ObjcRef<id<MTLCommandQueue>>::adopt([device_.get() newCommandQueue]);
  });
  if (!queue_) fail(MTK_ERROR_DEVICE, "Metal could not create a command queue");
}

MetalLimits MetalDevice::limits(mtk_dtype dtype) {
  std::lock_guard<std::mutex> lock(limits_mutex_);
  auto found = limits_.find(dtype);
  if (found != limits_.end()) return found->second;
  // Register pressure can make a pipeline accept fewer than 1024 threads per threadgroup.
  NSUInteger fewest = NSUIntegerMax;
  for (int kernel = 0; kernel <= static_cast<int>(MetalKernel::SortStore); ++kernel) {
    const std::string function = std::string(metal_kernel_name(static_cast<MetalKernel>(kernel))) + "_" +
                                 metal_dtype_suffix(dtype);
    fewest = std::min(fewest, [pipeline(function).get() maxTotalThreadsPerThreadgroup]);
  }
  return limits_.emplace(dtype, metal_limits_for_pipelines(fewest)).first->second;
}

void* MetalDevice::allocate(size_t bytes) {
  ObjcRef<id<MTLBuffer>> buffer;
  objc_call("allocating Metal memory", [&] {
    buffer = ObjcRef<id<MTLBuffer>>::adopt([device_.get() newBufferWithLength:bytes
                                                                       options:MTLResourceStorageModeShared]);
  });
  if (!buffer) fail(MTK_ERROR_OUT_OF_MEMORY, "Metal could not allocate ", bytes, " bytes");
  void* contents = [buffer.get() contents];
  std::lock_guard<std::mutex> lock(memory_mutex_);
  allocations_.emplace(reinterpret_cast<uintptr_t>(contents), Allocation{buffer, bytes});
  return contents;
}

void MetalDevice::deallocate(void* ptr) noexcept {
  // Command buffers retain the buffers they use, so in-flight work keeps its memory alive.
  std::lock_guard<std::mutex> lock(memory_mutex_);
  @try {
    allocations_.erase(reinterpret_cast<uintptr_t>(ptr));
  } @catch (NSException*) {
    // A failing release cannot be reported from a noexcept free; the entry is gone either way.
  }
}

BufferSlice MetalDevice::resolve(const void* ptr, size_t bytes, const char* argument) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(memory_mutex_);
  auto after = allocations_.upper_bound(address);
  if (after != allocations_.begin()) {
    const auto& [start, allocation] = *std::prev(after);
    const size_t offset = address - start;
    if (offset < allocation.bytes && bytes <= allocation.bytes - offset) return BufferSlice{allocation.buffer, offset};
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, argument, " = ", ptr, " (", bytes,
       " bytes) is not inside memory allocated by this Metal context");
}

BufferSlice MetalDevice::resolve_tensor(const void* element0, const ByteExtent& extent, const char* argument) const {
  const char* first = static_cast<const char*>(element0) + extent.first;
  BufferSlice slice = resolve(first, extent.bytes, argument);
  slice.offset += static_cast<size_t>(-extent.first);
  return slice;
}

id<MTLCommandBuffer> MetalDevice::caller_command_buffer(void* stream) {
  if (stream == nullptr) return nil;
  id object = (id)stream;
  if (![object conformsToProtocol:@protocol(MTLCommandBuffer)]) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "stream = ", stream, " is not an id<MTLCommandBuffer>");
  }
  return (id<MTLCommandBuffer>)object;
}

ObjcRef<id<MTLCommandBuffer>> MetalDevice::command_buffer(void* stream) {
  if (id<MTLCommandBuffer> caller = caller_command_buffer(stream)) return ObjcRef<id<MTLCommandBuffer>>::retain(caller);
  // -commandBuffer returns an autoreleased object that retains the resources it uses.
  ObjcRef<id<MTLCommandBuffer>> own = ObjcRef<id<MTLCommandBuffer>>::retain([queue_.get() commandBuffer]);
  if (!own) fail(MTK_ERROR_DEVICE, "Metal could not create a command buffer");
  return own;
}

void MetalDevice::submit(const ObjcRef<id<MTLCommandBuffer>>& command_buffer, void* stream) {
  if (stream != nullptr) return;  // the caller commits its own command buffer
  [command_buffer.get() commit];
  remember_committed(command_buffer);
}

void MetalDevice::remember_committed(const ObjcRef<id<MTLCommandBuffer>>& command_buffer) {
  std::lock_guard<std::mutex> lock(submit_mutex_);
  last_committed_ = command_buffer;
}

void MetalDevice::wait_and_check(id<MTLCommandBuffer> command_buffer) {
  [command_buffer waitUntilCompleted];
  if ([command_buffer status] == MTLCommandBufferStatusError) {
    fail(MTK_ERROR_DEVICE, "Metal command buffer failed: ", describe([command_buffer error]));
  }
}

void MetalDevice::synchronize(void* stream) {
  objc_call("synchronizing with the Metal device", [&] {
    if (id<MTLCommandBuffer> caller = caller_command_buffer(stream)) {
      if ([caller status] < MTLCommandBufferStatusCommitted) {
        fail(MTK_ERROR_INVALID_ARGUMENT, "the stream's command buffer has not been committed; commit it before synchronizing");
      }
      wait_and_check(caller);
      return;
    }
    ObjcRef<id<MTLCommandBuffer>> last;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      last = last_committed_;
    }
    // A queue runs its command buffers in commit order: the last one finishing means all did.
    if (last) wait_and_check(last.get());
  });
}

void MetalDevice::copy(void* dst, const void* src, size_t bytes, mtk_copy_kind kind, void* stream) {
  if (bytes == 0) return;
  objc_call("copying Metal memory", [&] {
    const bool caller = caller_command_buffer(stream) != nil;
    switch (kind) {
      case MTK_COPY_HOST_TO_DEVICE: {
        const BufferSlice to = resolve(dst, bytes, "dst");
        if (!caller) {
          // Shared storage: once the queue is idle the CPU may write the contents directly.
          synchronize(nullptr);
          std::memcpy(dst, src, bytes);
          return;
        }
        // The caller's command buffer runs later: stage the host bytes now, copy in order.
        ObjcRef<id<MTLBuffer>> staging = ObjcRef<id<MTLBuffer>>::adopt(
            [device_.get() newBufferWithBytes:src length:bytes options:MTLResourceStorageModeShared]);
        if (!staging) fail(MTK_ERROR_OUT_OF_MEMORY, "Metal could not allocate ", bytes, " bytes of staging memory");
        ObjcRef<id<MTLCommandBuffer>> command_buffer = this->command_buffer(stream);
        id<MTLBlitCommandEncoder> blit = [command_buffer.get() blitCommandEncoder];
        [blit copyFromBuffer:staging.get() sourceOffset:0 toBuffer:to.buffer.get() destinationOffset:to.offset size:bytes];
        [blit endEncoding];
        return;
      }
      case MTK_COPY_DEVICE_TO_HOST: {
        resolve(src, bytes, "src");
        if (caller) {
          fail(MTK_ERROR_INVALID_ARGUMENT, "a device-to-host copy cannot be ordered on a caller's command buffer; "
               "commit it, then copy with stream = NULL");
        }
        synchronize(nullptr);
        std::memcpy(dst, src, bytes);
        return;
      }
      case MTK_COPY_DEVICE_TO_DEVICE: {
        const BufferSlice from = resolve(src, bytes, "src");
        const BufferSlice to = resolve(dst, bytes, "dst");
        ObjcRef<id<MTLCommandBuffer>> command_buffer = this->command_buffer(stream);
        id<MTLBlitCommandEncoder> blit = [command_buffer.get() blitCommandEncoder];
        [blit copyFromBuffer:from.buffer.get() sourceOffset:from.offset toBuffer:to.buffer.get() destinationOffset:to.offset size:bytes];
        [blit endEncoding];
        submit(command_buffer, stream);
        return;
      }
    }
    fail(MTK_ERROR_INVALID_ARGUMENT, "copy kind ", static_cast<int>(kind), " is not an mtk_copy_kind");
  });
}

ObjcRef<id<MTLBuffer>> MetalDevice::new_scratch(size_t bytes) {
  ObjcRef<id<MTLBuffer>> buffer;
  objc_call("allocating Metal scratch", [&] {
    buffer = ObjcRef<id<MTLBuffer>>::adopt([device_.get() newBufferWithLength:bytes options:MTLResourceStorageModePrivate]);
  });
  if (!buffer) fail(MTK_ERROR_OUT_OF_MEMORY, "Metal could not allocate ", bytes, " bytes of scratch");
  return buffer;
}

id<MTLLibrary> MetalDevice::library() {
  std::lock_guard<std::mutex> lock(library_mutex_);
  if (library_) return library_.get();
  NSError* error = nil;
  objc_call("compiling the Metal kernels", [&] {
    ObjcRef<MTLCompileOptions*> options = ObjcRef<MTLCompileOptions*>::adopt([[MTLCompileOptions alloc] init]);
    // Safe math keeps NaN and infinities intact (Metal defaults to fast math).
    if (@available(macOS 15.0, *)) {
      [options.get() setMathMode:MTLMathModeSafe];
    } else {
      [options.get() setFastMathEnabled:NO];
    }
    // Every Apple-silicon GPU (family Apple7 and later) runs SIMD-groups of 32 threads; other
    // GPUs get the threadgroup-memory scan instead of simd_prefix_exclusive_sum.
    if (![device_.get() supportsFamily:MTLGPUFamilyApple7]) {
      [options.get() setPreprocessorMacros:@{@"MTK_SIMD_VIA_THREADGROUP" : @"1"}];
    }
    NSString* source = [NSString stringWithUTF8String:kMetalTopkSource];
    library_ = ObjcRef<id<MTLLibrary>>::adopt([device_.get() newLibraryWithSource:source options:options.get() error:&error]);
  });
  if (!library_) fail(MTK_ERROR_DEVICE, "compiling the Metal kernels failed: ", describe(error));
  return library_.get();
}

ObjcRef<id<MTLComputePipelineState>> MetalDevice::pipeline(const std::string& function) {
  id<MTLLibrary> kernels = library();
  return pipelines_.get_or_create(function, [&] {
    ObjcRef<id<MTLComputePipelineState>> pipeline;
    NSError* error = nil;
    objc_call("creating a Metal pipeline", [&] {
      ObjcRef<id<MTLFunction>> entry = ObjcRef<id<MTLFunction>>::adopt(
          [kernels newFunctionWithName:[NSString stringWithUTF8String:function.c_str()]]);
      if (!entry) fail(MTK_ERROR_INTERNAL, "Metal function ", function, " is missing from the embedded kernels");
      pipeline = ObjcRef<id<MTLComputePipelineState>>::adopt(
          [device_.get() newComputePipelineStateWithFunction:entry.get() error:&error]);
    });
    if (!pipeline) fail(MTK_ERROR_DEVICE, "Metal pipeline ", function, ": ", describe(error));
    return pipeline;
  });
}

void encode_metal_topk(MetalDevice& device, const MetalPlan& planned, const TopkProblem& problem, Workspace workspace,
                       void* stream) {
  MetalPlan plan = planned;  // with this call's buffer offsets
  // Every byte a tensor's strides reach must lie in one buffer; the kernels address element 0
  // through its offset in that buffer (bound at offset 0, so negative strides stay inside).
  const MetalExtents extents = metal_tensor_extents(problem);
  const BufferSlice input = device.resolve_tensor(problem.input, extents.input, "input");
  const BufferSlice values = device.resolve_tensor(problem.values, extents.values, "values");
  const BufferSlice indices = device.resolve_tensor(problem.indices, extents.indices, "indices");
  set_metal_buffer_offsets(plan, problem.dtype, problem.index_dtype, input.offset, values.offset, indices.offset);

  ObjcRef<id<MTLBuffer>> scratch;
  size_t scratch_offset = 0;
  if (plan.workspace_bytes > 0) {
    if (workspace.data != nullptr) {
      const BufferSlice provided = device.resolve(workspace.data, workspace.bytes, "workspace");
      check_metal_workspace(plan, workspace.bytes, provided.offset);
      scratch = provided.buffer;
      scratch_offset = provided.offset;
    } else {
      scratch = device.new_scratch(plan.workspace_bytes);
    }
  }

  // Every pipeline exists and fits before anything is encoded, so a failure never leaves a
  // half-encoded command buffer behind.
  std::vector<ObjcRef<id<MTLComputePipelineState>>> pipelines;
  pipelines.reserve(plan.dispatches.size());
  for (const MetalDispatch& d : plan.dispatches) {
    pipelines.push_back(device.pipeline(d.function));
    const NSUInteger most = [pipelines.back().get() maxTotalThreadsPerThreadgroup];
    if (d.threads > most) {
      fail(MTK_ERROR_DEVICE, "Metal pipeline ", d.function, " allows ", most, " threads per threadgroup; the plan needs ",
           d.threads);
    }
  }

  objc_call("encoding Metal top-k", [&] {
    ObjcRef<id<MTLCommandBuffer>> command_buffer = device.command_buffer(stream);
    id<MTLComputeCommandEncoder> encoder = [command_buffer.get() computeCommandEncoder];
    if (encoder == nil) fail(MTK_ERROR_DEVICE, "Metal could not create a compute command encoder");
    // A serial encoder: each dispatch sees the device-memory writes of the ones before it.
    for (size_t i = 0; i < plan.dispatches.size(); ++i) {
      const MetalDispatch& d = plan.dispatches[i];
      [encoder setComputePipelineState:pipelines[i].get()];
      [encoder setBuffer:input.buffer.get() offset:0 atIndex:0];
      [encoder setBuffer:values.buffer.get() offset:0 atIndex:1];
      [encoder setBuffer:indices.buffer.get() offset:0 atIndex:2];
      [encoder setBytes:&plan.params length:sizeof plan.params atIndex:3];
      [encoder setBytes:&d.pass length:sizeof d.pass atIndex:4];
      [encoder setBuffer:scratch.get() offset:scratch_offset atIndex:5];
      for (NSUInteger t = 0; t < kMetalThreadgroupBuffers; ++t) {
        [encoder setThreadgroupMemoryLength:d.threadgroup_bytes[t] atIndex:t];
      }
      [encoder dispatchThreadgroups:MTLSizeMake(d.threadgroups_x, d.threadgroups_y, 1)
              threadsPerThreadgroup:MTLSizeMake(d.threads, 1, 1)];
    }
    [encoder endEncoding];
    device.submit(command_buffer, stream);
  });
}

void encode_metal_moe_route(MetalDevice& device, const RouterProblem& problem, void* stream) {
  // The plan's threadgroup is capped by what this device's router pipeline allows.
  const ObjcRef<id<MTLComputePipelineState>> pipeline = device.pipeline(metal_router_function(problem.dtype));
  MetalRouterPlan plan =
      make_metal_router_plan(problem, metal_router_limits_for_pipeline([pipeline.get() maxTotalThreadsPerThreadgroup]));
  const MetalRouterExtents extents = metal_router_extents(problem);
  const BufferSlice logits = device.resolve_tensor(problem.logits, extents.logits, "logits");
  const BufferSlice weights = device.resolve_tensor(problem.weights, extents.weights, "weights");
  const BufferSlice ids = device.resolve_tensor(problem.ids, extents.ids, "ids");
  // Without a bias the kernel never reads buffer 1; the logits' buffer fills the slot.
  const BufferSlice bias =
      problem.bias != nullptr ? device.resolve_tensor(problem.bias, extents.bias, "params.bias") : logits;
  set_metal_router_buffer_offsets(plan, problem, logits.offset, bias.offset, weights.offset, ids.offset);

  objc_call("encoding the Metal MoE router", [&] {
    ObjcRef<id<MTLCommandBuffer>> command_buffer = device.command_buffer(stream);
    id<MTLComputeCommandEncoder> encoder = [command_buffer.get() computeCommandEncoder];
    if (encoder == nil) fail(MTK_ERROR_DEVICE, "Metal could not create a compute command encoder");
    [encoder setComputePipelineState:pipeline.get()];
    [encoder setBuffer:logits.buffer.get() offset:0 atIndex:0];
    [encoder setBuffer:bias.buffer.get() offset:0 atIndex:1];
    [encoder setBuffer:weights.buffer.get() offset:0 atIndex:2];
    [encoder setBuffer:ids.buffer.get() offset:0 atIndex:3];
    [encoder setBytes:&plan.params length:sizeof plan.params atIndex:4];
    for (NSUInteger t = 0; t < kRouterThreadgroupBuffers; ++t) {
      [encoder setThreadgroupMemoryLength:plan.threadgroup_bytes[t] atIndex:t];
    }
    [encoder dispatchThreadgroups:MTLSizeMake(1, plan.threadgroups_y, 1)
            threadsPerThreadgroup:MTLSizeMake(plan.threads, 1, 1)];
    [encoder endEncoding];
    device.submit(command_buffer, stream);
  });
}

namespace {

class MetalBackend final : public MetalDeviceBackend {
 public:
  using MetalDeviceBackend::MetalDeviceBackend;

  mtk_backend kind() const override { return MTK_BACKEND_METAL; }
  void run_topk(const PlannedTopk& planned, const TopkProblem& problem, Workspace workspace, void* stream) override {
    encode_metal_topk(device_, static_cast<const MetalPlannedTopk&>(planned).plan, problem, workspace, stream);
  }
  CacheCounters cache_counters() const override { return device_.pipeline_counters(); }
};

}  // namespace
}  // namespace metal

namespace {

std::unique_ptr<Backend> make_metal_backend(int device_index) {
  return std::make_unique<metal::MetalBackend>(device_index);
}

}  // namespace

bool metal_backend_available() {
  bool available = false;
  @try {
    @autoreleasepool {
      metal::ObjcRef<NSArray<id<MTLDevice>>*> devices =
          metal::ObjcRef<NSArray<id<MTLDevice>>*>::adopt(MTLCopyAllDevices());
      available = devices && [devices.get() count] > 0;
    }
  } @catch (NSException*) {
    available = false;
  }
  return available;
}

namespace {
// The default on a Mac (no CUDA there).
const BackendRegistration metal_registration(MTK_BACKEND_METAL, 2, make_metal_backend,
                                             metal_backend_available);
}  // namespace

}  // namespace mtk
