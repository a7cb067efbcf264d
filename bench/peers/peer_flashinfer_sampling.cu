// FlashInfer 0.7.2's sampling kernels (include/flashinfer/sampling.cuh, topk.cuh, air_top_p.cuh),
// called as its bindings csrc/renorm.cu and csrc/sampling.cu call them, with the defaults of its
// Python API (flashinfer/sampling.py). Where the Python API chains kernels with torch ops
// (top_k_top_p_sampling_from_logits), the chain is repeated here: torch.softmax becomes
// FlashInfer's own OnlineSoftmax (flashinfer.sampling.softmax), `.float()` of bfloat16 a widening
// kernel, and the fast path's `gather` a one-thread-per-row kernel.
#include <cuda_bf16.h>

#include <flashinfer/math.cuh>  // topk.cuh uses math:: without including it
#include <flashinfer/air_top_p.cuh>
#include <flashinfer/sampling.cuh>
#include <flashinfer/topk.cuh>

#include "peers.hpp"

namespace peers {
namespace {

using flashinfer::sampling::RadixRowState;

// flashinfer.softmax's cached workspace (its vocab-splitting path keeps per-slice partials there).
constexpr size_t kSoftmaxWorkspaceBytes = size_t{1} << 20;
// flashinfer/sampling.py: the "top_k_first" fast path's bounds.
constexpr uint32_t kFastPathMaxK = 256, kFastPathMinVocab = 65536;

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Carves aligned pieces out of the caller's scratch, in order; nullptr once it runs out.
class Carver {
 public:
  Carver(void* base, size_t bytes) : next_(static_cast<uint8_t*>(base)), left_(bytes) {}
  template <class T>
  T* take(size_t count) {
    const size_t bytes = align256(count * sizeof(T));
    if (next_ == nullptr || bytes > left_) {
      next_ = nullptr;
      return nullptr;
    }
    T* piece = reinterpret_cast<T*>(next_);
    next_ += bytes;
    left_ -= bytes;
    return piece;
  }

