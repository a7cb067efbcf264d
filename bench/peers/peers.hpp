// The peers' kernels behind plain functions, so the driver (main.cu) includes no peer header and
// each peer compiles in its own translation unit with its own include paths (CUB 3.5 from
// nvidia-cuda-cccl for peer_cub_topk.cu, the toolkit's CCCL elsewhere). Every function only
// enqueues work on `stream` (nothing synchronises, nothing allocates), so it can be captured in
// a CUDA graph. Sources: bench/peers/third_party/ (fetched by fetch.py).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace peers {

enum class Dtype { f32, bf16 };

// FlashInfer 0.7.2 flashinfer::sampling::TopKDispatch (include/flashinfer/topk.cuh): its own
// choice of FilteredTopK or the multi-CTA RadixTopK, int32 indices, output unsorted (as
// flashinfer.top_k(sorted=False), its default) or, with `sorted`, in deterministic mode followed by
// its on-device stable sort by value (what flashinfer.top_k(sorted=True, deterministic=True)
// runs). `row_states` is flashinfer_row_states_bytes() of zeroed device memory, reused by every
// call (as the Python wrapper caches it).
size_t flashinfer_row_states_bytes();
cudaError_t flashinfer_radix_topk(Dtype dtype, const void* input, void* values, int32_t* indices,
                                  uint32_t rows, uint32_t n, uint32_t k, void* row_states,
                                  bool sorted, cudaStream_t stream);

// CUB 3.5 (nvidia-cuda-cccl 13.3) cub::DeviceBatchedTopK::MaxPairs over `rows` contiguous
// segments of n <= 2^21 (its per-segment limit), and cub::DeviceTopK::MaxPairs over one
// sequence of n; both unsorted, non-deterministic (the only configuration CUB 3.5 implements),
// int32 indices. With temp == nullptr only the scratch size is written to *temp_bytes.
constexpr int64_t kCubBatchedMaxLen = int64_t{1} << 21;
cudaError_t cub_batched_topk(Dtype dtype, const void* input, void* values, int32_t* indices,
                             int64_t rows, int64_t n, int64_t k, void* temp, size_t* temp_bytes,
                             cudaStream_t stream);
cudaError_t cub_device_topk(Dtype dtype, const void* input, void* values, int32_t* indices,
                            int64_t n, int64_t k, void* temp, size_t* temp_bytes,
                            cudaStream_t stream);

// vLLM 0.33.0 csrc/moe/topk_softmax_kernels.cu: vllm::moe::topkGatingKernelLauncher with
// SCORING_SOFTMAX on bfloat16 logits [T, E], float32 weights and int32 ids [T, k] (what
// torch.ops._moe_C.topk_softmax launches). `token_expert_indices` [T, k] int32 is an output it
// also writes; `workspace` is T * E floats (used when E is not a power of two or E > 256 needs
// the unfused path).
cudaError_t vllm_topk_softmax(const void* logits_bf16, float* weights, int32_t* ids,
                              int32_t* token_expert_indices, float* workspace, int tokens,
                              int experts, int k, bool renormalize, cudaStream_t stream);

// vLLM 0.33.0 csrc/moe/grouped_topk_kernels.cu: vllm::moe::invokeNoAuxTc<bf16, float, int32,
// SCORING_SIGMOID> (torch.ops._moe_C.grouped_topk with scoring_func=1): DeepSeek-V3 routing,
// sigmoid of bfloat16 logits, float32 bias for selection, n_group groups of which topk_group are
// kept by their top-2 sum; PDL enabled for T <= 16 as vLLM's entry point does.
cudaError_t vllm_grouped_topk(const void* logits_bf16, float* weights, int32_t* ids,
                              const float* bias, int64_t tokens, int64_t experts,
                              int64_t n_group, int64_t topk_group, int64_t k, bool renormalize,
                              double scale, cudaStream_t stream);

// FlashInfer 0.7.2 csrc/fused_moe/noAuxTcKernels.cu (TensorRT-LLM's noAuxTc):
// invokeNoAuxTc<bf16, float, bf16, int32> as flashinfer.fused_topk_deepseek calls it (PDL on, its
// default): DeepSeek-V3 routing of bfloat16 logits with a float32 bias; the weights [T, k] come
// out in bfloat16 (the scores' dtype), always renormalised, times `scale`.
cudaError_t flashinfer_noaux_tc(const void* logits_bf16, void* weights_bf16, int32_t* ids,
                                const float* bias, int64_t tokens, int64_t experts,
                                int64_t n_group, int64_t topk_group, int64_t k, double scale,
                                cudaStream_t stream);

}  // namespace peers
