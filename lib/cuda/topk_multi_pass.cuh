// The multi-block pipeline's common machinery (see topk_kernels.cuh): a row's segments and how
// a block streams one, the last-block ticket and the digit choice that close a pass, and the
// plain first pass, multi_histogram_kernel, of plans without a sampled threshold.
#pragma once

#include <cstdint>

#include "cuda/device_utils.cuh"
#include "cuda/topk_config.hpp"

namespace mtk {
namespace cuda {

constexpr int kLoadsInFlight = 4;  // 16-byte loads per thread in visit_row_segment's main loop

// Where segment `seg` of `count` elements starts and ends, for `blocks` segments.
// Chunks are whole multiples of 64 elements so that vector loads stay aligned per segment.
__device__ __forceinline__ void segment_bounds(int64_t count, int blocks, int seg, int64_t& begin,
                                               int64_t& end) {
  const int64_t chunk = ((count + blocks - 1) / blocks + 63) / 64 * 64;
  begin = min(count, chunk * seg);
  end = min(count, begin + chunk);
}

// Calls visit(elements, first) for every element in [begin, end) of `row`, spread over the
// block's threads, where `elements` is an array of raw values, one element or a whole 16-byte
// vector, and element e has index first + e. Contiguous rows are read 16 bytes per load with
// four loads in flight per thread, which is what streaming at full memory bandwidth takes when
// a block's segment is only a few hundred kilobytes (with two, sampling rows reached 2.2-2.6
// TB/s); strided ones element by element. A row that starts off a 16-byte boundary (a ragged
// window's start, a sliced tensor) is read in the vectors of the aligned frame that holds it,
// its `skew` elements from that frame's start. Batching lets a visitor pay its per-warp vote
// once per vector rather than per element.
template <int Threads, class T, class Visit>
__device__ __forceinline__ void visit_row_elements(const InputRow<T>& row, int64_t begin,
                                                   int64_t end, Visit&& visit) {
  constexpr int kPerVector = 16 / int(sizeof(T));
  auto visit_one = [&](int64_t i) {
    const T elements[1] = {row.base[i * row.stride]};
    visit(elements, uint32_t(i));
  };
  if (row.stride != 1) {
    for (int64_t i = begin + threadIdx.x; i < end; i += Threads) visit_one(i);
    return;
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(row.base);
  const int64_t skew = int64_t(address & 15) / int64_t(sizeof(T));
  // Vectors of the aligned frame wholly inside [begin, end) of the row, which is [begin + skew,
  // end + skew) of the frame.
  const int64_t first_vector = (begin + skew + kPerVector - 1) / kPerVector;
  const int64_t end_vector = max(first_vector, (end + skew) / kPerVector);
  // The head and tail outside them: fewer than kPerVector elements each.
  const int64_t head_end = min(end, first_vector * kPerVector - skew);
  const int64_t tail_begin = max(head_end, end_vector * kPerVector - skew);
  for (int64_t i = begin + threadIdx.x; i < head_end; i += Threads) visit_one(i);
  for (int64_t i = tail_begin + threadIdx.x; i < end; i += Threads) visit_one(i);

  const uint4* vectors = reinterpret_cast<const uint4*>(address - uintptr_t(address & 15));
  auto visit_vector = [&](const uint4& data, int64_t vector_index) {
    T elements[kPerVector];
    memcpy(elements, &data, 16);
    visit(elements, uint32_t(vector_index * kPerVector - skew));
  };
  int64_t v = first_vector + threadIdx.x;
  for (; v + (kLoadsInFlight - 1) * Threads < end_vector; v += kLoadsInFlight * Threads) {
    uint4 data[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) data[u] = load_streaming(vectors + v + u * Threads);
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) visit_vector(data[u], v + u * Threads);
  }
  for (; v < end_vector; v += Threads) visit_vector(load_streaming(vectors + v), v);
}

// visit_row_elements with each element ranked: visit(items) gets an array of composites.
template <int Threads, class T, class Visit>
__device__ __forceinline__ void visit_row_segment(const InputRow<T>& row, int64_t begin,
                                                  int64_t end, Visit&& visit) {
  using Comp = Composite<typename KeyTraits<T>::Key>;
  visit_row_elements<Threads>(row, begin, end, [&](const auto& elements, uint32_t first) {
    constexpr int kCount = int(sizeof(elements) / sizeof(elements[0]));
    Comp items[kCount];
#pragma unroll
    for (int e = 0; e < kCount; ++e) {
      items[e] = make_composite(selection_key(elements[e], row.largest), first + uint32_t(e));
    }
    visit(items);
  });
}

// The threshold pass streams each segment from its start. The sample kernel reads a few
// kilobytes a row and leaves DRAM idle while it ranks them; asking the head of every segment into
// L2 meanwhile (from the threshold blocks already resident, which are launched early, and from
// the sample blocks for rows of a few segments) lets the pass find its first loads in L2.
template <class T>
__device__ __forceinline__ void prefetch_segment_head(const T* row_base, int64_t stride,
                                                      int64_t begin, int64_t end, uint32_t bytes) {
  if (bytes == 0 || stride != 1) return;
  const uintptr_t first = (reinterpret_cast<uintptr_t>(row_base + begin) + 15) & ~uintptr_t(15);
  const uintptr_t last = reinterpret_cast<uintptr_t>(row_base + end) & ~uintptr_t(15);
  if (last <= first) return;
  prefetch_to_l2(reinterpret_cast<const void*>(first),
                 uint32_t(min(uint64_t(last - first), uint64_t(bytes))));
}

// Global memory fence and ticket: true in exactly one block, the last of the row to arrive,
// which then sees every other block's writes.
__device__ __forceinline__ bool last_block_of_row(uint32_t* ticket, int blocks, uint32_t* flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *flag = atomicAdd(ticket, 1u) == uint32_t(blocks - 1) ? 1u : 0u;
  __syncthreads();
  const bool last = *flag != 0;
  if (last) __threadfence();
  return last;
}

// Adds a block's histogram (in shared memory) to its row's, skipping the bins it did not count.
__device__ __forceinline__ void add_to_row_histogram(uint32_t* row_hist,
                                                     const uint32_t* block_hist) {
  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) {
    if (block_hist[b] != 0) atomicAdd(&row_hist[b], block_hist[b]);
  }
}

// Run by the last block of a pass: picks the next 11-bit digit from the row's global histogram,
// then clears the histogram for the next pass.
template <class Comp>
__device__ void choose_multi_digit(RowState<Comp>* state, uint32_t* sh_hist, uint32_t* scan,
                                   BucketChoice* choice_slot) {
  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) {
    sh_hist[b] = __ldcg(&state->hist[b]);
    state->hist[b] = 0;
  }
  __syncthreads();
  const uint32_t needed = state->needed;
  const BucketChoice choice =
      choose_bucket<kMultiBins, kMultiThreads>(sh_hist, needed, scan, choice_slot);
  if (threadIdx.x == 0) {
    state->prefix = (state->prefix << kMultiDigitBits) | Comp(choice.digit);
    state->resolved += kMultiDigitBits;
    state->digit_bits = kMultiDigitBits;
    state->needed = needed - choice.above;
    state->in_bucket = choice.count;
  }
}

