// vLLM 0.33.0's DeepSeek-V3 router (csrc/moe/grouped_topk_kernels.cu, cut by fetch.py before
// its torch entry point; torch headers shimmed by shim/): invokeNoAuxTc as its grouped_topk op
// calls it for bfloat16 scores, a float32 bias and scoring_func=1 (sigmoid).
// What torch's headers would have brought in before the peer's source.
#include <algorithm>
#include <cuda/std/cmath>

#include "moe/grouped_topk_kernels.cu"

#include "peers.hpp"

namespace peers {

cudaError_t vllm_grouped_topk(const void* logits_bf16, float* weights, int32_t* ids,
                              const float* bias, int64_t tokens, int64_t experts,
                              int64_t n_group, int64_t topk_group, int64_t k, bool renormalize,
                              double scale, cudaStream_t stream) {
  const bool pdl = tokens <= vllm::moe::PDLEnableTokens;  // as grouped_topk decides
  vllm::moe::invokeNoAuxTc<__nv_bfloat16, float, int32_t, vllm::moe::SCORING_SIGMOID>(
      const_cast<__nv_bfloat16*>(static_cast<const __nv_bfloat16*>(logits_bf16)), weights, ids,
      bias, tokens, experts, n_group, topk_group, k, renormalize, scale, pdl, stream);
  return cudaGetLastError();
}

}  // namespace peers
