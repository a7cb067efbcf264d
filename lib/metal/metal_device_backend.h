// What the Metal and MPSGraph backends share as backends: one MetalDevice behind memory, copies,
// the Metal kernels' workspace and the router, and the Metal encoders both run. Included only by
// .mm files.
#pragma once

#include <cstddef>
#include <memory>

#include "core/backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "metal/metal_device.h"
#include "metal/metal_topk_plan.hpp"

namespace mtk {
namespace metal {

// The Metal kernels' plan of a problem: the plan of both backends (the MPSGraph backend routes
// some problems to the kernels, and only those need scratch).
struct MetalPlannedTopk final : PlannedTopk {
  MetalPlan plan;
};

// The Metal backend's top-k, shared with the MPSGraph backend for the problems it routes.
void encode_metal_topk(MetalDevice& device, const MetalPlan& plan, const TopkProblem& problem,
                       Workspace workspace, void* stream);

// The Metal backend's ragged top-k (the MPSGraph backend refuses ragged calls).
void encode_metal_topk_ragged(MetalDevice& device, const MetalPlan& plan, const RaggedProblem& problem,
                              Workspace workspace, void* stream);

// The Metal backend's MoE router (one kernel), which the MPSGraph backend also runs.
void encode_metal_moe_route(MetalDevice& device, const RouterProblem& problem, void* stream);

// What the Metal and MPSGraph backends share: one MetalDevice behind memory, copies, the
// workspace of the Metal kernels and the router. Each backend adds its kind, top-k and counters.
class MetalDeviceBackend : public Backend {
 public:
  explicit MetalDeviceBackend(int device_index) : device_(device_index) {}

  bool supports_dtype(mtk_dtype dtype) const override {
    return dtype != MTK_FLOAT64 && dtype_info(dtype) != nullptr;
  }
  void* allocate(size_t bytes) override { return device_.allocate(bytes); }
  void deallocate(void* ptr) noexcept override { device_.deallocate(ptr); }
  void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind kind, void* stream) override {
    device_.copy(dst, src, bytes, kind, stream);
  }
  void synchronize(void* stream) override { device_.synchronize(stream); }
  void* register_buffer(void* native_buffer) override { return device_.register_buffer(native_buffer); }
  void unregister_buffer(void* data) override { device_.unregister_buffer(data); }
  // Problems the MPSGraph backend routes need the Metal kernels' scratch; its graphs need none.
  std::shared_ptr<const PlannedTopk> plan_topk(const TopkProblem& problem) override {
    auto planned = std::make_shared<MetalPlannedTopk>();
    planned->plan = make_metal_plan(problem, device_.limits(problem.dtype));
    planned->workspace_bytes = planned->plan.workspace_bytes;
    return planned;
  }
  // MPSGraph has no fused router (and its top-k's tie order is undocumented): both backends
  // run the Metal kernel, on this context's device and queue.
  void moe_route(const RouterProblem& problem, void* stream) override {
    encode_metal_moe_route(device_, problem, stream);
  }
  // Scratch is allocated per call and owned by the command buffer that uses it.
  size_t scratch_bytes() const override { return 0; }
  void set_num_threads(int) override {
    fail(MTK_ERROR_INVALID_ARGUMENT, "num_threads applies to CPU contexts only; the ",
         mtk_backend_name(kind()), " backend has no worker threads");
  }

 protected:
  MetalDevice device_;
};

}  // namespace metal

// Whether a Metal device is present: both Metal backends register with it.
bool metal_backend_available();

}  // namespace mtk
