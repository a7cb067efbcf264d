// The CUDA top-k kernels. Every kernel ranks elements by their composite (see device_utils.cuh)
// and selects the k largest, so dtype, direction and ties never appear below the load.
//
// Shape classes (the host-side plan in topk_plan.hpp picks one):
//  - warp_topk_kernel (topk_warp_kernels.cuh): a warp per short row, the MoE routing shapes.
//  - block_select_kernel: a block per row, for many medium rows. Radix select over 8-bit digits
//    of the composite on the row itself, winners gathered and sorted in shared memory.
//  - cluster_select_kernel (topk_cluster_kernel.cuh): a thread-block cluster per row, for a few
//    rows of up to 256k elements: the block kernel's radix select with the row's slices held in
//    the cluster's registers and each digit's histograms summed over distributed shared memory,
//    in one launch.
//  - the multi-block pipeline, for long rows and few of them: several blocks per row build an
//    11-bit histogram of the top digit (multi_histogram_kernel), then filter the row
//    (multi_filter_kernel): elements above the chosen bucket are winners, those inside it become
//    candidates in scratch while their next digit is histogrammed; a second filter pass narrows
//    the candidates again, and one block per row resolves the last bits (finish_kernel) and
//    sorts (or, from a sampled threshold's key-prefix bins, ranks each winner within its bin).
//    When a bucket overflows the candidate buffer (heavy ties), the next pass re-reads the
//    input instead, so scratch stays bounded and any input is handled.
//    Large inputs with k small next to the row replace the first histogram by a sampled
//    threshold (multi_sample_kernel, split over blocks when the rows are few, and
//    multi_threshold_kernel): the input is read once, the passes above continue on the
//    candidates alone (or the finish takes them all at once, up to 16k; past that, where the
//    key-prefix bins leave the k-th's bucket within a block, the first filter launch places the
//    winners in their bins' ranges for the finish), and a missed threshold falls back to a
//    histogram pass (in the first filter launch) and one filter pass over the input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/key_threshold.hpp"
#include "cuda/device_utils.cuh"
#include "cuda/topk_plan.hpp"
#include "cuda/topk_warp_kernels.cuh"

namespace mtk {
namespace cuda {

constexpr int kBlockThreads = 512;       // block_select_kernel and finish_kernel
constexpr int kMultiThreads = 256;       // multi-block passes
constexpr int kMultiDigitBits = 11;
constexpr int kMultiBins = 1 << kMultiDigitBits;
constexpr int kBlockDigitBits = 8;
constexpr int kBlockBins = 1 << kBlockDigitBits;
constexpr int kSortCapacity = 2048;      // winners sorted in shared memory up to this k
constexpr int kMultiPasses = 2;          // multi-block filter passes before the finish
// A split sample (see multi_sample_kernel): the wide sample's 16384 keys over this many blocks
// per row, each leaving its `rank` largest for the threshold pass's blocks to merge.
constexpr int kSplitSampleParts = 16;
constexpr uint32_t kSplitSampleMaxRank = 16;

// ---------------------------------------------------------------------------------------------
// Block-wide radix refinement, shared by block_select_kernel and finish_kernel.

// The selection so far: elements whose top `resolved` composite bits equal `prefix` are still in
// play (`in_bucket` of them); `needed` more winners must come from them.
template <class Comp>
struct Selection {
  Comp prefix;
  int resolved;
  uint32_t needed;
  uint32_t in_bucket;

  // Keeps the bucket that `choice` names among the next `width` bits' digits.
  __device__ __forceinline__ void narrow(const BucketChoice& choice, int width) {
    prefix = (prefix << width) | Comp(choice.digit);
    resolved += width;
    needed -= choice.above;
    in_bucket = choice.count;
  }
};

template <int Bits, class Comp>
__device__ __forceinline__ bool has_prefix(Comp c, Comp prefix, int resolved) {
  return resolved == 0 || (c >> (Bits - resolved)) == prefix;
}

template <class Comp>
struct BufferSource {
  const Comp* items;
  int64_t n;
  __device__ __forceinline__ Comp composite(int64_t i) const { return items[i]; }
};

template <class Comp>
struct BlockShared {
  uint32_t hist[kBlockBins];
  uint32_t scan[kBlockThreads / 32];
  BucketChoice choice;
  uint32_t winner_count;
  Comp winners[kSortCapacity];
};

// Whether the finish kernel places winners by key-prefix bins (finish_by_key_bins): with
// 128-bit composites the bins leave no room beside BlockShared in 48 KB, so those keep the sort.
template <class Comp>
constexpr bool kFinishByKeyBins = sizeof(Comp) <= 8;

// The finish kernel's shared memory: BlockShared, the k-th's bucket when it starts small, and
// the threshold pass's key-prefix bins above it (see finish_by_key_bins).
template <class Comp>
struct FinishShared {
  static constexpr int kBins = kFinishByKeyBins<Comp> ? kMultiBins : 1;
  BlockShared<Comp> block;
  uint32_t bucket_count;
  Comp bucket[kBlockThreads];
  uint32_t bin_count[kBins];
  uint32_t bin_next[kBins];

  // Gathers c into the bucket; a broken invariant (more than a block of them) cannot overrun it.
  __device__ __forceinline__ void add_to_bucket(Comp c) {
    const uint32_t slot = atomicAdd(&bucket_count, 1u);
    if (slot < uint32_t(kBlockThreads)) bucket[slot] = c;
  }
};

// How many of items[begin, end) rank above c: its rank among them, composites being unique.
template <class Comp>
__device__ __forceinline__ uint32_t count_above(const Comp* items, uint32_t begin, uint32_t end,
                                                Comp c) {
  uint32_t above = 0;
#pragma unroll 4
  for (uint32_t j = begin; j < end; ++j) above += items[j] > c ? 1u : 0u;
  return above;
}

// Calls visit(c) for every composite of `source`, spread over the block's Threads threads.
// Loads are issued in batches so that each thread waits for one memory latency per batch, not
// per element: these loops run once per digit in a single block (or over a short buffer in a
// few blocks), where nothing else hides that latency.
constexpr int kCompositeBatch = 4;  // loads per thread in flight in for_each_composite

template <int Threads = kBlockThreads, class Source, class Visit>
__device__ __forceinline__ void for_each_composite(const Source& source, Visit&& visit) {
  constexpr int kBatch = kCompositeBatch;
  using Comp = decltype(source.composite(0));
  for (int64_t first = threadIdx.x; first < source.n; first += int64_t(Threads) * kBatch) {
    Comp batch[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = first + int64_t(u) * Threads;
      batch[u] = i < source.n ? source.composite(i) : Comp(0);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (first + int64_t(u) * Threads < source.n) visit(batch[u]);
    }
  }
}

// Narrows `sel` digit by digit over `source` (elements outside `sel`'s prefix are ignored) until
// its bucket holds exactly the winners still needed. Every thread returns the same selection.
template <int Bits, class Comp, class Source>
__device__ Selection<Comp> block_refine(const Source& source, Selection<Comp> sel,
                                        BlockShared<Comp>& sh) {
  // A full-width prefix names one element (composites are unique), so the loop always ends
  // there at the latest; the bound only keeps a broken invariant from spinning.
  while (sel.in_bucket != sel.needed && sel.resolved < Bits) {
    const int width = min(kBlockDigitBits, Bits - sel.resolved);
    const int shift = Bits - sel.resolved - width;
    for (int b = threadIdx.x; b < kBlockBins; b += kBlockThreads) sh.hist[b] = 0;
    __syncthreads();
    for_each_composite(source, [&](Comp c) {
      if (has_prefix<Bits>(c, sel.prefix, sel.resolved)) {
        atomicAdd(&sh.hist[uint32_t(c >> shift) & ((1u << width) - 1)], 1u);
      }
    });
    __syncthreads();
    const BucketChoice choice =
        choose_bucket<kBlockBins, kBlockThreads>(sh.hist, sel.needed, sh.scan, &sh.choice);
    sel.narrow(choice, width);
  }
  return sel;
}

// Elements of `source` under `start`'s prefix that rank at or above `final`'s prefix: exactly
// start.needed of them once block_refine has produced `final`.
template <int Bits, class Comp>
__device__ __forceinline__ bool is_winner(Comp c, const Selection<Comp>& start,
                                          const Selection<Comp>& final_sel) {
  if (!has_prefix<Bits>(c, start.prefix, start.resolved)) return false;
  return final_sel.resolved == 0 || (c >> (Bits - final_sel.resolved)) >= final_sel.prefix;
}

template <class Comp>
__device__ __forceinline__ Comp shuffle_xor(Comp value, int lane_mask) {
  if constexpr (sizeof(Comp) == 8) {
    return Comp(__shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(value), lane_mask));
  } else {
    const unsigned long long low = static_cast<unsigned long long>(value);
    const unsigned long long high = static_cast<unsigned long long>(value >> 64);
    return (Comp(__shfl_xor_sync(0xffffffffu, high, lane_mask)) << 64) |
           Comp(__shfl_xor_sync(0xffffffffu, low, lane_mask));
  }
}

// A bitonic sort's compare-exchanges of one (span, stride) stage, on the two adjacent elements a
// lane holds (a at the even index `first`, b after it) when stride < kWarpSortSpan: the partner
// of each is in the same lane (stride 1) or in lane ^ stride / 2 of the same warp.
template <class Comp>
__device__ __forceinline__ void warp_bitonic_stage(Comp& a, Comp& b, int first, int span,
                                                   int stride) {
  const bool descending = (first & span) == 0;
  if (stride == 1) {
    if (descending ? a < b : a > b) {
      const Comp t = a;
      a = b;
      b = t;
    }
    return;
  }
  const Comp partner_a = shuffle_xor(a, stride >> 1), partner_b = shuffle_xor(b, stride >> 1);
  const bool keep_larger = ((first & stride) == 0) == descending;
  a = (a > partner_a) == keep_larger ? a : partner_a;
  b = (b > partner_b) == keep_larger ? b : partner_b;
}

// Elements a warp sorts in registers, two per lane: bitonic stages with a smaller stride need no
// barrier.
constexpr int kWarpSortSpan = 64;

// Runs, for every span from first_span to last_span, the stages with strides below
// kWarpSortSpan, in registers, on each warp's groups of kWarpSortSpan elements of items[0, size).
template <class Comp>
__device__ void warp_bitonic_stages(Comp* items, int size, int first_span, int last_span) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  for (int group = warp; group * kWarpSortSpan < size; group += kBlockThreads / 32) {
    const int first = group * kWarpSortSpan + 2 * lane;
    Comp a = items[first], b = items[first + 1];
    for (int span = first_span; span <= last_span; span <<= 1) {
      for (int stride = min(span, kWarpSortSpan) >> 1; stride > 0; stride >>= 1) {
        warp_bitonic_stage(a, b, first, span, stride);
      }
    }
    items[first] = a;
    items[first + 1] = b;
  }
}

