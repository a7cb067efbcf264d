// The Metal backend: turns lib/metal/metal_topk_plan's dispatch plan into Metal calls. No arithmetic
// or policy lives here; the kernels are lib/metal/*.metal, embedded at build time
// (metal_sources.cpp) and compiled on first use with safe math.
#include "metal_device_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "metal/metal_router_plan.hpp"
#include "metal/metal_sampling_plan.hpp"

namespace mtk {
namespace metal {

namespace {

// The buffers every top-k kernel binds: input, values, indices, then the per-row tensors of a
// ragged call (MetalRaggedBuffer order). A slot without a tensor holds the input's buffer,
// which the kernels never read through it.
struct TopkBuffers {
  BufferSlice input, values, indices;
  BufferSlice ragged[kMetalRaggedBuffers];
};

// Every byte a tensor's strides reach must lie in one buffer; the kernels address element 0
// through its offset in that buffer (bound at offset 0, so negative strides stay inside).
TopkBuffers resolve_topk_buffers(MetalDevice& device, MetalPlan& plan, const TopkProblem& problem) {
  const MetalExtents extents = metal_tensor_extents(problem);
  TopkBuffers b;
  b.input = device.resolve_tensor(problem.input, extents.input, "input");
  b.values = problem.values != nullptr ? device.resolve_tensor(problem.values, extents.values, "values") : b.input;
  b.indices = device.resolve_tensor(problem.indices, extents.indices, "indices");
  for (BufferSlice& slot : b.ragged) slot = b.input;
  set_metal_buffer_offsets(plan, problem.dtype, problem.index_dtype, b.input.offset,
                           problem.values != nullptr ? b.values.offset : 0, b.indices.offset);
  return b;
}

void encode_plan(MetalDevice& device, const MetalPlan& plan, const TopkBuffers& buffers, Workspace workspace,
                 void* stream) {
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
      [encoder setBuffer:buffers.input.buffer.get() offset:0 atIndex:0];
      [encoder setBuffer:buffers.values.buffer.get() offset:0 atIndex:1];
      [encoder setBuffer:buffers.indices.buffer.get() offset:0 atIndex:2];
      [encoder setBytes:&plan.params length:sizeof plan.params atIndex:3];
      [encoder setBytes:&d.pass length:sizeof d.pass atIndex:4];
      [encoder setBuffer:scratch.get() offset:scratch_offset atIndex:5];
      for (NSUInteger r = 0; r < kMetalRaggedBuffers; ++r) {
        [encoder setBuffer:buffers.ragged[r].buffer.get() offset:0 atIndex:kMetalFirstRaggedBuffer + r];
      }
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

}  // namespace

void encode_metal_topk(MetalDevice& device, const MetalPlan& planned, const TopkProblem& problem, Workspace workspace,
                       void* stream) {
  MetalPlan plan = planned;  // with this call's buffer offsets
  const TopkBuffers buffers = resolve_topk_buffers(device, plan, problem);
  encode_plan(device, plan, buffers, workspace, stream);
}

void encode_metal_topk_ragged(MetalDevice& device, const MetalPlan& planned, const RaggedProblem& problem,
                              Workspace workspace, void* stream) {
  static const char* const names[kMetalRaggedBuffers] = {"params.lengths", "params.starts", "params.offsets",
                                                         "params.page_table", "params.row_to_batch"};
  MetalPlan plan = planned;  // with this call's buffer offsets
  TopkBuffers buffers = resolve_topk_buffers(device, plan, problem.dense);
  const MetalRaggedTensors tensors = metal_ragged_tensors(problem);
  size_t offsets[kMetalRaggedBuffers] = {};
  for (int r = 0; r < kMetalRaggedBuffers; ++r) {
    if (tensors.data[r] == nullptr) continue;
    buffers.ragged[r] = device.resolve_tensor(tensors.data[r], tensors.extents[r], names[r]);
    offsets[r] = buffers.ragged[r].offset;
  }
  set_metal_ragged_buffer_offsets(plan, problem, offsets);
  encode_plan(device, plan, buffers, workspace, stream);
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

// The sampling kernel's plan of a problem (the workspace the samplers' masses need).
struct MetalPlannedSampling final : PlannedTopk {
  MetalSamplingPlan plan;
};

// One dispatch of the sampling kernel, bound as make_metal_sampling_plan says.
void encode_metal_sampling(MetalDevice& device, const MetalSamplingPlan& planned, const SamplingProblem& problem,
                           Workspace workspace, void* stream) {
  static const char* const names[kMetalSamplingTensors] = {
      "input", problem.samples() ? "samples" : "out", "params.top_k", "params.top_p", "params.min_p",
      "params.temperature", "uniforms"};
  MetalSamplingPlan plan = planned;  // with this call's buffer offsets
  const MetalSamplingTensors tensors = metal_sampling_tensors(problem);
  BufferSlice buffers[kMetalSamplingTensors];
  size_t offsets[kMetalSamplingTensors] = {};
  for (int t = 0; t < kMetalSamplingTensors; ++t) {
    if (tensors.data[t] == nullptr) continue;
    buffers[t] = device.resolve_tensor(tensors.data[t], tensors.extents[t], names[t]);
    offsets[t] = buffers[t].offset;
  }
  // A scalar parameter's slot holds the input's buffer, which the kernel never reads there.
  for (int t = 0; t < kMetalSamplingTensors; ++t) {
    if (tensors.data[t] == nullptr) buffers[t] = buffers[kSamplingInput];
  }
  set_metal_sampling_buffer_offsets(plan, problem, offsets);

  ObjcRef<id<MTLBuffer>> scratch;
  size_t scratch_offset = 0;
  if (plan.workspace_bytes > 0) {
    if (workspace.data != nullptr) {
      const BufferSlice provided = device.resolve(workspace.data, workspace.bytes, "workspace");
      check_metal_sampling_workspace(plan, workspace.bytes, provided.offset);
      scratch = provided.buffer;
      scratch_offset = provided.offset;
    } else {
      scratch = device.new_scratch(plan.workspace_bytes);
    }
  } else {
    scratch = buffers[kSamplingInput].buffer;  // never read by the filters
  }

  const ObjcRef<id<MTLComputePipelineState>> pipeline = device.pipeline(plan.function);
  const NSUInteger most = [pipeline.get() maxTotalThreadsPerThreadgroup];
  if (plan.threads > most) {
    fail(MTK_ERROR_DEVICE, "Metal pipeline ", plan.function, " allows ", most, " threads per threadgroup; it needs ",
         plan.threads);
  }
  objc_call("encoding the Metal sampling kernel", [&] {
    ObjcRef<id<MTLCommandBuffer>> command_buffer = device.command_buffer(stream);
    id<MTLComputeCommandEncoder> encoder = [command_buffer.get() computeCommandEncoder];
    if (encoder == nil) fail(MTK_ERROR_DEVICE, "Metal could not create a compute command encoder");
    [encoder setComputePipelineState:pipeline.get()];
    for (int t = 0; t < kMetalSamplingTensors; ++t) {
      [encoder setBuffer:buffers[t].buffer.get() offset:0 atIndex:kMetalSamplingBinding[t]];
    }
    [encoder setBytes:&plan.params length:sizeof plan.params atIndex:kMetalSamplingParamsBinding];
    [encoder setBuffer:scratch.get() offset:scratch_offset atIndex:kMetalSamplingWorkspaceBinding];
    for (NSUInteger t = 0; t < kMetalSamplingThreadgroupBuffers; ++t) {
      [encoder setThreadgroupMemoryLength:plan.threadgroup_bytes[t] atIndex:t];
    }
    [encoder dispatchThreadgroups:MTLSizeMake(1, plan.threadgroups_y, 1)
            threadsPerThreadgroup:MTLSizeMake(plan.threads, 1, 1)];
    [encoder endEncoding];
    device.submit(command_buffer, stream);
  });
}

class MetalBackend final : public MetalDeviceBackend {
 public:
  using MetalDeviceBackend::MetalDeviceBackend;

  mtk_backend kind() const override { return MTK_BACKEND_METAL; }
  void run_topk(const PlannedTopk& planned, const TopkProblem& problem, Workspace workspace, void* stream) override {
    encode_metal_topk(device_, static_cast<const MetalPlannedTopk&>(planned).plan, problem, workspace, stream);
  }
  // The MPSGraph backend keeps Backend's refusals of both: its graphs always write values and
  // have no ragged form.
  bool supports_indices_only() const override { return true; }
  std::shared_ptr<const PlannedTopk> plan_topk_ragged(const RaggedProblem& problem) override {
    auto planned = std::make_shared<MetalPlannedTopk>();
    planned->plan = make_metal_ragged_plan(problem, device_.limits(problem.dense.dtype));
    planned->workspace_bytes = planned->plan.workspace_bytes;
    return planned;
  }
  void run_topk_ragged(const PlannedTopk& planned, const RaggedProblem& problem, Workspace workspace,
                       void* stream) override {
    encode_metal_topk_ragged(device_, static_cast<const MetalPlannedTopk&>(planned).plan, problem, workspace, stream);
  }
  // The MPSGraph backend keeps Backend's refusal of sampling (no graph for it).
  std::shared_ptr<const PlannedTopk> plan_sampling(const SamplingProblem& problem) override {
    auto planned = std::make_shared<MetalPlannedSampling>();
    planned->plan = make_metal_sampling_plan(problem);
    planned->workspace_bytes = planned->plan.workspace_bytes;
    return planned;
  }
  void run_sampling(const PlannedTopk& planned, const SamplingProblem& problem, Workspace workspace,
                    void* stream) override {
    encode_metal_sampling(device_, static_cast<const MetalPlannedSampling&>(planned).plan, problem, workspace, stream);
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
