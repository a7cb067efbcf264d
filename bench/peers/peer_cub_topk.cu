// CUB's DeviceBatchedTopK and DeviceTopK (CUB 3.5, nvidia-cuda-cccl 13.3): compiled with
// -Ithird_party/cccl/include ahead of the toolkit's CCCL 3.0, which lacks them. The batched call
// follows flashinfer-python 0.7.2's csrc/cub_topk.cu (strided per-row iterators, indices from a
// counting iterator, a compile-time bound on the segment size in two tiers: 8192, where CUB can
// use its single-block backend, and 2^21, its limit).
#include <cub/device/device_batched_topk.cuh>
#include <cub/device/device_topk.cuh>
#include <cuda/argument>
#include <cuda/iterator>
#include <cuda/std/execution>
#include <cuda/execution.require.h>
#include <cuda/execution.determinism.h>
#include <cuda/execution.tie_break.h>
#include <cuda/execution.output_ordering.h>
#include <cuda_bf16.h>

#include <type_traits>

#include "peers.hpp"

namespace peers {
namespace {

auto unsorted_requirements() {
  namespace exec = cuda::execution;
  return exec::require(exec::determinism::not_guaranteed, exec::tie_break::unspecified,
                       exec::output_ordering::unsorted);
}

template <int64_t Bound, class T>
cudaError_t batched(const T* input, T* values, int32_t* indices, int64_t rows, int64_t n,
                    int64_t k, void* temp, size_t* temp_bytes, cudaStream_t stream) {
  auto keys_in = cuda::make_strided_iterator(cuda::make_counting_iterator(input), n);
  auto keys_out = cuda::make_strided_iterator(cuda::make_counting_iterator(values), k);
  auto values_in = cuda::make_constant_iterator(cuda::make_counting_iterator(int32_t{0}));
  auto values_out = cuda::make_strided_iterator(cuda::make_counting_iterator(indices), k);
  auto k_arg = cuda::args::immediate{k, cuda::args::bounds<int64_t{1}, Bound>()};
  auto sizes = cuda::args::immediate{n, cuda::args::bounds<int64_t{1}, Bound>()};
  auto segments = cuda::args::immediate{rows};
  auto env = cuda::std::execution::env{unsorted_requirements(), cuda::stream_ref{stream}};
  return cub::DeviceBatchedTopK::MaxPairs(temp, *temp_bytes, keys_in, keys_out, values_in,
                                          values_out, sizes, k_arg, segments, env);
}

template <class T>
cudaError_t batched_tier(const T* input, T* values, int32_t* indices, int64_t rows, int64_t n,
                         int64_t k, void* temp, size_t* temp_bytes, cudaStream_t stream) {
  if (n <= 8192) return batched<8192>(input, values, indices, rows, n, k, temp, temp_bytes, stream);
  return batched<kCubBatchedMaxLen>(input, values, indices, rows, n, k, temp, temp_bytes, stream);
}

template <class T>
cudaError_t single(const T* input, T* values, int32_t* indices, int64_t n, int64_t k, void* temp,
                   size_t* temp_bytes, cudaStream_t stream) {
  auto env = cuda::std::execution::env{
      cuda::execution::require(cuda::execution::determinism::not_guaranteed,
                               cuda::execution::output_ordering::unsorted),
      cuda::stream_ref{stream}};
  return cub::DeviceTopK::MaxPairs(temp, *temp_bytes, input, values,
                                   cuda::make_counting_iterator(int32_t{0}), indices, n, k, env);
}

template <int64_t Bound>
cudaError_t batched_lengths(const float* input, float* values, int32_t* indices,
                            const int32_t* lengths, int64_t rows, int64_t n, int64_t k, void* temp,
                            size_t* temp_bytes, cudaStream_t stream) {
  auto keys_in = cuda::make_strided_iterator(cuda::make_counting_iterator(input), n);
  auto keys_out = cuda::make_strided_iterator(cuda::make_counting_iterator(values), k);
  auto values_in = cuda::make_constant_iterator(cuda::make_counting_iterator(int32_t{0}));
  auto values_out = cuda::make_strided_iterator(cuda::make_counting_iterator(indices), k);
  auto k_arg = cuda::args::immediate{k, cuda::args::bounds<int64_t{1}, Bound>()};
  auto sizes =
      cuda::args::deferred_sequence{lengths, cuda::args::bounds<int32_t{0}, int32_t(Bound)>()};
  auto segments = cuda::args::immediate{rows};
  auto env = cuda::std::execution::env{unsorted_requirements(), cuda::stream_ref{stream}};
  return cub::DeviceBatchedTopK::MaxPairs(temp, *temp_bytes, keys_in, keys_out, values_in,
                                          values_out, sizes, k_arg, segments, env);
}

}  // namespace

cudaError_t cub_batched_topk_lengths(const float* scores, float* values, int32_t* indices,
                                     const int32_t* lengths, int64_t rows, int64_t n, int64_t k,
                                     void* temp, size_t* temp_bytes, cudaStream_t stream) {
  if (n > kCubBatchedMaxLen) return cudaErrorNotSupported;
  // The row dimension bounds every length: the tightest power-of-two bound of the shapes here,
  // since CUB sizes its launch by the bound (its documentation asks for the tightest one).
  auto call = [&](auto bound) {
    return batched_lengths<decltype(bound)::value>(scores, values, indices, lengths, rows, n, k,
                                                   temp, temp_bytes, stream);
  };
  if (n <= 8192) return call(std::integral_constant<int64_t, 8192>{});
  if (n <= 16384) return call(std::integral_constant<int64_t, 16384>{});
  if (n <= 131072) return call(std::integral_constant<int64_t, 131072>{});
  if (n <= 262144) return call(std::integral_constant<int64_t, 262144>{});
  return call(std::integral_constant<int64_t, kCubBatchedMaxLen>{});
}

cudaError_t cub_batched_topk(Dtype dtype, const void* input, void* values, int32_t* indices,
                             int64_t rows, int64_t n, int64_t k, void* temp, size_t* temp_bytes,
                             cudaStream_t stream) {
  if (n > kCubBatchedMaxLen || k > n) return cudaErrorNotSupported;
  if (dtype == Dtype::f32) {
    return batched_tier(static_cast<const float*>(input), static_cast<float*>(values), indices,
                        rows, n, k, temp, temp_bytes, stream);
  }
  return batched_tier(static_cast<const __nv_bfloat16*>(input), static_cast<__nv_bfloat16*>(values),
                      indices, rows, n, k, temp, temp_bytes, stream);
}

cudaError_t cub_device_topk(Dtype dtype, const void* input, void* values, int32_t* indices,
                            int64_t n, int64_t k, void* temp, size_t* temp_bytes,
                            cudaStream_t stream) {
  if (dtype == Dtype::f32) {
    return single(static_cast<const float*>(input), static_cast<float*>(values), indices, n, k,
                  temp, temp_bytes, stream);
  }
  return single(static_cast<const __nv_bfloat16*>(input), static_cast<__nv_bfloat16*>(values),
                indices, n, k, temp, temp_bytes, stream);
}

}  // namespace peers