// Sorts `count` composites in shared memory into descending order (bitonic; zero padding sinks
// to the end) and writes the row's outputs. Stages whose stride is below kWarpSortSpan run in
// registers (warp_bitonic_stages), so a sort of 1024 takes 14 barriers instead of 55.
template <class T, class Comp>
__device__ void sort_and_write(BlockShared<Comp>& sh, int count, const RowGeometry& g,
                               const T* input, void* values, void* indices, bool index64,
                               bool largest, const RowOffsets& o) {
  static_assert(kSortCapacity % kWarpSortSpan == 0, "whole warp groups");
  int size = kWarpSortSpan;
  while (size < count) size <<= 1;
  for (int i = count + threadIdx.x; i < size; i += kBlockThreads) sh.winners[i] = Comp(0);
  __syncthreads();
  warp_bitonic_stages(sh.winners, size, 2, kWarpSortSpan);
  __syncthreads();
  for (int span = 2 * kWarpSortSpan; span <= size; span <<= 1) {
    for (int stride = span >> 1; stride >= kWarpSortSpan; stride >>= 1) {
      for (int i = threadIdx.x; i < size; i += kBlockThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const Comp a = sh.winners[i], b = sh.winners[j];
          const bool descending = (i & span) == 0;
          if (descending ? a < b : a > b) {
            sh.winners[i] = b;
            sh.winners[j] = a;
          }
        }
      }
      __syncthreads();
    }
    warp_bitonic_stages(sh.winners, size, span, span);
    __syncthreads();
  }
  for (int r = threadIdx.x; r < count; r += kBlockThreads) {
    write_winner(g, input, values, indices, index64, largest, o, r, sh.winners[r]);
  }
}

template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    block_select_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                        bool largest) {
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  constexpr int kBits = kCompositeBits<Key>;
  __shared__ BlockShared<Comp> sh;
  const int64_t row = blockIdx.x;
  const RowOffsets o = device_row_offsets(g, row);
  const InputRow<T> source{input + o.input, g.input_stride, g.n, largest};

  const Selection<Comp> start{Comp(0), 0, uint32_t(g.k), uint32_t(g.n)};
  const Selection<Comp> final_sel = block_refine<kBits>(source, start, sh);
  if (threadIdx.x == 0) sh.winner_count = 0;
  __syncthreads();
  for_each_composite(source, [&](Comp c) {
    if (is_winner<kBits>(c, start, final_sel)) sh.winners[atomicAdd(&sh.winner_count, 1u)] = c;
  });
  __syncthreads();
  sort_and_write(sh, int(g.k), g, input, values, indices, index64, largest, o);
}

// ---------------------------------------------------------------------------------------------
// Multi-block pipeline for long rows.

template <class Comp>
struct RowState {
  Comp prefix;
  uint32_t resolved;
  uint32_t needed;
  uint32_t in_bucket;
  uint32_t winners;           // written to the row's winner list so far
  uint32_t source_is_buffer;  // the bucket's elements are all in the current candidate buffer
  uint32_t source_count;      // how many, when they are
  uint32_t next_count;        // candidates written by the pass running now
  uint32_t blocks_done;       // pass-completion ticket: the last block finalises the pass
  uint32_t complete;          // all k winners are written
  uint32_t fallback;          // the sampled threshold missed: run the exact passes on the input
  uint32_t finish_direct;     // few candidates: the finish kernel selects from all of them
  uint32_t winners_placed;    // ... placed in their key-prefix bins' ranges by a filter launch
  uint32_t digit_bits;        // width of the digit the last choice appended to the prefix
  uint32_t filters_done;      // the finish kernel takes the bucket as it is
  uint32_t in_first_output;   // ... from the first filter pass's output buffer
  Comp threshold;             // sampled plans: candidates are the composites at or above it
  uint32_t threshold_shift;   // sampled plans: the threshold pass's key bins are 2^shift wide
  uint32_t hist[kMultiBins];  // winners_placed: each bin's end in the row's output ranks
  // Split samples: each part's largest keys (as composites' low bits), `rank` per part. The
  // sample kernel clears the fields above only.
  Comp sample_tops[kSplitSampleParts * kSplitSampleMaxRank];
};

