// Device-side building blocks shared by the CUDA top-k kernels: composite ranking keys, row
// addressing and block-wide scans.
#pragma once

#include <cstdint>

#include "core/float_formats.hpp"
#include "core/ordered_key.hpp"
#include "core/problem.hpp"
#include "core/ragged_rows.hpp"
#include "cuda/topk_config.hpp"

namespace mtk {
namespace cuda {

// An element's composite (topk_config.hpp): its key above the complement of its index.
template <class Comp> using CompositePacking = KeyIndexPacking<Comp, 32>;

template <class Key>
__device__ __forceinline__ Composite<Key> make_composite(Key key, uint32_t index) {
  return CompositePacking<Composite<Key>>::pack(key, index);
}

template <class Comp>
__device__ __forceinline__ uint32_t composite_index(Comp c) {
  return CompositePacking<Comp>::index(c);
}

// Same-size unsigned storage, for bit-exact value copies.
template <int Bytes> struct BitsOfSize;
template <> struct BitsOfSize<1> { using type = uint8_t; };
template <> struct BitsOfSize<2> { using type = uint16_t; };
template <> struct BitsOfSize<4> { using type = uint32_t; };
template <> struct BitsOfSize<8> { using type = uint64_t; };
template <class T> using Bits = typename BitsOfSize<int(sizeof(T))>::type;

// row_offsets() of problem.hpp, on the device. The outermost batch dim needs no modulo (the row
// number is already below its size), so the common one-batch-dim case does no 64-bit division,
// which the GPU only has as a long software routine.
__device__ __forceinline__ RowOffsets device_row_offsets(const RowGeometry& g, int64_t row) {
  RowOffsets o{0, 0, 0};
  for (int d = g.batch_ndim - 1; d >= 1; --d) {
    const int64_t i = row % g.batch_sizes[d];
    row /= g.batch_sizes[d];
    o.input += i * g.input_batch_strides[d];
    o.values += i * g.values_batch_strides[d];
    o.indices += i * g.indices_batch_strides[d];
  }
  if (g.batch_ndim > 0) {
    o.input += row * g.input_batch_strides[0];
    o.values += row * g.values_batch_strides[0];
    o.indices += row * g.indices_batch_strides[0];
  }
  return o;
}

// Where one row lives and how to rank its elements.
template <class T>
struct InputRow {
  const T* base;  // element 0 of the row (of its window, for ragged rows)
  int64_t stride;
  int64_t n;
  bool largest;

  __device__ __forceinline__ Composite<typename KeyTraits<T>::Key> composite(int64_t i) const {
    return make_composite(selection_key(base[i * stride], largest), uint32_t(i));
  }
};

// One row of a call as its kernels see it: the offsets of its input (from its window's start)
// and outputs, its window's length, how many winners it has (k, or fewer in a short window) and
// how their indices are written.
struct RowTarget : RowOffsets {
  int64_t length;  // the elements to select from: n, or the window's length
  int64_t count;   // winners: min(k, length)
  RowIndexTransform transform;

