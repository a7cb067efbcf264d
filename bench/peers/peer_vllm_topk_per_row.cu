// vLLM 0.33.0's sparse-attention indexer top-k (csrc/sampler.cu, cut by fetch.py before its
// torch entry points): the launchers of top_k_per_row_decode and top_k_per_row_prefill repeated
// for the CUDA build (the ROCm branches dropped), with the decode path's per-call torch::empty
// scratch replaced by one caller buffer.
#include "sampler.cu"

#include "peers.hpp"

namespace peers {
namespace {

constexpr int kSortingAlgorithmThreshold = 12288;
constexpr int kSplitWorkThreshold = 200 * 1000;
constexpr int kNumThreadsPerBlock = 512;
constexpr int kBlocksPerRow = 10;  // multipleBlocksPerRowConfig off ROCm

}  // namespace

size_t vllm_decode_scratch_bytes(int64_t rows, int64_t n, int64_t k) {
  if (n < kSplitWorkThreshold) return 0;
  return size_t(rows) * kBlocksPerRow * size_t(k) * (sizeof(int32_t) + sizeof(float));
}

cudaError_t vllm_top_k_per_row_decode(const float* logits, const int32_t* seq_lens,
                                      int32_t* indices, int64_t rows, int64_t n, int64_t k,
                                      void* scratch, cudaStream_t stream) {
  const int next_n = 1, seq_lens_2d = 0, stride0 = int(n), stride1 = 1, top_k = int(k);
  const unsigned grid = unsigned(rows);
  if (n < kSortingAlgorithmThreshold) {
    vllm::topKPerRowDecode<kNumThreadsPerBlock, false>
        <<<grid, kNumThreadsPerBlock, top_k * sizeof(int32_t), stream>>>(
            logits, seq_lens, indices, stride0, stride1, top_k, next_n, seq_lens_2d);
  } else if (n < kSplitWorkThreshold) {
    vllm::topKPerRowDecode<kNumThreadsPerBlock, true>
        <<<grid, kNumThreadsPerBlock, top_k * sizeof(int32_t), stream>>>(
            logits, seq_lens, indices, stride0, stride1, top_k, next_n, seq_lens_2d);
  } else {
    auto* aux_indices = static_cast<int32_t*>(scratch);
    auto* aux_logits =
        reinterpret_cast<float*>(aux_indices + size_t(rows) * kBlocksPerRow * size_t(k));
    vllm::topKPerRowDecode<kNumThreadsPerBlock, true, true>
        <<<dim3(grid, kBlocksPerRow), kNumThreadsPerBlock, 2 * top_k * sizeof(int32_t),
           stream>>>(logits, seq_lens, aux_indices, stride0, stride1, top_k, next_n,
                     seq_lens_2d, aux_logits);
    constexpr int kNumThreadsPerBlockMerge = 1024;
    vllm::topKPerRowDecode<kNumThreadsPerBlockMerge, true, false, true>
        <<<grid, kNumThreadsPerBlockMerge, top_k * sizeof(int32_t), stream>>>(
            aux_logits, seq_lens, indices, kBlocksPerRow * top_k, 1, top_k, next_n, seq_lens_2d,
            nullptr, kBlocksPerRow, aux_indices);
  }
  return cudaGetLastError();
}

cudaError_t vllm_top_k_per_row_prefill(const float* logits, const int32_t* row_starts,
                                       const int32_t* row_ends, int32_t* indices, int64_t rows,
                                       int64_t n, int64_t k, cudaStream_t stream) {
  const int stride0 = int(n), stride1 = 1, top_k = int(k);
  const int insertion_blocks = std::min(int(rows), kSortingAlgorithmThreshold);
  vllm::topKPerRowPrefill<kNumThreadsPerBlock, false>
      <<<insertion_blocks, kNumThreadsPerBlock, top_k * sizeof(int32_t), stream>>>(
          logits, row_starts, row_ends, indices, stride0, stride1, top_k, 0);
  if (rows > kSortingAlgorithmThreshold) {
    vllm::topKPerRowPrefill<kNumThreadsPerBlock, true>
        <<<unsigned(rows - kSortingAlgorithmThreshold), kNumThreadsPerBlock,
           top_k * sizeof(int32_t), stream>>>(logits, row_starts, row_ends, indices, stride0,
                                              stride1, top_k, kSortingAlgorithmThreshold);
  }
  return cudaGetLastError();
}

}  // namespace peers