struct MultiLayout {
  int blocks_per_row;
  int64_t capacity;  // candidate slots per row and buffer
  uint32_t l2_prefetch_bytes = 0;  // sampled plans: see prefetch_segment_head
  uint32_t split_sample_rank = 0;  // split samples: the rank, whose parts' tops the pass merges
};

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
// vector, and element e has index first + e. Contiguous, 16-byte aligned rows are read 16 bytes
// per load with four loads in flight per thread, which is what streaming at full memory bandwidth
// takes when a block's segment is only a few hundred kilobytes (with two, sampling rows reached
// 2.2-2.6 TB/s); others element by element. Batching lets a visitor pay its per-warp vote once
// per vector rather than per element.
template <int Threads, class T, class Visit>
__device__ __forceinline__ void visit_row_elements(const InputRow<T>& row, int64_t begin,
                                                   int64_t end, Visit&& visit) {
  constexpr int kPerVector = 16 / int(sizeof(T));
  auto visit_one = [&](int64_t i) {
    const T elements[1] = {row.base[i * row.stride]};
    visit(elements, uint32_t(i));
  };
  const bool vectorizable =
      row.stride == 1 && (reinterpret_cast<uintptr_t>(row.base) & 15) == 0;
  if (!vectorizable) {
    for (int64_t i = begin + threadIdx.x; i < end; i += Threads) visit_one(i);
    return;
  }
  const int64_t first_vector = (begin + kPerVector - 1) / kPerVector;
  const int64_t end_vector = max(first_vector, end / kPerVector);
  // The unaligned head and tail: fewer than kPerVector elements each.
  const int64_t head_end = min(end, first_vector * kPerVector);
  const int64_t tail_begin = max(head_end, end_vector * kPerVector);
  for (int64_t i = begin + threadIdx.x; i < head_end; i += Threads) visit_one(i);
  for (int64_t i = tail_begin + threadIdx.x; i < end; i += Threads) visit_one(i);

  const uint4* vectors = reinterpret_cast<const uint4*>(row.base);
  auto visit_vector = [&](const uint4& data, int64_t vector_index) {
    T elements[kPerVector];
    memcpy(elements, &data, 16);
    visit(elements, uint32_t(vector_index * kPerVector));
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

// The threshold pass histograms its candidates by key, as the distance above the threshold
// key in units of 2^threshold_shift keys (the sample kernel picks the shift so that its sample's
// keys above the threshold span under 512 units; 8- and 16-bit keys mostly get 0, whole keys).
// A bin is then a key prefix, and the pass ends knowing the prefix of the k-th's key: the finish
// kernel or the filter passes start from that bucket instead of the empty prefix. The last bin
// takes every farther key; when the k-th falls there (a row whose top keys spread far beyond
// its sample's), the row takes the exact passes over the input.
// Key arithmetic in at least 32 bits, and 64 only for 64-bit keys.
template <class Key>
using WideKey = std::conditional_t<(sizeof(Key) > 4), uint64_t, uint32_t>;

template <class Key>
__device__ __forceinline__ uint32_t threshold_key_bin(Key key, Key threshold_key, int shift) {
  const WideKey<Key> units = WideKey<Key>(key >> shift) - WideKey<Key>(threshold_key >> shift);
  return uint32_t(min(units, WideKey<Key>(kMultiBins - 1)));
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

// The bin of the k-th's key: the key prefix the threshold pass chose, counted from the
// threshold's.
template <class Key, class Comp>
__device__ __forceinline__ uint32_t kth_key_bin(const RowState<Comp>* state) {
  const Key threshold_key = Key(state->threshold >> 32);
  const int key_shift = int(state->threshold_shift);
  return uint32_t(WideKey<Key>(Key(state->prefix)) - WideKey<Key>(threshold_key >> key_shift));
}

// One block's share of the first exact pass over a row: the top digit of every element, then
// the row's last block chooses it.
template <class T, class Comp>
__device__ void histogram_pass(const RowGeometry& g, const T* input, bool largest,
                               const MultiLayout& layout, RowState<Comp>* state, int64_t row,
                               int seg, MultiPassShared& pass) {
  constexpr int kBits = kCompositeBits<typename KeyTraits<T>::Key>;
  const RowOffsets o = device_row_offsets(g, row);
  const InputRow<T> source{input + o.input, g.input_stride, g.n, largest};

  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) pass.hist[b] = 0;
  __syncthreads();
  int64_t begin, end;
  segment_bounds(g.n, layout.blocks_per_row, seg, begin, end);
  visit_row_segment<kMultiThreads>(source, begin, end, [&](const auto& items) {
    constexpr int kCount = int(sizeof(items) / sizeof(items[0]));
#pragma unroll
    for (int e = 0; e < kCount; ++e) {
      atomicAdd(&pass.hist[uint32_t(items[e] >> (kBits - kMultiDigitBits))], 1u);
    }
  });
  __syncthreads();
  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) {
    if (pass.hist[b] != 0) atomicAdd(&state->hist[b], pass.hist[b]);
  }
  if (last_block_of_row(&state->blocks_done, layout.blocks_per_row, &pass.last_flag)) {
    if (threadIdx.x == 0) {
      state->needed = uint32_t(g.k);
      state->blocks_done = 0;
    }
    __syncthreads();
    choose_multi_digit(state, pass.hist, pass.scan, &pass.choice);
  }
}

// The first pass of plans without a sampled threshold (their rows' states start zeroed).
template <class T>
__global__ void __launch_bounds__(kMultiThreads)
    multi_histogram_kernel(RowGeometry g, const T* input, bool largest, MultiLayout layout,
                           RowState<Composite<typename KeyTraits<T>::Key>>* states) {
  wait_for_previous_kernel();
  allow_next_kernel();
  __shared__ MultiPassShared pass;
  const int64_t row = blockIdx.x / layout.blocks_per_row;
  const int seg = int(blockIdx.x % layout.blocks_per_row);
  histogram_pass(g, input, largest, layout, states + row, row, seg, pass);
}

// ---------------------------------------------------------------------------------------------
// Sampled threshold: one read of the input instead of two.
//
// One block per row ranks a strided sample of the row and takes the key of its
// `sample_rank`-th largest element as a threshold; the plan picks the rank so that the row's
// elements at or above it are, with overwhelming probability, at least k and few enough for the
// candidate buffer. One pass over the input then copies exactly those elements to the buffer and
// histograms their top digit, and the exact radix passes continue on the buffer alone. The top k
// of the row are always among the candidates when there are at least k of them, so the result
// is exact whatever the sample says; when the count misses (too few, or more than the buffer
// holds: adversarial or heavily tied data), the row falls back to the passes over the input.

constexpr int kSampleThreads = 512;
constexpr int kNarrowSamplesPerThread = 4;   // 2048 samples: rows up to a few million
constexpr int kWideSamplesPerThread = 32;    // 16384 samples: huge rows
constexpr int kSamplePrefetchSegments = 8;   // see prefetch_segment_head

// The shift of the threshold pass's key bins (see threshold_key_bin): 512 units span the
// sample's keys from the threshold to its largest.
template <class Key>
__device__ __forceinline__ uint32_t key_bin_shift(Key largest_key, Key threshold_key) {
  const uint64_t span = uint64_t(largest_key) - uint64_t(threshold_key);
  const int span_bits = span == 0 ? 0 : 64 - __clzll(static_cast<long long>(span));
  return uint32_t(max(0, span_bits - 9));
}

// Ranks the sample and initialises the row's state (so sampled plans need no memset). The
// threshold is the lower edge of the narrowest key bucket that holds the sample's
// `sample_rank`-th largest key: exact when the bucket narrows to one key, and never above it.
//
// A split sample (Parts blocks per row, for rows too few to fill the GPU) spreads the same
// sample over the blocks: one block ranking 16384 keys is bound by its own instruction chains
// (9.7 us for bf16 2^26). Each part leaves its `sample_rank` largest keys in the row state
// instead, and the threshold pass's blocks merge them (merge_split_sample): the union of the
// parts' tops holds the sample's top, so its `sample_rank`-th largest is the sample's, exactly.
template <class T, int SamplesPerThread, int Parts = 1>
__global__ void __launch_bounds__(kSampleThreads)
    multi_sample_kernel(RowGeometry g, const T* input, bool largest, uint32_t sample_rank,
                        MultiLayout layout,
                        RowState<Composite<typename KeyTraits<T>::Key>>* states) {
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  constexpr int kKeyBits = int(sizeof(Key)) * 8;
  constexpr int kWarps = kSampleThreads / 32;
  constexpr int kSamples = kSampleThreads * SamplesPerThread * Parts;
  __shared__ uint32_t hist[kBlockBins];
  __shared__ uint32_t scan[kWarps];
  __shared__ BucketChoice choice;

  const int64_t row = blockIdx.x / Parts;
  const int part = int(blockIdx.x % Parts);
  RowState<Comp>* state = states + row;
  // The parts share the clearing; the tops are each part's to write.
  uint32_t* state_words = reinterpret_cast<uint32_t*>(state);
  constexpr size_t kClearedWords = offsetof(RowState<Comp>, sample_tops) / 4;
  for (size_t w = size_t(part) * kSampleThreads + threadIdx.x; w < kClearedWords;
       w += size_t(Parts) * kSampleThreads) {
    state_words[w] = 0;
  }
  const RowOffsets o = device_row_offsets(g, row);
  const T* base = input + o.input;
  // The sample is kSamples / 32 runs of 32 adjacent elements, one run per warp load, centred
  // in equal strata of the row: spread over the whole row and deterministic, and each load is
  // one contiguous segment rather than 32 scattered ones (scattered loads made this kernel a
  // sizeable part of a sampling call). A part takes a contiguous share of the runs.
  constexpr int kRuns = kSamples / 32;
  const int lane = int(threadIdx.x & 31);
  // The sample's largest key sets the width of the threshold pass's key bins; kept as a running
  // maximum of the loads (a pass over keys[] after the rank loop cost the kernel 22 registers).
  using Wide = WideKey<Key>;
  Key keys[SamplesPerThread];
  Wide largest_key = 0;
#pragma unroll
  for (int j = 0; j < SamplesPerThread; ++j) {
    const uint64_t run = uint64_t(part) * (SamplesPerThread * kWarps) + uint64_t(j) * kWarps +
                         (threadIdx.x >> 5);
    const int64_t centre = int64_t((2 * run + 1) * uint64_t(g.n) / (2 * uint64_t(kRuns)));
    const int64_t start = min(max(centre - 16, int64_t(0)), g.n - 32);
    keys[j] = selection_key(base[(start + lane) * g.input_stride], largest);
    if (Wide(keys[j]) > largest_key) largest_key = Wide(keys[j]);
  }
  // One block's copy engine issues a few segments' prefetches quickly, not a huge row's hundreds.
  const int segment = int(threadIdx.x);
  if (Parts == 1 && layout.blocks_per_row <= kSamplePrefetchSegments &&
      segment < layout.blocks_per_row) {
    int64_t begin, end;
    segment_bounds(g.n, layout.blocks_per_row, segment, begin, end);
    prefetch_segment_head(base, g.input_stride, begin, end, layout.l2_prefetch_bytes);
  }

  Key prefix = 0;
  int resolved = 0;
  uint32_t needed = sample_rank;
  while (resolved < kKeyBits) {
    const int shift = kKeyBits - resolved - kBlockDigitBits;
    for (int b = threadIdx.x; b < kBlockBins; b += kSampleThreads) hist[b] = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < SamplesPerThread; ++j) {
      if (resolved == 0 || (keys[j] >> (shift + kBlockDigitBits)) == prefix) {
        atomicAdd(&hist[uint32_t(keys[j] >> shift) & (kBlockBins - 1)], 1u);
      }
    }
    __syncthreads();
    const BucketChoice c = choose_bucket<kBlockBins, kSampleThreads>(hist, needed, scan, &choice);
    prefix = Key((prefix << kBlockDigitBits) | Key(c.digit));
    resolved += kBlockDigitBits;
    needed -= c.above;
    if (c.count == needed) break;  // every key of the bucket ranks within sample_rank
  }
  const Key threshold_key = resolved < kKeyBits ? Key(prefix << (kKeyBits - resolved)) : prefix;
  if constexpr (Parts == 1) {
    __shared__ Wide warp_max[kWarps];
    for (int offset = 16; offset > 0; offset >>= 1) {
      largest_key = max(largest_key, Wide(__shfl_xor_sync(0xffffffffu, largest_key, offset)));
    }
    if (lane == 0) warp_max[threadIdx.x >> 5] = largest_key;
    __syncthreads();  // also: the state is cleared before thread 0 writes into it
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarps; ++w) largest_key = max(largest_key, warp_max[w]);
      state->threshold = Comp(threshold_key) << 32;
      state->threshold_shift = key_bin_shift(Key(largest_key), threshold_key);
    }
  } else {
    // The part's top: its keys above the bucket's lower edge (fewer than sample_rank when the
    // bucket narrowed to one key, else at most that), then the edge itself for the rest, which
    // are then the bucket's keys equal to it; written in descending order for the merge.
    static_assert(kSplitSampleMaxRank <= kSampleThreads, "a key a thread");
    __shared__ uint32_t above_edge;
    __shared__ Key top[kSplitSampleMaxRank];
    if (threadIdx.x == 0) above_edge = 0;
    __syncthreads();
#pragma unroll
    for (int j = 0; j < SamplesPerThread; ++j) {
      if (keys[j] > threshold_key) top[atomicAdd(&above_edge, 1u)] = keys[j];
    }
    __syncthreads();
    if (threadIdx.x >= above_edge && threadIdx.x < sample_rank) top[threadIdx.x] = threshold_key;
    __syncthreads();
    if (threadIdx.x < sample_rank) {
      const Key mine = top[threadIdx.x];
      uint32_t rank = 0;  // ties ranked by slot
      for (uint32_t t = 0; t < sample_rank; ++t) {
        rank += top[t] > mine || (top[t] == mine && t < threadIdx.x) ? 1u : 0u;
      }
      state->sample_tops[size_t(part) * sample_rank + rank] = Comp(mine);
    }
  }
}