// The shared memory of a multi-block pass: the block's histogram, the scratch of its scans and
// bucket choice, and the last-block flag.
struct MultiPassShared {
  uint32_t hist[kMultiBins];
  uint32_t scan[kMultiThreads / 32];
  BucketChoice choice;
  uint32_t last_flag;
  uint32_t bucket_next;  // place_winners_by_bins: the block's next slot in the k-th's bucket
};

// One block's share of the first exact pass over a row: the top digit of every element, then
// the row's last block chooses it. A row without winners (an empty window) is complete at once.
template <class T, class Comp>
__device__ void histogram_pass(const RowGeometry& g, const T* input, bool largest,
                               const MultiLayout& layout, RowState<Comp>* state,
                               const RowTarget& o, int seg, MultiPassShared& pass) {
  constexpr int kBits = kCompositeBits<typename KeyTraits<T>::Key>;
  const InputRow<T> source = input_row(g, input, o, largest);

  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) pass.hist[b] = 0;
  __syncthreads();
  int64_t begin, end;
  segment_bounds(o.length, layout.blocks_per_row, seg, begin, end);
  visit_row_segment<kMultiThreads>(source, begin, end, [&](const auto& items) {
    constexpr int kCount = int(sizeof(items) / sizeof(items[0]));
#pragma unroll
    for (int e = 0; e < kCount; ++e) {
      atomicAdd(&pass.hist[uint32_t(items[e] >> (kBits - kMultiDigitBits))], 1u);
    }
  });
  __syncthreads();
  add_to_row_histogram(state->hist, pass.hist);
  if (last_block_of_row(&state->blocks_done, layout.blocks_per_row, &pass.last_flag)) {
    if (threadIdx.x == 0) {
      state->needed = uint32_t(o.count);
      state->blocks_done = 0;
      state->complete = o.count == 0 ? 1u : 0u;
    }
    __syncthreads();
    if (o.count > 0) choose_multi_digit(state, pass.hist, pass.scan, &pass.choice);
  }
}

// The first pass of plans without a sampled threshold (their rows' states start zeroed).
template <class T>
__global__ void __launch_bounds__(kMultiThreads)
    multi_histogram_kernel(RowGeometry g, const T* input, bool largest, MultiLayout layout,
                           RowState<Composite<typename KeyTraits<T>::Key>>* states,
                           RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  __shared__ MultiPassShared pass;
  const int64_t row = blockIdx.x / layout.blocks_per_row;
  const int seg = int(blockIdx.x % layout.blocks_per_row);
  histogram_pass(g, input, largest, layout, states + row, device_row_target(g, ragged, row), seg,
                 pass);
}

}  // namespace cuda
}  // namespace mtk
