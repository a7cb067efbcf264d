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

// ---- sparse-attention indexer top-k (issue #31): float32 scores [rows, n], int32 lengths [rows]
// read on the device, int32 indices [rows, k] out, -1 where a row has fewer than k keys ----

// FlashInfer 0.7.2 TopKPageTableTransformDispatch (include/flashinfer/topk.cuh) as its binding
// radix_topk_page_table_transform (csrc/topk.cu) calls it: out[r, j] = page_table[r, i /
// page_size] * page_size + i % page_size for each winner i of row r (page_size a power of two;
// the configurable policy when page_size > 1, the direct one otherwise), its filtered or
// multi-CTA radix kernel by its own heuristic, in its default or its deterministic mode.
cudaError_t flashinfer_page_table_transform(const float* scores, int32_t* out,
                                            const int32_t* page_table, int64_t page_table_stride,
                                            int32_t* lengths, uint32_t rows, uint32_t n,
                                            uint32_t k, uint32_t page_size, void* row_states,
                                            bool deterministic, cudaStream_t stream);

// FlashInfer 0.7.2 TopKRaggedTransformDispatch as radix_topk_ragged_transform calls it:
// out[r, j] = offsets[r] + i.
cudaError_t flashinfer_ragged_transform(const float* scores, int32_t* out, const int32_t* offsets,
                                        int32_t* lengths, uint32_t rows, uint32_t n, uint32_t k,
                                        void* row_states, bool deterministic, cudaStream_t stream);

// CUB 3.6.0 cub::DeviceBatchedTopK::MaxPairs with per-segment sizes (cuda::args::
// deferred_sequence over the device lengths, bounded by n rounded up to a power of two, at
// least 8192), unsorted, non-deterministic; `values` [rows, k]
// is scratch it must write. A row shorter than k yields its whole row and leaves the rest of
// its k outputs untouched. With temp == nullptr only the scratch size is written.
cudaError_t cub_batched_topk_lengths(const float* scores, float* values, int32_t* indices,
                                     const int32_t* lengths, int64_t rows, int64_t n, int64_t k,
                                     void* temp, size_t* temp_bytes, cudaStream_t stream);

// vLLM 0.33.0 csrc/sampler.cu: the launchers of torch.ops._C.top_k_per_row_decode (next_n = 1,
// 1-D seq_lens, contiguous rows) and top_k_per_row_prefill, repeated without torch. Decode rows
// of n >= 200000 run in two steps through [rows, 10, k] int32 and float32 scratch, which
// vLLM allocates per call and the harness once (vllm_decode_scratch_bytes, both together).
size_t vllm_decode_scratch_bytes(int64_t rows, int64_t n, int64_t k);
cudaError_t vllm_top_k_per_row_decode(const float* logits, const int32_t* seq_lens,
                                      int32_t* indices, int64_t rows, int64_t n, int64_t k,
                                      void* scratch, cudaStream_t stream);
cudaError_t vllm_top_k_per_row_prefill(const float* logits, const int32_t* row_starts,
                                       const int32_t* row_ends, int32_t* indices, int64_t rows,
                                       int64_t n, int64_t k, cudaStream_t stream);

// ---- LLM sampling (issue #33): logits [rows, n] float32 or bfloat16, probabilities [rows, n]
// float32; per-row parameters are device arrays (nullptr: the scalar) ----

// FlashInfer 0.7.2 RadixTopKMaskLogitsMultiCTA (flashinfer.top_k_mask_logits): the logits of the
// row's top-k and -inf elsewhere, in the logits' dtype; `row_states` as for flashinfer_radix_topk.
cudaError_t flashinfer_top_k_mask_logits(Dtype dtype, const void* logits, void* out,
                                         const int32_t* top_k_arr, uint32_t top_k, uint32_t rows,
                                         uint32_t n, void* row_states, cudaStream_t stream);

// FlashInfer 0.7.2 RadixTopKRenormProbMultiCTA (flashinfer.top_k_renorm_probs, its default
// non-deterministic mode).
cudaError_t flashinfer_top_k_renorm_probs(const float* probs, float* out,
                                          const int32_t* top_k_arr, uint32_t top_k, uint32_t rows,
                                          uint32_t n, void* row_states, cudaStream_t stream);

// FlashInfer 0.7.2 AirTopPRenormProb<false> (flashinfer.top_p_renorm_probs, its default
// non-deterministic mode; TopPRenormProb below 2048 columns, as its binding) with the workspace
// its Python wrapper sizes.
size_t flashinfer_top_p_renorm_workspace_bytes(uint32_t rows, uint32_t n);
cudaError_t flashinfer_top_p_renorm_probs(const float* probs, float* out, const float* top_p_arr,
                                          float top_p, uint32_t rows, uint32_t n, void* workspace,
                                          cudaStream_t stream);

// FlashInfer 0.7.2 MinPSamplingFromProb (flashinfer.min_p_sampling_from_probs, deterministic as
// its default): int32 samples and per-row `valid` flags; its own Philox randoms from seed/offset.
cudaError_t flashinfer_min_p_sampling_from_probs(const float* probs, const float* min_p_arr,
                                                 float min_p, int32_t* samples, bool* valid,
                                                 uint32_t rows, uint32_t n, uint64_t seed,
                                                 uint64_t offset, cudaStream_t stream);

// flashinfer.top_k_top_p_sampling_from_logits's three chains: filter_apply_order="top_k_first"
// (the default) takes its fast path for a scalar top_k <= 256 on >= 65536 columns (sorted
// deterministic radix top-k, softmax of the k survivors, top-p sampling among them) and otherwise
// masks (top_k_mask_logits, softmax, top-p sampling over the vocabulary); "joint" is softmax then
// the fused TopKTopPSamplingFromProb. Deterministic (the default), int32 samples.
enum class FlashinferChain { top_k_first_fast, top_k_first_masked, joint };
FlashinferChain flashinfer_top_k_first_chain(bool per_row_top_k, uint32_t top_k, uint32_t n);
size_t flashinfer_top_k_top_p_scratch_bytes(FlashinferChain chain, uint32_t rows, uint32_t n,
                                            uint32_t top_k);
cudaError_t flashinfer_top_k_top_p_sampling_from_logits(
    FlashinferChain chain, Dtype dtype, const void* logits, const int32_t* top_k_arr,
    uint32_t top_k, const float* top_p_arr, float top_p, int32_t* samples, uint32_t rows,
    uint32_t n, void* row_states, void* scratch, size_t scratch_bytes, uint64_t seed,
    uint64_t offset, cudaStream_t stream);

}  // namespace peers