  __device__ __forceinline__ int64_t written_index(uint32_t index) const {
    return transform.apply_to_position(index);
  }
};

// Row `row` of a dense call (`ragged` describes none) or of a ragged one.
__device__ __forceinline__ RowTarget device_row_target(const RowGeometry& g,
                                                       const RaggedRows& ragged, int64_t row) {
  RowTarget t;
  static_cast<RowOffsets&>(t) = device_row_offsets(g, row);
  const RaggedWindow window = ragged.window(row, g.n);
  t.input += window.start * g.input_stride;
  t.length = window.length;
  t.count = min(g.k, window.length);
  t.transform = ragged.index_transform(row);
  return t;
}

__device__ __forceinline__ RowTarget device_row_target(const RowGeometry& g, int64_t row) {
  return device_row_target(g, RaggedRows{}, row);
}

template <class T>
__device__ __forceinline__ InputRow<T> input_row(const RowGeometry& g, const T* input,
                                                 const RowTarget& t, bool largest) {
  return InputRow<T>{input + t.input, g.input_stride, t.length, largest};
}

// Writes one of a row's ranked winners: its value's bits (unless values are not wanted) and its
// index (int64/int32) through the row's transform.
template <class T>
__device__ __forceinline__ void write_value_and_index(const RowGeometry& g, void* values,
                                                      void* indices, bool index64,
                                                      const RowTarget& o, int64_t rank,
                                                      Bits<T> bits, uint32_t index) {
  if (values != nullptr) {
    reinterpret_cast<Bits<T>*>(values)[o.values + rank * g.values_stride] = bits;
  }
  const int64_t at = o.indices + rank * g.indices_stride;
  const int64_t written = o.written_index(index);
  if (index64) {
    static_cast<int64_t*>(indices)[at] = written;
  } else {
    static_cast<int32_t*>(indices)[at] = int32_t(written);
  }
}

// Writes one of a row's ranked winners, its value as a bit copy of the input.
template <class T>
__device__ __forceinline__ void write_result(const RowGeometry& g, const T* input, void* values,
                                             void* indices, bool index64, const RowTarget& o,
                                             int64_t rank, uint32_t index) {
  const Bits<T> bits =
      values != nullptr
          ? reinterpret_cast<const Bits<T>*>(input)[o.input + int64_t(index) * g.input_stride]
          : Bits<T>(0);
  write_value_and_index<T>(g, values, indices, index64, o, rank, bits, index);
}

// write_result for a winner known by its composite: where one value alone has its key, the value
// is the key's inverse, so the store waits for no read of the input (a DRAM round trip at the
// end of every row, where nothing hides it). NaNs and zeros are read from the input.
template <class T, class Comp>
__device__ __forceinline__ void write_winner(const RowGeometry& g, const T* input, void* values,
                                             void* indices, bool index64, bool largest,
                                             const RowTarget& o, int64_t rank, Comp winner) {
  using Key = typename KeyTraits<T>::Key;
  static_assert(sizeof(Key) == sizeof(Bits<T>), "keys and values have the same width");
  const uint32_t index = composite_index(winner);
  Key bits;
  if (value_bits_of_selection_key<T>(Key(winner >> 32), largest, bits)) {
    write_value_and_index<T>(g, values, indices, index64, o, rank, bits, index);
  } else {
    write_result(g, input, values, indices, index64, o, rank, index);
  }
}

// Writes padding at `rank` of a short row's outputs: index -1 and all-zero value bits (the
// contract's "Short rows").
template <class T>
__device__ __forceinline__ void write_padding_at(const RowGeometry& g, void* values,
                                                 void* indices, bool index64, const RowTarget& o,
                                                 int64_t rank) {
  if (values != nullptr) {
    reinterpret_cast<Bits<T>*>(values)[o.values + rank * g.values_stride] = Bits<T>(0);
  }
  const int64_t at = o.indices + rank * g.indices_stride;
  if (index64) {
    static_cast<int64_t*>(indices)[at] = -1;
  } else {
    static_cast<int32_t*>(indices)[at] = -1;
  }
}

// Pads ranks [from, to) of a row's outputs, over the block's threads.
template <class T>
__device__ __forceinline__ void write_padding(const RowGeometry& g, void* values, void* indices,
                                              bool index64, const RowTarget& o, int64_t from,
                                              int64_t to) {
  for (int64_t rank = from + threadIdx.x; rank < to; rank += blockDim.x) {
    write_padding_at<T>(g, values, indices, index64, o, rank);
  }
}

// A 16-byte load of input that is read once: not allocated in L1. With __ldg the streaming
// passes ran 1-6% slower (sampling 256x151936 k=50 73.2 against 69.4 us, bf16 2^26 85.0
// against 79.9): lines nobody reads again took the L1 that the loads in flight need.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
#if defined(__CUDA_ARCH__)
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
#else
  return *p;
#endif
}

// A store to global memory through a pointer whose space nvcc cannot see (a generic store
// otherwise).
__device__ __forceinline__ void store_global(int32_t* p, int32_t value) {
#if defined(__CUDA_ARCH__)
  __stcg(p, value);
#else
  *p = value;
#endif
}

// Asks `bytes` of global memory from `p` into L2 without waiting (the copy engine's bulk
// prefetch, sm_90; a hint, so older targets simply skip it). Both must be 16-byte multiples.
__device__ __forceinline__ void prefetch_to_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#else
  (void)p;
  (void)bytes;
#endif
}

