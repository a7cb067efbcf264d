// FlashInfer 0.7.2's sparse-attention top-k with fused index transforms
// (include/flashinfer/topk.cuh), called as its bindings in csrc/topk.cu call them:
// radix_topk_page_table_transform and radix_topk_ragged_transform, with the caller's row-state
// buffer, no tie-break mode, no row starts and graph-safety off (the Python defaults).
// Float32 scores only: the indexer's logits are float32.
#include <flashinfer/math.cuh>  // topk.cuh uses math:: without including it
#include <flashinfer/topk.cuh>

#include "peers.hpp"

namespace peers {

cudaError_t flashinfer_page_table_transform(const float* scores, int32_t* out,
                                            const int32_t* page_table, int64_t page_table_stride,
                                            int32_t* lengths, uint32_t rows, uint32_t n,
                                            uint32_t k, uint32_t page_size, void* row_states,
                                            bool deterministic, cudaStream_t stream) {
  using namespace flashinfer::sampling;
  if (page_size == 0 || (page_size & (page_size - 1)) != 0) return cudaErrorNotSupported;
  uint32_t page_bits = 0;
  for (uint32_t size = page_size; size > 1; size >>= 1) ++page_bits;
  auto* states = static_cast<RadixRowState*>(row_states);
  auto* input = const_cast<float*>(scores);
  // As the binding: the configurable policy for page_size > 1 (contiguous rows, no raw-index
  // output), the direct policy otherwise.
  if (page_bits != 0) {
    using Policy = ConfigurablePageTableKernelPolicy<int32_t>;
    return TopKPageTableTransformDispatch<float, int32_t, Policy>(
        input, out, page_table, page_table_stride, lengths, nullptr, nullptr, rows, k, n, states,
        deterministic, TopKTieBreak::None, stream, false, nullptr,
        Policy{nullptr, int64_t(n), page_bits});
  }
  return TopKPageTableTransformDispatch<float, int32_t>(
      input, out, page_table, page_table_stride, lengths, nullptr, nullptr, rows, k, n, states,
      deterministic, TopKTieBreak::None, stream, false);
}

cudaError_t flashinfer_ragged_transform(const float* scores, int32_t* out, const int32_t* offsets,
                                        int32_t* lengths, uint32_t rows, uint32_t n, uint32_t k,
                                        void* row_states, bool deterministic,
                                        cudaStream_t stream) {
  using namespace flashinfer::sampling;
  return TopKRaggedTransformDispatch<float, int32_t>(
      const_cast<float*>(scores), out, offsets, lengths, nullptr, rows, k, n,
      static_cast<RadixRowState*>(row_states), deterministic, TopKTieBreak::None, stream, false);
}

}  // namespace peers
