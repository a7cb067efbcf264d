// FlashInfer 0.7.2's radix top-k (include/flashinfer/topk.cuh), called as its binding
// csrc/topk.cu radix_topk does: flashinfer::sampling::TopKDispatch with the caller's row-state
// buffer, int32 indices, no tie-break mode and graph-safety off (flashinfer.top_k's defaults).
#include <cuda_bf16.h>

#include <flashinfer/math.cuh>  // topk.cuh uses math:: without including it (csrc/topk.cu gets it via sampling.cuh)
#include <flashinfer/topk.cuh>

#include "peers.hpp"

namespace peers {

// flashinfer.top_k allocates 1 MiB, zeroed once, and caches it per device.
size_t flashinfer_row_states_bytes() { return size_t{1} << 20; }

cudaError_t flashinfer_radix_topk(Dtype dtype, const void* input, void* values, int32_t* indices,
                                  uint32_t rows, uint32_t n, uint32_t k, void* row_states,
                                  bool sorted, cudaStream_t stream) {
  using flashinfer::sampling::RadixRowState;
  using flashinfer::sampling::TopKTieBreak;
  auto* states = static_cast<RadixRowState*>(row_states);
  // flashinfer.top_k(sorted=True) sorts on the device only in deterministic mode; otherwise it
  // returns to torch.sort. The sorted variant here is the on-device one.
  const bool deterministic = sorted;
  if (dtype == Dtype::f32) {
    return flashinfer::sampling::TopKDispatch<float, int32_t>(
        const_cast<float*>(static_cast<const float*>(input)), indices, static_cast<float*>(values),
        rows, k, n, states, sorted, deterministic, TopKTieBreak::None, stream, false);
  }
  return flashinfer::sampling::TopKDispatch<nv_bfloat16, int32_t>(
      const_cast<nv_bfloat16*>(static_cast<const nv_bfloat16*>(input)), indices,
      static_cast<nv_bfloat16*>(values), rows, k, n, states, sorted, deterministic,
      TopKTieBreak::None, stream, false);
}

}  // namespace peers