// Run by every threshold block of a row whose sample was split: the sample_rank-th largest of the
// parts' tops (ties counted) is the threshold, the largest sets the key bins' shift. One warp
// merges the parts' descending lists, a lane's head each, taking the largest head sample_rank
// times: ranking every key against all the others instead kept every SM's issue slots busy
// for ~4 us (bf16 2^26's pass 42.0 -> 47.2 us).
template <class Key, class Comp>
__device__ void merge_split_sample(const RowState<Comp>* state, uint32_t sample_rank,
                                   Key& threshold_key, int& key_shift) {
  static_assert(kSplitSampleParts * kSplitSampleMaxRank <= kMultiThreads, "a key a thread");
  static_assert(kSplitSampleParts <= 32, "a part a lane");
  __shared__ Key tops[kSplitSampleParts * kSplitSampleMaxRank];
  __shared__ Key ranked, largest_key;
  const uint32_t count = uint32_t(kSplitSampleParts) * sample_rank;
  if (threadIdx.x < count) tops[threadIdx.x] = Key(state->sample_tops[threadIdx.x]);
  __syncthreads();
  if (threadIdx.x < 32) {
    using Wide = WideKey<Key>;
    const int lane = int(threadIdx.x);
    const bool lists = lane < kSplitSampleParts;
    uint32_t position = 0;  // below sample_rank: each step advances one list
    Wide taken = 0;
    for (uint32_t step = 0; step < sample_rank; ++step) {
      const Wide head = lists ? Wide(tops[uint32_t(lane) * sample_rank + position]) : Wide(0);
      taken = warp_max(head);
      const uint32_t from = __ffs(__ballot_sync(0xffffffffu, lists && head == taken)) - 1;
      if (uint32_t(lane) == from) ++position;
      if (step == 0 && lane == 0) largest_key = Key(taken);
    }
    if (lane == 0) ranked = Key(taken);
  }
  __syncthreads();
  threshold_key = ranked;
  key_shift = int(key_bin_shift(largest_key, ranked));
}

// Up to this many candidates the finish kernel ranks them all itself: two more multi-block
// passes cost more in launches and row-state round trips than they save it. Past it, one block
// reads the buffer too slowly (~30 GB/s from L2: bf16 2^26's 28.6k candidates took the finish
// 15 us), so a row whose key-prefix bins leave the k-th's bucket within a block has its winners
// placed in their bins' ranges by the first filter launch's blocks instead (start_bin_ranges).
constexpr uint32_t kDirectFinishCandidates = 16384;

// The most comparisons the finish may spend ranking each winner against the others of its
// key-prefix bin: the sum over the bins above the k-th's of their squared sizes. Adjacent
// winners share a bin, so a warp's lanes scan the same range: at this budget a thread makes ~512
// comparisons. bf16 2^26's ties of a key (35 bins of up to 110 elements, 62k in all) took 15.1
// us in the finish this way, 22.8 us through the sort (a limit of 64 elements per bin,
// measured). Counts are capped before squaring so the sums fit 32 bits; a capped bin alone
// exceeds the budget.
constexpr uint32_t kBinRankingBudget = uint32_t(kSortCapacity) * 128;
constexpr uint32_t kBinRankingCountCap = 1024;
static_assert(kBinRankingCountCap * kBinRankingCountCap > kBinRankingBudget, "cap above budget");

// The comparisons that ranking within bins would take (see kBinRankingBudget), each of the
// block's threads holding some bins' counts: every thread returns the block's total.
template <int Threads, int BinsPerThread>
__device__ __forceinline__ uint32_t bin_ranking_work(const uint32_t (&counts)[BinsPerThread],
                                                     uint32_t* scan) {
  uint32_t work = 0;
#pragma unroll
  for (int u = 0; u < BinsPerThread; ++u) {
    const uint32_t capped = min(counts[u], kBinRankingCountCap);
    work += capped * capped;
  }
  uint32_t total;
  block_suffix_sum<Threads>(work, scan, total);
  return total;
}

