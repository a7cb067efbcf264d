// FlashInfer 0.7.2's DeepSeek-V3 router (TensorRT-LLM's noAuxTc, csrc/fused_moe/noAuxTcKernels.cu
// cut by fetch.py before its tvm-ffi entry point; TensorRT-LLM and tvm-ffi headers shimmed by
// shim/): invokeNoAuxTc as flashinfer.fused_topk_deepseek calls it. Its weights come out in the
// scores' dtype, here bfloat16; it always renormalises, then multiplies by the scale.
#include <cuda_bf16.h>

#include "fused_moe/noAuxTcKernels.cu"

#include "peers.hpp"

namespace peers {

cudaError_t flashinfer_noaux_tc(const void* logits_bf16, void* weights_bf16, int32_t* ids,
                                const float* bias, int64_t tokens, int64_t experts,
                                int64_t n_group, int64_t topk_group, int64_t k, double scale,
                                cudaStream_t stream) {
  tensorrt_llm::kernels::invokeNoAuxTc<__nv_bfloat16, float, __nv_bfloat16, int32_t>(
      const_cast<__nv_bfloat16*>(static_cast<const __nv_bfloat16*>(logits_bf16)),
      const_cast<float*>(bias), static_cast<__nv_bfloat16*>(weights_bf16), ids, tokens, experts,
      n_group, topk_group, k, scale, /*launch_with_pdl=*/true, stream, nullptr);
  return cudaGetLastError();
}

}  // namespace peers
