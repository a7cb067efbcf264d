// The fused MoE router on CUDA: one launch. Up to 512 experts a token's row is read once into
// the registers of a group of lanes (a warp, or a part of one for rows of up to 128 experts);
// past that a warp per token streams the row (moe_route_warp.cuh holds the per-token routines).
// Stream-ordered, no allocation, no host synchronisation.
#include <cuda_runtime.h>

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/device_utils.cuh"
#include "cuda/kernel_launch.cuh"
#include "cuda/moe_route.hpp"
#include "cuda/moe_route_warp.cuh"

namespace mtk {
namespace {

using namespace cuda_router;

// Small blocks spread few tokens over many SMs.
constexpr int kThreadsPerBlock = 128;

__device__ __forceinline__ int64_t global_thread() {
  return int64_t(blockIdx.x) * kThreadsPerBlock + threadIdx.x;
}

// Whole warps past the last token leave together; inside the last warp, route_token keeps the
// surplus groups in step without writing.
template <class Logit, int kItems, int kLanes, RegisterPath kPath>
__global__ void __launch_bounds__(kThreadsPerBlock)
    route_in_registers(const RouterProblem p, const RegisterPlan plan) {
  cuda::wait_for_previous_kernel();
  cuda::allow_next_kernel();
  const int64_t thread = global_thread();
  if ((thread - thread % kWarpSize) / kLanes >= p.tokens) return;
  GroupLanes<kLanes> lanes;
  route_token<Logit, kItems, kPath>(p, thread / kLanes, plan, lanes);
}

template <class Logit>
__global__ void __launch_bounds__(kThreadsPerBlock) route_streamed(const RouterProblem p) {
  cuda::wait_for_previous_kernel();
  cuda::allow_next_kernel();
  const int64_t token = global_thread() / kWarpSize;
  if (token >= p.tokens) return;  // whole warps leave together
  GroupLanes<kWarpSize> lanes;
  route_streaming<Logit>(p, token, lanes);
}

dim3 grid_for(const RouterProblem& p, int tokens_per_block) {
  const int64_t blocks = (p.tokens + tokens_per_block - 1) / tokens_per_block;
  if (blocks > 0x7fffffff) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "logits.sizes[0] = ", p.tokens,
         " tokens exceed the CUDA router's grid");
  }
  return dim3(static_cast<unsigned>(blocks));
}

constexpr const char* kLaunching = "launching the MoE router";

template <class Logit>
void launch(const RouterProblem& p, int sm_count, cudaStream_t stream) {
  const dim3 block(kThreadsPerBlock);
  const bool in_registers = visit_register_layout(p.experts, [&](auto layout) {
    using L = decltype(layout);
    const RegisterPlan plan =
        plan_registers(p, L::kItems, L::kLanes, sizeof(typename Logit::Storage), sm_count);
    const dim3 grid = grid_for(p, kThreadsPerBlock / L::kLanes);
    visit_register_path(p, plan, [&](auto path) {
      constexpr RegisterPath kPath = decltype(path)::value;
      cuda::launch_overlapped<route_in_registers<Logit, L::kItems, L::kLanes, kPath>>(
          grid, block, 0, stream, kLaunching, p, plan);
    });
  });
  if (!in_registers) {
    cuda::launch_overlapped<route_streamed<Logit>>(grid_for(p, kThreadsPerBlock / kWarpSize),
                                                   block, 0, stream, kLaunching, p);
  }
}

}  // namespace

void cuda_moe_route(const RouterProblem& problem, int sm_count, cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT32: return launch<F32>(problem, sm_count, stream);
    case MTK_FLOAT16: return launch<F16>(problem, sm_count, stream);
    case MTK_BFLOAT16: return launch<BF16>(problem, sm_count, stream);
    default:
      fail(MTK_ERROR_INTERNAL, "moe_route: logits dtype ", int(problem.dtype), " reached CUDA");
  }
}

}  // namespace mtk