 private:
  uint8_t* next_;
  size_t left_;
};

__global__ void widen_bf16(const nv_bfloat16* in, float* out, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

cudaError_t widen(const void* in, float* out, size_t count, cudaStream_t stream) {
  const unsigned blocks = unsigned(std::min<size_t>((count + 255) / 256, 4096));
  widen_bf16<<<blocks, 256, 0, stream>>>(static_cast<const nv_bfloat16*>(in), out, count);
  return cudaGetLastError();
}

// The fast path's final step: the token sampled among a row's k survivors, as a vocabulary index.
__global__ void gather_tokens(const int32_t* local, const int32_t* survivors, uint32_t rows,
                              uint32_t k, int32_t* samples) {
  const uint32_t r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) {  // torch's gather would fault on an index outside [0, k): clamp instead
    const uint32_t j = uint32_t(min(max(local[r], 0), int32_t(k) - 1));
    samples[r] = survivors[size_t(r) * k + j];
  }
}

// The float32 logits the chain's softmax reads: the input itself, or its widened copy.
cudaError_t as_float(Dtype dtype, const void* logits, float* widened, size_t count,
                     const float** out, cudaStream_t stream) {
  if (dtype == Dtype::f32) {
    *out = static_cast<const float*>(logits);
    return cudaSuccess;
  }
  *out = widened;
  return widen(logits, widened, count, stream);
}

cudaError_t softmax(const float* logits, float* probs, uint32_t rows, uint32_t n, void* workspace,
                    cudaStream_t stream) {
  return flashinfer::sampling::OnlineSoftmax<float>(const_cast<float*>(logits), probs, rows, n,
                                                    nullptr, 1.0f, workspace,
                                                    kSoftmaxWorkspaceBytes, true, stream);
}

}  // namespace

cudaError_t flashinfer_top_k_mask_logits(Dtype dtype, const void* logits, void* out,
                                         const int32_t* top_k_arr, uint32_t top_k, uint32_t rows,
                                         uint32_t n, void* row_states, cudaStream_t stream) {
  auto* states = static_cast<RadixRowState*>(row_states);
  auto* arr = const_cast<int32_t*>(top_k_arr);
  if (dtype == Dtype::f32) {
    return flashinfer::sampling::RadixTopKMaskLogitsMultiCTA<float, int>(
        const_cast<float*>(static_cast<const float*>(logits)), static_cast<float*>(out), arr,
        rows, top_k, n, states, stream);
  }
  return flashinfer::sampling::RadixTopKMaskLogitsMultiCTA<nv_bfloat16, int>(
      const_cast<nv_bfloat16*>(static_cast<const nv_bfloat16*>(logits)),
      static_cast<nv_bfloat16*>(out), arr, rows, top_k, n, states, stream);
}

cudaError_t flashinfer_top_k_renorm_probs(const float* probs, float* out,
                                          const int32_t* top_k_arr, uint32_t top_k, uint32_t rows,
                                          uint32_t n, void* row_states, cudaStream_t stream) {
  return flashinfer::sampling::RadixTopKRenormProbMultiCTA<float, int>(
      const_cast<float*>(probs), out, const_cast<int32_t*>(top_k_arr), rows, top_k, n,
      static_cast<RadixRowState*>(row_states), false, stream);
}

size_t flashinfer_top_p_renorm_workspace_bytes(uint32_t rows, uint32_t n) {
  namespace air = flashinfer::sampling::air_top_p;
  // AirTopPRenormProb's own layout, non-deterministic (float histograms), as the Python sizes it.
  return align256(sizeof(air::Counter<float>) * rows) +
         align256(sizeof(air::HisT<false, float>) * air::NUM_BUCKETS * rows) +
         align256(sizeof(air::IdxT) * air::NUM_BUCKETS * rows) +
         2 * align256(sizeof(float) * size_t(air::calcBufLen<float>(n)) * rows);
}

cudaError_t flashinfer_top_p_renorm_probs(const float* probs, float* out, const float* top_p_arr,
                                          float top_p, uint32_t rows, uint32_t n, void* workspace,
                                          cudaStream_t stream) {
  namespace sampling = flashinfer::sampling;
  auto* in = const_cast<float*>(probs);
  auto* arr = const_cast<float*>(top_p_arr);
  if (n < uint32_t(sampling::air_top_p::NUM_BUCKETS))  // the binding's small-vocab fallback
    return sampling::TopPRenormProb<float>(in, out, arr, rows, top_p, n, stream);
  return sampling::air_top_p::AirTopPRenormProb<false, float>(in, out, arr, rows, top_p, n,
                                                              workspace, stream);
}

cudaError_t flashinfer_min_p_sampling_from_probs(const float* probs, const float* min_p_arr,
                                                 float min_p, int32_t* samples, bool* valid,
                                                 uint32_t rows, uint32_t n, uint64_t seed,
                                                 uint64_t offset, cudaStream_t stream) {
  return flashinfer::sampling::MinPSamplingFromProb<float, int32_t>(
      const_cast<float*>(probs), const_cast<float*>(min_p_arr), samples, valid, nullptr, rows,
      min_p, n, true, nullptr, seed, nullptr, offset, stream);
}

FlashinferChain flashinfer_top_k_first_chain(bool per_row_top_k, uint32_t top_k, uint32_t n) {
  const bool fast = !per_row_top_k && top_k > 0 && top_k <= kFastPathMaxK &&
                    n >= kFastPathMinVocab && top_k < n;
  return fast ? FlashinferChain::top_k_first_fast : FlashinferChain::top_k_first_masked;
}

size_t flashinfer_top_k_top_p_scratch_bytes(FlashinferChain chain, uint32_t rows, uint32_t n,
                                            uint32_t top_k) {
  const size_t full = size_t(rows) * n, survivors = size_t(rows) * top_k;
  // the softmax workspace, the sampler's `valid` flags, the fast path's local samples
  const size_t bytes = align256(kSoftmaxWorkspaceBytes) + align256(rows) +
                       align256(rows * sizeof(int32_t));
  if (chain == FlashinferChain::top_k_first_fast) {
    // survivors' values (either dtype), their f32 copy, indices, probabilities
    return bytes + 4 * align256(survivors * sizeof(float));
  }
  // masked logits (either dtype), their f32 copy, the probabilities
  return bytes + 3 * align256(full * sizeof(float));
}

cudaError_t flashinfer_top_k_top_p_sampling_from_logits(
    FlashinferChain chain, Dtype dtype, const void* logits, const int32_t* top_k_arr,
    uint32_t top_k, const float* top_p_arr, float top_p, int32_t* samples, uint32_t rows,
    uint32_t n, void* row_states, void* scratch, size_t scratch_bytes, uint64_t seed,
    uint64_t offset, cudaStream_t stream) {
  namespace sampling = flashinfer::sampling;
  Carver carve(scratch, scratch_bytes);
  void* softmax_workspace = carve.take<uint8_t>(kSoftmaxWorkspaceBytes);
  bool* valid = carve.take<bool>(rows);
  auto* local = carve.take<int32_t>(rows);
  const size_t element = dtype == Dtype::f32 ? 4 : 2;
  auto* top_p_ptr = const_cast<float*>(top_p_arr);
  cudaError_t e = cudaSuccess;
  if (chain == FlashinferChain::top_k_first_fast) {
    const size_t survivors = size_t(rows) * top_k;
    void* values = carve.take<uint8_t>(survivors * element);
    auto* values_f32 = carve.take<float>(survivors);
    auto* indices = carve.take<int32_t>(survivors);
    auto* probs = carve.take<float>(survivors);
    if (probs == nullptr) return cudaErrorInvalidValue;
    // top_k(x, k, sorted=True, deterministic=True), softmax of the k values, top-p sampling
    // among them, then the survivor's vocabulary index.
    const float* values_float = nullptr;
    if ((e = flashinfer_radix_topk(dtype, logits, values, indices, rows, n, top_k, row_states,
                                   true, stream)) != cudaSuccess ||
        (e = as_float(dtype, values, values_f32, survivors, &values_float, stream)) !=
            cudaSuccess ||
        (e = softmax(values_float, probs, rows, top_k, softmax_workspace, stream)) !=
            cudaSuccess ||
        (e = sampling::TopPSamplingFromProb<float, int32_t>(probs, local, valid, nullptr,
                                                            top_p_ptr, rows, top_p, top_k, true,
                                                            nullptr, seed, nullptr, offset,
                                                            stream)) != cudaSuccess)
      return e;
    gather_tokens<<<(rows + 127) / 128, 128, 0, stream>>>(local, indices, rows, top_k, samples);
    return cudaGetLastError();
  }
  const size_t full = size_t(rows) * n;
  void* masked = carve.take<uint8_t>(full * element);
  auto* masked_f32 = carve.take<float>(full);
  auto* probs = carve.take<float>(full);
  if (probs == nullptr) return cudaErrorInvalidValue;
  const float* float_logits = nullptr;
  if (chain == FlashinferChain::joint) {
    // softmax(logits), then the fused top-k + top-p rejection sampler.
    if ((e = as_float(dtype, logits, masked_f32, full, &float_logits, stream)) != cudaSuccess ||
        (e = softmax(float_logits, probs, rows, n, softmax_workspace, stream)) != cudaSuccess)
      return e;
    return sampling::TopKTopPSamplingFromProb<float, int32_t>(
        probs, const_cast<int32_t*>(top_k_arr), top_p_ptr, samples, valid, nullptr, rows,
        int32_t(top_k), top_p, n, true, nullptr, seed, nullptr, offset, stream);
  }
  // top_k_mask_logits, softmax of the masked logits, top-p sampling over the full vocabulary.
  if ((e = flashinfer_top_k_mask_logits(dtype, logits, masked, top_k_arr, top_k, rows, n,
                                        row_states, stream)) != cudaSuccess ||
      (e = as_float(dtype, masked, masked_f32, full, &float_logits, stream)) != cudaSuccess ||
      (e = softmax(float_logits, probs, rows, n, softmax_workspace, stream)) != cudaSuccess)
    return e;
  return sampling::TopPSamplingFromProb<float, int32_t>(probs, samples, valid, nullptr, top_p_ptr,
                                                        rows, top_p, n, true, nullptr, seed,
                                                        nullptr, offset, stream);
}

}  // namespace peers