// Run by the threshold pass's last block on a direct row past kDirectFinishCandidates whose
// k-th's bucket fits a block: turns the row's histogram counts of the bins above the k-th's
// into each bin's first output rank (higher bins rank first), so that the first filter launch
// can place the winners (place_winners_by_bins), and leaves each bin's end there. Returns
// false, writing nothing, when ranking within those bins would exceed kBinRankingBudget; every
// thread returns the same. `counts_in` is the histogram in shared memory.
template <class Comp>
__device__ bool start_bin_ranges(RowState<Comp>* state, const uint32_t* counts_in,
                                 uint32_t kth_bin, uint32_t* scan) {
  constexpr int kBinsPerThread = kMultiBins / kMultiThreads;
  static_assert(kMultiBins % kMultiThreads == 0, "whole bins per thread");
  const int first = int(threadIdx.x) * kBinsPerThread;
  uint32_t counts[kBinsPerThread];
  uint32_t mine = 0;
#pragma unroll
  for (int u = 0; u < kBinsPerThread; ++u) {
    counts[u] = uint32_t(first + u) > kth_bin ? counts_in[first + u] : 0u;
    mine += counts[u];
  }
  if (bin_ranking_work<kMultiThreads>(counts, scan) > kBinRankingBudget) return false;
  uint32_t above;
  uint32_t next = block_suffix_sum<kMultiThreads>(mine, scan, above);
#pragma unroll
  for (int u = kBinsPerThread - 1; u >= 0; --u) {
    if (uint32_t(first + u) > kth_bin) state->hist[first + u] = next;
    next += counts[u];
  }
  return true;
}

// Candidates a threshold thread stages in its own slots of shared memory before spilling to
// global appends. Own slots need no atomic: a candidate costs one shared store, where a
// block-wide counter cost each an atomic whose result the next store waited for (the k = 1024
// pass ran 61 us against 42 for k = 50). The stage's size is the plan's choice: the shared
// memory of four resident blocks slows the streaming itself (a 32 KB stage cost the pass over
// 2^28 16%, 24 KB 3%), so only plans expecting more than two candidates a thread take the
// large one. A sampling row of 150k with k = 1024 leaves ~5.4 a thread: with 12 slots one
// thread in 260 spills there.
constexpr int kSmallThresholdStageBytes = 8192;
constexpr int kLargeThresholdStageBytes = 24576;
template <class Entry, int StageBytes>
constexpr int kThresholdSlotsPerThread = int(StageBytes / (kMultiThreads * sizeof(Entry)));

// A staged candidate of the threshold pass: its raw bits above its index, in a composite's width
// (so the stage takes no more shared memory than composites would).
template <class T> using StageEntry = Composite<typename KeyTraits<T>::Key>;

template <class T>
__device__ __forceinline__ StageEntry<T> stage_entry(const T& value, uint32_t index) {
  Bits<T> bits;
  memcpy(&bits, &value, sizeof(T));
  return (StageEntry<T>(bits) << 32) | StageEntry<T>(index);
}

template <class T>
__device__ __forceinline__ T stage_value(StageEntry<T> entry) {
  const Bits<T> bits = Bits<T>(entry >> 32);
  T value;
  memcpy(&value, &bits, sizeof(T));
  return value;
}

template <class Entry>
__device__ __forceinline__ uint32_t stage_index(Entry entry) { return uint32_t(entry); }

// Resident threshold blocks per SM that the register budget must allow: the plan sizes the
// grid to one wave of them. Sixteen 1-byte elements per vector need more registers than four
// blocks leave (ptxas spilled over a kilobyte per thread), so those get two.
constexpr int threshold_blocks_per_sm(int element_bytes) { return element_bytes == 1 ? 2 : 4; }

// The one read of the input for sampled plans: candidates (the elements that pass the row's
// threshold test, see key_threshold.hpp) go to the buffer and their top digit to the row's
// histogram. The last block of the row then either leaves few candidates to the finish kernel
// alone, or chooses the first digit over them for the filter passes, or, when the threshold
// missed, clears what the pass left and flags the row for the exact passes over the input.
//
// Candidates are staged in shared memory and copied out once per block: a global atomic whose
// result a warp waits for costs an L2 round trip, and on a single long row every warp would wait
// on the same counter. Beyond the stage's capacity they go straight to the buffer.
template <class T, int StageBytes>
__global__ void __launch_bounds__(kMultiThreads, threshold_blocks_per_sm(int(sizeof(T))))
    multi_threshold_kernel(RowGeometry g, const T* input, bool largest, MultiLayout layout,
                           RowState<Composite<typename KeyTraits<T>::Key>>* states,
                           Composite<typename KeyTraits<T>::Key>* candidates,
                           CandidateHistogram histogram) {
  const int64_t row = blockIdx.x / layout.blocks_per_row;
  const int seg = int(blockIdx.x % layout.blocks_per_row);
  const RowOffsets o = device_row_offsets(g, row);
  int64_t begin, end;
  segment_bounds(g.n, layout.blocks_per_row, seg, begin, end);
  // The input is not an earlier kernel's output: its prefetch need not wait.
  if (threadIdx.x == 0) {
    prefetch_segment_head(input + o.input, g.input_stride, begin, end, layout.l2_prefetch_bytes);
  }
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  __shared__ MultiPassShared pass;
  constexpr int kSlots = kThresholdSlotsPerThread<StageEntry<T>, StageBytes>;
  __shared__ StageEntry<T> staged[kSlots][kMultiThreads];
  __shared__ uint32_t staged_base;

  RowState<Comp>* state = states + row;
  Key threshold_key;
  int key_shift;
  if (layout.split_sample_rank > 0) {
    merge_split_sample(state, layout.split_sample_rank, threshold_key, key_shift);
    // For the kernels after this one; every block of the row holds the same.
    if (seg == 0 && threadIdx.x == 0) {
      state->threshold = Comp(threshold_key) << 32;
      state->threshold_shift = uint32_t(key_shift);
    }
  } else {
    threshold_key = Key(state->threshold >> 32);
    key_shift = int(state->threshold_shift);
  }
  const uint32_t capacity = uint32_t(layout.capacity);
  Comp* row_candidates = candidates + row * layout.capacity;

  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) pass.hist[b] = 0;
  __syncthreads();
  int staged_count = 0;  // this thread's slots in use
  const InputRow<T> source{input + o.input, g.input_stride, g.n, largest};
  const bool histogram_candidates = histogram != CandidateHistogram::None;
  const bool key_prefix = histogram == CandidateHistogram::KeyPrefix;
  auto candidate_bin = [&](Comp c) {
    return key_prefix ? threshold_key_bin(Key(c >> 32), threshold_key, key_shift)
                      : uint32_t(c >> (kCompositeBits<Key> - kMultiDigitBits));
  };
  // A candidate's key is built here, once it leaves the stage (or skips it): its bin goes to the
  // histogram, the composite to its slot of the buffer while the buffer has room.
  auto keep_candidate = [&](const T& value, uint32_t index, uint32_t slot) {
    const Comp c = make_composite(selection_key(value, largest), index);
    if (histogram_candidates) atomicAdd(&pass.hist[candidate_bin(c)], 1u);
    if (slot < capacity) row_candidates[slot] = c;
  };
  KeyThreshold<T>::make(threshold_key, largest).with_fixed_test([&](const auto& passes) {
    visit_row_elements<kMultiThreads>(source, begin, end, [&](const auto& elements,
                                                              uint32_t first) {
      constexpr int kCount = int(sizeof(elements) / sizeof(elements[0]));
      bool take[kCount];
      bool any = false;
  #pragma unroll
      for (int e = 0; e < kCount; ++e) {
        take[e] = passes(elements[e]);
        any |= take[e];
      }
      if (!any) return;
      // A candidate costs its thread a store of its raw bits and index; its key waits for the
      // copy-out below, where every thread of the block has one to build (built here, they made
      // the few lanes holding candidates run ~90 instructions a vector while the rest of the
      // warp waited, and k ~ 1024 rows have a candidate in most vectors). Past the thread's
      // slots (heavy ties, adversarial rows) a candidate takes a global atomic of its own: rare,
      // and kept out of the registers of the common path.
  #pragma unroll
      for (int e = 0; e < kCount; ++e) {
        if (!take[e]) continue;
        const uint32_t index = first + uint32_t(e);
        if (staged_count < kSlots) {
          staged[staged_count++][threadIdx.x] = stage_entry(elements[e], index);
        } else {
          keep_candidate(elements[e], index, atomicAdd(&state->next_count, 1u));
        }
      }
    });
  });
  uint32_t stage_size;
  const uint32_t after_mine =
      block_suffix_sum<kMultiThreads>(uint32_t(staged_count), pass.scan, stage_size);
  if (threadIdx.x == 0) staged_base = atomicAdd(&state->next_count, stage_size);
  __syncthreads();
  for (int j = 0; j < staged_count; ++j) {
    const StageEntry<T> entry = staged[j][threadIdx.x];
    const uint32_t slot = staged_base + after_mine + uint32_t(j);
    keep_candidate(stage_value<T>(entry), stage_index(entry), slot);
  }
  if (histogram_candidates) {
    __syncthreads();
    for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) {
      if (pass.hist[b] != 0) atomicAdd(&state->hist[b], pass.hist[b]);
    }
  }
  if (last_block_of_row(&state->blocks_done, layout.blocks_per_row, &pass.last_flag)) {
    const uint32_t count = __ldcg(&state->next_count);
    bool hit = count >= uint32_t(g.k) && count <= capacity;
    bool direct = hit && count <= kDirectFinishCandidates;
    // Without the histogram the filter passes cannot start: more candidates than the finish
    // kernel takes count as a miss (the plan makes that negligibly rare).
    if (!histogram_candidates) hit = direct;
    bool placed = false;
    BucketChoice key_choice{};
    if (hit && key_prefix) {
      for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) {
        pass.hist[b] = __ldcg(&state->hist[b]);
      }
      __syncthreads();
      key_choice = choose_bucket<kMultiBins, kMultiThreads>(pass.hist, uint32_t(g.k), pass.scan,
                                                            &pass.choice);
      if (key_choice.digit == uint32_t(kMultiBins - 1)) hit = false;  // beyond the bins
      if constexpr (kFinishByKeyBins<Comp>) {
        // The finish ranks the placed winners in shared memory, as it sorts them.
        if (hit && !direct && g.k <= kSortCapacity &&
            key_choice.count <= uint32_t(kBlockThreads)) {
          placed = start_bin_ranges(state, pass.hist, key_choice.digit, pass.scan);
          direct = placed;
        }
      }
      // A direct row's histogram stays (as counts, or as placed ranges): the finish kernel or
      // the first filter launch places the winners by their bins. The filter passes histogram
      // into a cleared one. (Every call's sample kernel clears the row state; a miss is cleared
      // below.)
      if (hit && !direct) {
        for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) state->hist[b] = 0;
      }
    }
    __syncthreads();  // every thread has its count before thread 0 resets it
    if (threadIdx.x == 0) {
      state->blocks_done = 0;
      state->next_count = 0;
      state->needed = uint32_t(g.k);
      state->in_bucket = count;  // under the empty prefix: the whole buffer
      state->source_is_buffer = hit ? 1u : 0u;
      state->source_count = hit ? count : 0u;
      state->fallback = hit ? 0u : 1u;
      state->finish_direct = hit && direct ? 1u : 0u;
      state->winners_placed = placed ? 1u : 0u;
      if (hit && key_prefix) {
        // The prefix of the k-th's key: the finish or the filter passes go on from its bucket.
        constexpr int kKeyBits = int(sizeof(Key)) * 8;
        state->prefix = Comp((threshold_key >> key_shift) + Key(key_choice.digit));
        state->resolved = uint32_t(kKeyBits - key_shift);
        state->digit_bits = state->resolved;
        state->needed = uint32_t(g.k) - key_choice.above;
        state->in_bucket = key_choice.count;
      }
    }
    __syncthreads();
    if (hit && !direct && histogram == CandidateHistogram::TopDigit) {
      choose_multi_digit(state, pass.hist, pass.scan, &pass.choice);
    } else if (!hit) {
      for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) state->hist[b] = 0;
    }
  }
}

