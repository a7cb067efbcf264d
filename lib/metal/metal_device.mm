// MetalDevice (metal_device.h): memory, copies, synchronisation, the kernel library and its
// pipelines for one Metal context.
#include "metal_device.h"

#include <algorithm>
#include <cstring>

#include "metal/metal_topk_plan.hpp"

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

// The memory map's hold on a buffer: one retain, released when the map's last copy goes. A
// release that raises cannot be reported from there; the hold is gone either way.
MetalMemoryMap::BufferRef hold(id<MTLBuffer> buffer) {
  return MetalMemoryMap::BufferRef((void*)[buffer retain], [](void* object) {
    @try {
      [(id)object release];
    } @catch (NSException*) {
    }
  });
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
  for (int kernel = 0; kernel <= static_cast<int>(MetalKernel::Last); ++kernel) {
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
  memory_.add_allocation(contents, bytes, hold(buffer.get()));
  return contents;
}

void MetalDevice::deallocate(void* ptr) noexcept {
  // Command buffers retain the buffers they use, so in-flight work keeps its memory alive.
  memory_.remove_allocation(ptr);
}

void* MetalDevice::register_buffer(void* native_buffer) {
  id<MTLBuffer> buffer = nil;  // the caller's reference keeps it alive for this call
  bool same_device = false, shared = false;
  void* contents = nullptr;
  NSUInteger length = 0;
  objc_call("registering a Metal buffer", [&] {
    id object = (id)native_buffer;
    if ([object conformsToProtocol:@protocol(MTLBuffer)]) {
      buffer = (id<MTLBuffer>)object;
      same_device = [buffer device] == device_.get();
      shared = [buffer storageMode] == MTLStorageModeShared;
      contents = [buffer contents];
      length = [buffer length];
    }
  });
  if (buffer == nil) fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", native_buffer, " is not an id<MTLBuffer>");
  if (!same_device) fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", native_buffer, " is on another Metal device than the context's");
  if (!shared || contents == nullptr) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", native_buffer,
         " does not have shared storage (MTLStorageModeShared): its memory has no CPU address to stand for it");
  }
  memory_.register_buffer(contents, length, hold(buffer));
  return contents;
}

void MetalDevice::unregister_buffer(void* data) { memory_.unregister_buffer(data); }

BufferSlice MetalDevice::resolve(const void* ptr, size_t bytes, const char* argument) const {
  // The slice's own reference keeps the buffer alive while it is retained for the caller.
  const MetalMemoryMap::Slice slice = memory_.resolve(ptr, bytes, argument);
  return BufferSlice{ObjcRef<id<MTLBuffer>>::retain((id<MTLBuffer>)slice.buffer.get()), slice.offset};
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

}  // namespace metal
}  // namespace mtk
