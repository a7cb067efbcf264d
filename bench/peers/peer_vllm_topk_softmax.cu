// vLLM 0.33.0's softmax router (csrc/moe/topk_softmax_kernels.cu, cut by fetch.py before its
// torch entry points; torch headers shimmed by shim/): the launcher its topk_softmax op calls.
#include "moe/topk_softmax_kernels.cu"

#include "peers.hpp"

namespace peers {

cudaError_t vllm_topk_softmax(const void* logits_bf16, float* weights, int32_t* ids,
                              int32_t* token_expert_indices, float* workspace, int tokens,
                              int experts, int k, bool renormalize, cudaStream_t stream) {
  // As topk_softmax does: int32 ids, no bias, scale 1, no padding mask.
  vllm::moe::topkGatingKernelLauncher<int, __nv_bfloat16, vllm::moe::SCORING_SOFTMAX>(
      static_cast<const __nv_bfloat16*>(logits_bf16), weights, ids, token_expert_indices,
      workspace, tokens, experts, k, renormalize, nullptr, 1.0, stream, nullptr);
  return cudaGetLastError();
}

}  // namespace peers