// Up to this many elements in the bucket a filter pass leaves the rest to the finish kernel.
constexpr uint32_t kFinishBucketCandidates = 2 * kBlockThreads;

// Candidates per block of a filter pass over the buffer: two batches of for_each_composite.
constexpr int64_t kFilterItemsPerBlock = int64_t(2) * kCompositeBatch * kMultiThreads;

// The first filter launch's work on a row whose winners it places (see start_bin_ranges): the
// blocks its candidates fill each read their share of the buffer twice, first counting their
// winners per bin, then writing each to its slot of the row's winners, having reserved each
// bin's slots with one global atomic per block (an atomic per winner would make its warp wait
// an L2 round trip for each); the k-th's bucket goes to `bucket`, its count to next_count.
template <class Key, class Comp>
__device__ void place_winners_by_bins(const MultiLayout& layout, RowState<Comp>* state,
                                      Comp* row_winners, const Comp* buffer, Comp* bucket,
                                      int seg, MultiPassShared& pass) {
  const int64_t count = state->source_count;
  const int active = int(min(int64_t(layout.blocks_per_row),
                             (count + kFilterItemsPerBlock - 1) / kFilterItemsPerBlock));
  if (seg >= active) return;
  int64_t begin, end;
  segment_bounds(count, active, seg, begin, end);
  const Key threshold_key = Key(state->threshold >> 32);
  const int key_shift = int(state->threshold_shift);
  const uint32_t kth_bin = kth_key_bin<Key>(state);
  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) pass.hist[b] = 0;
  if (threadIdx.x == 0) pass.bucket_next = 0;
  __syncthreads();
  const BufferSource<Comp> segment{buffer + begin, end - begin};
  for_each_composite<kMultiThreads>(segment, [&](Comp c) {
    const uint32_t bin = threshold_key_bin(Key(c >> 32), threshold_key, key_shift);
    if (bin > kth_bin) {
      atomicAdd(&pass.hist[bin], 1u);
    } else if (bin == kth_bin) {
      atomicAdd(&pass.bucket_next, 1u);
    }
  });
  __syncthreads();
  for (uint32_t b = kth_bin + 1 + threadIdx.x; b < uint32_t(kMultiBins); b += kMultiThreads) {
    if (pass.hist[b] != 0) pass.hist[b] = atomicAdd(&state->hist[b], pass.hist[b]);
  }
  if (threadIdx.x == 0 && pass.bucket_next != 0) {
    pass.bucket_next = atomicAdd(&state->next_count, pass.bucket_next);
  }
  __syncthreads();
  for_each_composite<kMultiThreads>(segment, [&](Comp c) {
    const uint32_t bin = threshold_key_bin(Key(c >> 32), threshold_key, key_shift);
    if (bin > kth_bin) {
      row_winners[atomicAdd(&pass.hist[bin], 1u)] = c;
    } else if (bin == kth_bin) {
      bucket[atomicAdd(&pass.bucket_next, 1u)] = c;
    }
  });
}

