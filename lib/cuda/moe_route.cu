// The fused MoE router on CUDA: one launch, one warp per token. Up to 512 experts the token's
// scores live in registers and its row is read once, vectorised where the layout allows; past
// that the warp streams the row (see moe_route_warp.cuh, which holds the per-token routine).
// Stream-ordered, no allocation, no host synchronisation.
#include <cuda_runtime.h>

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/moe_route.hpp"
#include "cuda/moe_route_warp.cuh"

namespace mtk {
namespace {

using namespace cuda_router;

// Tokens (warps) per block: small blocks spread few tokens over many SMs.
constexpr int kWarpsPerBlock = 4;

struct WarpLanes {
  __device__ __forceinline__ int lane() const { return int(threadIdx.x) % kWarpSize; }
  __device__ __forceinline__ uint32_t shuffle_xor(uint32_t value, int lane_mask) const {
    return __shfl_xor_sync(0xffffffffu, value, lane_mask);
  }
  __device__ __forceinline__ uint32_t shuffle(uint32_t value, int source_lane) const {
    return __shfl_sync(0xffffffffu, value, source_lane);
  }
};

__device__ __forceinline__ int64_t warp_token() {
  return int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}

// The plain routine gets its own kernel: it needs far fewer registers than the general one,
// and it is what most models run.
template <class Logit, int kItems, bool kPlain>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    route_in_registers(const RouterProblem p, bool vector_loads) {
  const int64_t token = warp_token();
  if (token >= p.tokens) return;  // whole warps leave together
  WarpLanes lanes;
  if constexpr (kPlain) {
    route_plain<Logit, kItems>(p, token, vector_loads, lanes);
  } else {
    route_general<Logit, kItems>(p, token, vector_loads, lanes);
  }
}

template <class Logit, int kItems>
void launch_in_registers(const RouterProblem& p, dim3 grid, dim3 block, bool vectors,
                         cudaStream_t stream) {
  if (p.bias == nullptr && p.n_group == 1) {
    route_in_registers<Logit, kItems, true><<<grid, block, 0, stream>>>(p, vectors);
  } else {
    route_in_registers<Logit, kItems, false><<<grid, block, 0, stream>>>(p, vectors);
  }
}

template <class Logit>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    route_streamed(const RouterProblem p) {
  const int64_t token = warp_token();
  if (token >= p.tokens) return;
  WarpLanes lanes;
  route_streaming<Logit>(p, token, lanes);
}

template <class Logit>
void launch(const RouterProblem& p, cudaStream_t stream) {
  const int64_t blocks = (p.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "logits.sizes[0] = ", p.tokens,
         " tokens exceed the CUDA router's grid");
  }
  const dim3 grid(static_cast<unsigned>(blocks)), block(kWarpsPerBlock * kWarpSize);
  const int items = items_per_lane(p.experts);
  const bool vectors = items > 0 && can_load_vectors(p, items, sizeof(typename Logit::Storage));
  switch (items) {
    case 1: launch_in_registers<Logit, 1>(p, grid, block, vectors, stream); break;
    case 2: launch_in_registers<Logit, 2>(p, grid, block, vectors, stream); break;
    case 4: launch_in_registers<Logit, 4>(p, grid, block, vectors, stream); break;
    case 8: launch_in_registers<Logit, 8>(p, grid, block, vectors, stream); break;
    case 16: launch_in_registers<Logit, 16>(p, grid, block, vectors, stream); break;
    default: route_streamed<Logit><<<grid, block, 0, stream>>>(p); break;
  }
  cuda::check_cuda(cudaGetLastError(), "launching the MoE router");
}

}  // namespace

void cuda_moe_route(const RouterProblem& problem, cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT32: return launch<F32>(problem, stream);
    case MTK_FLOAT16: return launch<F16>(problem, stream);
    case MTK_BFLOAT16: return launch<BF16>(problem, stream);
    default:
      fail(MTK_ERROR_INTERNAL, "moe_route: logits dtype ", int(problem.dtype), " reached CUDA");
  }
}

}  // namespace mtk