// Programmatic dependent launch (sm_90): every kernel is launched so that the GPU may schedule it
// while the kernel before it on the stream drains (launch_overlapped in kernel_launch.cuh), which
// hides each launch's latency. So every kernel calls wait_for_previous_kernel before it touches
// global memory (the caller's kernel may still be writing the input, or reading the outputs), and
// most call allow_next_kernel to let their own successor launch early.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Sum of `value` over the calling lane and the lanes below it; the whole warp calls.
__device__ __forceinline__ uint32_t warp_inclusive_sum(uint32_t value) {
  const uint32_t lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t other = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= uint32_t(offset)) value += other;
  }
  return value;
}

// Sum of `value` over the warp, in every lane; the whole warp calls.
__device__ __forceinline__ uint32_t warp_sum(uint32_t value) {
#pragma unroll
  for (int lane_mask = 16; lane_mask > 0; lane_mask >>= 1) {
    value += __shfl_xor_sync(0xffffffffu, value, lane_mask);
  }
  return value;
}

// Exclusive sum of `value` over all threads with a larger thread index (a suffix sum), plus the
// block total. `scratch` holds one word per warp. Every thread of the block must call it.
template <int Threads>
__device__ __forceinline__ uint32_t block_suffix_sum(uint32_t value, uint32_t* scratch,
                                                     uint32_t& total) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps");
  constexpr int kWarps = Threads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t inclusive = warp_inclusive_sum(value);
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  uint32_t before = 0, sum = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const uint32_t s = scratch[w];
    if (w < warp) before += s;
    sum += s;
  }
  __syncthreads();  // scratch may be reused right after
  total = sum;
  return sum - (before + inclusive);
}

// Given a histogram of the next digit among the elements still in play, finds the digit whose
// bucket holds the `needed`-th largest element: returns it with the count of elements in higher
// buckets (`above`) and in the bucket itself. `hist` is in shared memory; all threads call.
struct BucketChoice {
  uint32_t digit, above, count;
};

template <int Bins, int Threads>
__device__ BucketChoice choose_bucket(const uint32_t* hist, uint32_t needed,
                                      uint32_t* scan_scratch, BucketChoice* result) {
  constexpr int kPerThread = Bins >= Threads ? Bins / Threads : 1;
  const int first = int(threadIdx.x) * kPerThread;
  uint32_t mine = 0;
  if (first < Bins) {
#pragma unroll
    for (int b = 0; b < kPerThread; ++b) mine += hist[first + b];
  }
  uint32_t total;
  const uint32_t higher = block_suffix_sum<Threads>(mine, scan_scratch, total);
  if (first < Bins && higher < needed && needed <= higher + mine) {
    uint32_t running = higher;
    for (int b = kPerThread - 1; b >= 0; --b) {
      const uint32_t c = hist[first + b];
      if (running + c >= needed) {
        *result = BucketChoice{uint32_t(first + b), running, c};
        break;
      }
      running += c;
    }
  }
  __syncthreads();
  const BucketChoice choice = *result;
  __syncthreads();
  return choice;
}

// Appends `take` lanes' items to `out` at an atomically claimed position, one atomic per warp.
template <class Item>
__device__ __forceinline__ void warp_append(bool take, const Item& item, Item* out,
                                            uint32_t* counter) {
  const uint32_t active = __activemask();
  const uint32_t want = __ballot_sync(active, take);
  if (want == 0) return;
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(want) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(counter, uint32_t(__popc(want)));
  base = __shfl_sync(active, base, leader);
  if (take) out[base + __popc(want & ((1u << lane) - 1))] = item;
}

// Claims one slot of `counter` for each calling lane, one atomic per group of converged lanes:
// lanes that spill together wait on one L2 round trip instead of one each on the same address.
__device__ __forceinline__ uint32_t claim_slot_per_lane(uint32_t* counter) {
  const uint32_t active = __activemask();
  const int lane = threadIdx.x & 31;
  const int leader = __ffs(active) - 1;
  uint32_t base = 0;
  if (lane == leader) base = atomicAdd(counter, uint32_t(__popc(active)));
  return __shfl_sync(active, base, leader) + uint32_t(__popc(active & ((1u << lane) - 1)));
}

}  // namespace cuda
}  // namespace mtk