// A filter pass: splits the elements under the previous prefix by the digit just chosen.
// The launch right after a threshold pass also runs the histogram pass of rows whose threshold
// missed and places the winners of rows that asked for it.
template <class T>
__global__ void __launch_bounds__(kMultiThreads)
    multi_filter_kernel(RowGeometry g, const T* input, bool largest, MultiLayout layout,
                        RowState<Composite<typename KeyTraits<T>::Key>>* states,
                        Composite<typename KeyTraits<T>::Key>* winners,
                        const Composite<typename KeyTraits<T>::Key>* candidates_in,
                        Composite<typename KeyTraits<T>::Key>* candidates_out,
                        bool histogram_next, bool after_threshold_pass) {
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  constexpr int kBits = kCompositeBits<Key>;
  __shared__ MultiPassShared pass;

  const int64_t row = blockIdx.x / layout.blocks_per_row;
  const int seg = int(blockIdx.x % layout.blocks_per_row);
  RowState<Comp>* state = states + row;
  // Uniform across the row's blocks: set by an earlier kernel.
  if (state->winners_placed) {
    if (after_threshold_pass) {
      place_winners_by_bins<Key>(layout, state, winners + row * g.k,
                                 candidates_in + row * layout.capacity,
                                 candidates_out + row * layout.capacity, seg, pass);
    }
    return;
  }
  if (state->complete || state->finish_direct || state->filters_done) return;
  // A row whose sampled threshold missed starts over with the exact passes: this launch is its
  // histogram pass (so that the rows that hit wait for no extra kernel), the next its one filter
  // pass over the input, and the finish kernel resolves what is left.
  if (after_threshold_pass && state->fallback) {
    histogram_pass(g, input, largest, layout, state, row, seg, pass);
    return;
  }

  const Comp prefix = state->prefix;
  const int resolved = int(state->resolved);
  const uint32_t needed = state->needed, in_bucket = state->in_bucket;
  const bool from_buffer = state->source_is_buffer;
  const int64_t source_count = from_buffer ? int64_t(state->source_count) : g.n;
  // A pass over the buffer takes only as many of the row's blocks as its candidates fill; the
  // others leave at once. Spread over all of them, a few ten thousand candidates paid every
  // block's fixed costs (histogram clear and flush, the ticket) for a few dozen items each.
  const int64_t filled_blocks = (source_count + kFilterItemsPerBlock - 1) / kFilterItemsPerBlock;
  const int active_blocks =
      from_buffer ? int(min(int64_t(layout.blocks_per_row), max(int64_t(1), filled_blocks)))
                  : layout.blocks_per_row;
  if (seg >= active_blocks) return;
  const bool take_all = in_bucket == needed;
  const bool fits = !take_all && int64_t(in_bucket) <= layout.capacity;
  // A bucket this small goes to the finish kernel right after this pass: its rounds over a few
  // hundred candidates cost less than one more pass (bf16 2^26: the ties of the k-th's key).
  const bool last_pass = !histogram_next || (fits && in_bucket <= kFinishBucketCandidates);
  const bool histogram = !last_pass && !take_all;

  // The last choice appended a digit of digit_bits (an 11-bit digit, or the key prefix the
  // threshold pass chose, then on the empty prefix) to the prefix the source was narrowed to.
  // Under that earlier prefix, comparing the top `resolved` bits compares the digits.
  const int digit_bits = int(state->digit_bits);
  const int previous = resolved - digit_bits;
  const Comp previous_prefix = previous == 0 ? Comp(0) : prefix >> digit_bits;
  const int digit_shift = kBits - resolved;
  const int next_shift = digit_shift - kMultiDigitBits;
  Comp* row_winners = winners + row * g.k;
  Comp* row_candidates = candidates_out + row * layout.capacity;

  if (histogram) {
    for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) pass.hist[b] = 0;
    __syncthreads();
  }
  const RowOffsets o = device_row_offsets(g, row);
  const InputRow<T> input_row{input + o.input, g.input_stride, g.n, largest};
  const Comp* buffer = candidates_in + row * layout.capacity;
  int64_t begin, end;
  segment_bounds(source_count, active_blocks, seg, begin, end);
  auto consider = [&](const auto& items) {
    constexpr int kCount = int(sizeof(items) / sizeof(items[0]));
    bool win[kCount], bucket[kCount];
    bool any = false;
#pragma unroll
    for (int e = 0; e < kCount; ++e) {
      const Comp c = items[e];
      win[e] = bucket[e] = false;
      if (has_prefix<kBits>(c, previous_prefix, previous)) {
        const Comp top = c >> digit_shift;
        win[e] = top > prefix || (take_all && top == prefix);
        bucket[e] = !take_all && top == prefix;
      }
      any |= win[e] || bucket[e];
      if (histogram && bucket[e]) {
        atomicAdd(&pass.hist[uint32_t(c >> next_shift) & (kMultiBins - 1)], 1u);
      }
    }
    // Most elements are neither: one vote per batch lets the warp skip the appends.
    if (__any_sync(__activemask(), any)) {
#pragma unroll
      for (int e = 0; e < kCount; ++e) {
        warp_append(win[e], items[e], row_winners, &state->winners);
        if (fits) warp_append(bucket[e], items[e], row_candidates, &state->next_count);
      }
    }
  };
  if (from_buffer) {
    const BufferSource<Comp> segment{buffer + begin, end - begin};
    for_each_composite<kMultiThreads>(segment, [&](Comp c) {
      const Comp items[1] = {c};
      consider(items);
    });
  } else {
    visit_row_segment<kMultiThreads>(input_row, begin, end, consider);
  }
  if (histogram) {
    __syncthreads();
    for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) {
      if (pass.hist[b] != 0) atomicAdd(&state->hist[b], pass.hist[b]);
    }
  }
  if (last_block_of_row(&state->blocks_done, active_blocks, &pass.last_flag)) {
    if (threadIdx.x == 0) {
      state->blocks_done = 0;
      state->complete = take_all ? 1u : 0u;
      state->filters_done = last_pass ? 1u : 0u;
      state->in_first_output = last_pass && histogram_next ? 1u : 0u;
      state->source_is_buffer = fits ? 1u : 0u;
      state->source_count = fits ? __ldcg(&state->next_count) : 0u;
      state->next_count = 0;
    }
    if (histogram) {
      __syncthreads();
      choose_multi_digit(state, pass.hist, pass.scan, &pass.choice);
    }
  }
}

struct BinRange {
  uint32_t begin, end;
};

// Writes the winners of a row ranked within their key-prefix bins: winners[0, above) holds each
// bin's elements in the range range_of(bin) returns, higher bins first, and the k-th's bucket
// (bucket_count elements, `needed` of which win) ranks after them.
template <class T, class Comp, class RangeOf>
__device__ void write_binned_winners(const RowGeometry& g, const T* input, void* values,
                                     void* indices, bool index64, bool largest,
                                     const RowOffsets& o, const RowState<Comp>* state,
                                     const Comp* winners, uint32_t above, RangeOf range_of,
                                     const Comp* bucket, uint32_t bucket_count, uint32_t needed) {
  using Key = typename KeyTraits<T>::Key;
  const Key threshold_key = Key(state->threshold >> 32);
  const int key_shift = int(state->threshold_shift);
  for (uint32_t p = threadIdx.x; p < above; p += kBlockThreads) {
    const Comp c = winners[p];
    const BinRange range = range_of(threshold_key_bin(Key(c >> 32), threshold_key, key_shift));
    const uint32_t rank = range.begin + count_above(winners, range.begin, range.end, c);
    write_winner(g, input, values, indices, index64, largest, o, rank, c);
  }
  if (threadIdx.x < bucket_count) {
    const Comp c = bucket[threadIdx.x];
    const uint32_t rank = count_above(bucket, 0, bucket_count, c);
    if (rank < needed) write_winner(g, input, values, indices, index64, largest, o, above + rank, c);
  }
}

// A direct finish that knows the k-th's key-prefix bin (see threshold_key_bin) and whose bucket
// holds at most a block of elements. The threshold pass's histogram, kept in the row state,
// gives each bin above the bucket its first output rank, so each winner goes to its bin's range
// and is ranked by counting within its bin, and the bucket's winners follow: the k winners need
// no sort, which was a chain of barriers. Returns false, having written no output, when ranking
// within the bins would cost more than kBinRankingBudget (top keys crowded into few bins); every
// thread returns the same.
template <class T, class Comp, class Source>
__device__ bool finish_by_key_bins(const RowGeometry& g, const T* input, void* values,
                                   void* indices, bool index64, bool largest,
                                   const RowOffsets& o, const RowState<Comp>* state,
                                   const Source& source, const Selection<Comp>& start,
                                   FinishShared<Comp>& fs) {
  using Key = typename KeyTraits<T>::Key;
  BlockShared<Comp>& sh = fs.block;
  const Key threshold_key = Key(state->threshold >> 32);
  const int key_shift = int(state->threshold_shift);
  const uint32_t kth_bin = kth_key_bin<Key>(state);

  constexpr int kBinsPerThread = kMultiBins / kBlockThreads;
  static_assert(kMultiBins % kBlockThreads == 0, "whole bins per thread");
  if (threadIdx.x == 0) fs.bucket_count = 0;
  const int first = int(threadIdx.x) * kBinsPerThread;
  uint32_t counts[kBinsPerThread];
  uint32_t mine = 0;
#pragma unroll
  for (int u = 0; u < kBinsPerThread; ++u) {
    const uint32_t bin = uint32_t(first + u);
    counts[u] = bin > kth_bin ? __ldcg(&state->hist[bin]) : 0u;
    mine += counts[u];
  }
  if (bin_ranking_work<kBlockThreads>(counts, sh.scan) > kBinRankingBudget) return false;
  uint32_t above;
  // Higher threads hold higher bins, whose elements rank first.
  uint32_t next = block_suffix_sum<kBlockThreads>(mine, sh.scan, above);
#pragma unroll
  for (int u = kBinsPerThread - 1; u >= 0; --u) {
    fs.bin_count[first + u] = counts[u];
    fs.bin_next[first + u] = next;
    next += counts[u];
  }
  __syncthreads();
  for_each_composite(source, [&](Comp c) {
    const uint32_t bin = threshold_key_bin(Key(c >> 32), threshold_key, key_shift);
    if (bin > kth_bin) {
      sh.winners[atomicAdd(&fs.bin_next[bin], 1u)] = c;
    } else if (bin == kth_bin) {
      fs.add_to_bucket(c);
    }
  });
  __syncthreads();
  // Each bin's range now ends where its next slot stands.
  write_binned_winners(g, input, values, indices, index64, largest, o, state, sh.winners, above,
                       [&](uint32_t bin) {
                         const uint32_t end = fs.bin_next[bin];
                         return BinRange{end - fs.bin_count[bin], end};
                       },
                       fs.bucket, min(fs.bucket_count, uint32_t(kBlockThreads)), start.needed);
  return true;
}

// The finish of a row whose winners the first filter launch placed (place_winners_by_bins):
// each bin's range of winners ends at its entry of the row's histogram and begins at the next
// higher bin's end; the winners and the k-th's bucket move to shared memory to be ranked there.
template <class T, class Comp>
__device__ void finish_placed_winners(const RowGeometry& g, const T* input, void* values,
                                      void* indices, bool index64, bool largest,
                                      const RowOffsets& o, const RowState<Comp>* state,
                                      const Comp* row_winners, const Comp* bucket,
                                      FinishShared<Comp>& fs) {
  const uint32_t needed = state->needed;
  const uint32_t above = uint32_t(g.k) - needed;
  const uint32_t bucket_count = min(__ldcg(&state->next_count), uint32_t(kBlockThreads));
  for (int b = threadIdx.x; b < kMultiBins; b += kBlockThreads) {
    fs.bin_next[b] = __ldcg(&state->hist[b]);
  }
  for (uint32_t p = threadIdx.x; p < above; p += kBlockThreads) {
    fs.block.winners[p] = __ldcg(&row_winners[p]);
  }
  if (threadIdx.x < bucket_count) fs.bucket[threadIdx.x] = __ldcg(&bucket[threadIdx.x]);
  __syncthreads();
  write_binned_winners(g, input, values, indices, index64, largest, o, state, fs.block.winners,
                       above,
                       [&](uint32_t bin) {
                         const uint32_t begin =
                             bin + 1 < uint32_t(kMultiBins) ? fs.bin_next[bin + 1] : 0u;
                         return BinRange{begin, fs.bin_next[bin]};
                       },
                       fs.bucket, bucket_count, needed);
}

// One block per row: resolves the remaining bits of an unfinished row from its candidates (in
// the buffer the last pass wrote, or the input after an overflow), appends the last winners,
// and sorts the row when k fits.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    finish_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                  bool largest, MultiLayout layout,
                  RowState<Composite<typename KeyTraits<T>::Key>>* states,
                  Composite<typename KeyTraits<T>::Key>* winners,
                  const Composite<typename KeyTraits<T>::Key>* candidates,
                  const Composite<typename KeyTraits<T>::Key>* first_output, bool sort_here) {
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  constexpr int kBits = kCompositeBits<Key>;
  __shared__ FinishShared<Comp> finish_shared;
  BlockShared<Comp>& sh = finish_shared.block;
  const int64_t row = blockIdx.x;
  RowState<Comp>* state = states + row;
  Comp* row_winners = winners + row * g.k;
  const RowOffsets o = device_row_offsets(g, row);
  const Comp* const row_candidates =
      (state->in_first_output ? first_output : candidates) + row * layout.capacity;
  if constexpr (kFinishByKeyBins<Comp>) {
    if (state->winners_placed) {  // the bucket is in the first filter launch's output
      finish_placed_winners(g, input, values, indices, index64, largest, o, state, row_winners,
                            first_output + row * layout.capacity, finish_shared);
      return;
    }
  }

  // A sampled threshold that left at most a block's worth of candidates and nothing else
  // selected (the direct case; k <= count by then): each thread ranks one candidate by counting
  // those above it, and that rank is its output slot. One staging copy and one pass over shared
  // memory instead of radix rounds and a sort, each a chain of barriers (k = 50 of 150k took
  // 12 us that way).
  static_assert(kSortCapacity >= kBlockThreads, "the counting rank stages in sh.winners");
  if (state->finish_direct && sort_here && state->source_count <= kBlockThreads) {
    const uint32_t count = state->source_count;
    Comp* const stage = sh.winners;
    const bool ranks = threadIdx.x < count;
    const Comp mine = ranks ? row_candidates[threadIdx.x] : Comp(0);
    if (ranks) stage[threadIdx.x] = mine;
    __syncthreads();
    if (ranks) {
      const uint32_t rank = count_above(stage, 0, count, mine);
      if (rank < uint32_t(g.k)) {
        write_winner(g, input, values, indices, index64, largest, o, rank, mine);
      }
    }
    return;
  }
  // When the row is sorted here, the winners of the filter passes move to shared memory first
  // and the last ones join them there: a global append makes each warp wait on an L2 atomic.
  if (sort_here) {
    const uint32_t earlier = state->winners;
    for (uint32_t r = threadIdx.x; r < earlier; r += kBlockThreads) sh.winners[r] = row_winners[r];
    if (threadIdx.x == 0) sh.winner_count = earlier;
    __syncthreads();
  }
  auto append = [&](bool take, Comp c) {
    if (sort_here) {
      if (take) sh.winners[atomicAdd(&sh.winner_count, 1u)] = c;
    } else {
      warp_append(take, c, row_winners, &state->winners);
    }
  };
  if (!state->complete) {
    const Selection<Comp> start{state->prefix, int(state->resolved), state->needed,
                                state->in_bucket};
    if (state->source_is_buffer) {
      const BufferSource<Comp> source{row_candidates, int64_t(state->source_count)};
      // A direct finish holds every candidate, those above the bucket the threshold pass chose
      // included: its winners are all the buffer's elements at or above the final prefix.
      const Selection<Comp> taken_from =
          state->finish_direct ? Selection<Comp>{Comp(0), 0, uint32_t(g.k), state->source_count}
                               : start;
      if (state->finish_direct && start.resolved > 0 &&
          start.in_bucket <= uint32_t(kBlockThreads)) {
        // The threshold pass's key-prefix bins left the k-th's bucket within a block (k = 1024
        // of 150k: a few dozen; bf16 2^26's ties of a key: ~130): one pass takes everything
        // above it and gathers the bucket, whose elements are then ranked by counting, instead
        // of radix rounds over the whole buffer and a pass to collect the winners (k = 1024:
        // 79.4 -> 77.6 us). After the filter passes the same measured 1.2 us slower than the
        // rounds, so they keep those. Where ranking within the bins above the bucket fits
        // kBinRankingBudget, the winners need no sort either (k = 1024: 69.5 us).
        if constexpr (kFinishByKeyBins<Comp>) {
          if (sort_here && finish_by_key_bins(g, input, values, indices, index64, largest, o,
                                              state, source, start, finish_shared)) {
            return;
          }
        }
        if (threadIdx.x == 0) finish_shared.bucket_count = 0;
        __syncthreads();
        const int start_shift = kBits - start.resolved;
        for_each_composite(source, [&](Comp c) {
          const bool under = has_prefix<kBits>(c, taken_from.prefix, taken_from.resolved);
          const Comp top = c >> start_shift;
          append(under && top > start.prefix, c);
          if (under && top == start.prefix) finish_shared.add_to_bucket(c);
        });
        __syncthreads();
        const uint32_t count = min(finish_shared.bucket_count, uint32_t(kBlockThreads));
        const bool ranks = threadIdx.x < count;
        const Comp mine = ranks ? finish_shared.bucket[threadIdx.x] : Comp(0);
        const uint32_t rank = ranks ? count_above(finish_shared.bucket, 0, count, mine) : 0u;
        append(ranks && rank < start.needed, mine);
      } else {
        const Selection<Comp> final_sel = block_refine<kBits>(source, start, sh);
        for_each_composite(source,
                           [&](Comp c) { append(is_winner<kBits>(c, taken_from, final_sel), c); });
      }
    } else {
      const InputRow<T> source{input + o.input, g.input_stride, g.n, largest};
      const Selection<Comp> final_sel = block_refine<kBits>(source, start, sh);
      for_each_composite(source,
                         [&](Comp c) { append(is_winner<kBits>(c, start, final_sel), c); });
    }
  }
  if (!sort_here) return;
  __syncthreads();
  sort_and_write(sh, int(g.k), g, input, values, indices, index64, largest, o);
}

// Writes rows whose winners were sorted in global memory (k above kSortCapacity).
template <class T>
__global__ void write_sorted_kernel(RowGeometry g, const T* input, void* values, void* indices,
                                    bool index64, bool largest,
                                    const Composite<typename KeyTraits<T>::Key>* winners) {
  wait_for_previous_kernel();
  allow_next_kernel();
  const int64_t total = g.rows * g.k;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = t / g.k, rank = t % g.k;
    write_winner(g, input, values, indices, index64, largest, device_row_offsets(g, row), rank,
                 winners[t]);
  }
}

}  // namespace cuda
}  // namespace mtk
