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
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/key_threshold.hpp"
#include "cuda/topk_block_select.cuh"
#include "cuda/topk_key_bins.cuh"
#include "cuda/topk_multi_pass.cuh"
#include "cuda/topk_warp_kernels.cuh"  // warp_max

namespace mtk {
namespace cuda {

constexpr int kSamplePrefetchSegments = 8;   // see prefetch_segment_head

// How the sample kernel thresholds a ragged row's window. Its rank is its own: the plan's is the
// full row's, which would leave a shorter window too few candidates. A row that took the exact
// passes held the whole batch back (a batch is as slow as its slowest row: 64 decode rows of
// 4096..131072 keys, a few under 10000, ran both filter launches' passes and the finish's radix
// rounds and sort for those few), so every window that fits the candidate buffer is thresholded:
//  - Empty: nothing to select; the row is complete (the finish writes its padding).
//  - Sampled at `rank`: a window of at least `samples` elements holds that many distinct sample
//    keys, ranked as the plan ranks a dense row's, at any rank within the sample (the plan keeps
//    dense rows within a quarter of it, where the exact passes are the whole batch's
//    alternative). A window shorter than the sample lies wholly inside it (its runs overlap and
//    cover it), so the sample's least key accepts every element: rank `samples`. Either way the
//    key bins span the candidates, so the finish ranks them within bins.
//  - Whole: fewer than k elements, or so few more (under ~1.1 k) that the rank would pass the
//    sample, and more than the sample covers: threshold key 0 accepts every element (its bins
//    are coarse: one per binade of the keys).
//  - ExactPasses: such a window longer than the buffer (plans give it 8 k slots or the row).
// The rank decides the speed only: any threshold gives the exact result.
struct WindowThreshold {
  enum Kind : uint32_t { Empty, Sampled, Whole, ExactPasses } kind;
  uint32_t rank;  // Sampled
};

__device__ __forceinline__ WindowThreshold window_threshold(int64_t k, int64_t length,
                                                            int samples, int64_t capacity) {
  if (length <= 0) return {WindowThreshold::Empty, 0};
  if (length < samples) return {WindowThreshold::Sampled, uint32_t(samples)};
  if (length >= k) {
    const double m = double(k) * double(samples) / double(length);
    const double rank = ceil(m + 4 * sqrt(m) + 8);
    if (rank < double(samples)) return {WindowThreshold::Sampled, uint32_t(rank)};
  }
  return {length <= capacity ? WindowThreshold::Whole : WindowThreshold::ExactPasses, 0};
}

// Ranks the sample and initialises the row's state (so sampled plans need no memset). The
// threshold is the lower edge of the narrowest key bucket that holds the sample's
// `sample_rank`-th largest key: exact when the bucket narrows to one key, and never above it.
// The row keeps the lowest key the threshold pass's test of it accepts (lowest_accepted_key:
// +inf's where only NaN reaches it), which the key-prefix bins measure from: measured from NaN's
// key, the +inf candidates fell past the last bin and ranked above the NaNs.
//
// A split sample (Parts blocks per row, for rows too few to fill the GPU) spreads the same
// sample over the blocks: one block ranking 16384 keys is bound by its own instruction chains
// (9.7 us for bf16 2^26). Each part leaves its `sample_rank` largest keys in the row state
// instead, and the threshold pass's blocks merge them (merge_split_sample): the union of the
// parts' tops holds the sample's top, so its `sample_rank`-th largest is the sample's, exactly.
//
// Ragged rows threshold their window as window_threshold says; a window flagged for the exact
// passes starts them in the first filter launch, as after a miss. Split samples are for dense
// rows only (the parts share one rank).
template <class T, int SamplesPerThread, int Parts = 1>
__global__ void __launch_bounds__(kSampleThreads)
    multi_sample_kernel(RowGeometry g, const T* input, bool largest, uint32_t sample_rank,
                        MultiLayout layout,
                        RowState<Composite<typename KeyTraits<T>::Key>>* states,
                        RaggedRows ragged) {
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
  const RowTarget o = device_row_target(g, ragged, row);
  const T* base = input + o.input;
  const int64_t length = o.length;
  bool whole_window = false;
  if (ragged.is_ragged()) {
    const WindowThreshold window = window_threshold(g.k, length, kSamples, layout.capacity);
    if (window.kind == WindowThreshold::Empty || window.kind == WindowThreshold::ExactPasses) {
      __syncthreads();  // the state is cleared
      if (threadIdx.x == 0) {
        if (window.kind == WindowThreshold::Empty) {
          state->complete = 1;
        } else {
          state->fallback = 1;
        }
      }
      return;
    }
    whole_window = window.kind == WindowThreshold::Whole;
    sample_rank = window.rank;
  }
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
    const int64_t centre = int64_t((2 * run + 1) * uint64_t(length) / (2 * uint64_t(kRuns)));
    // A window shorter than a run reads its last element for the lanes past it.
    const int64_t start = max(min(centre - 16, length - 32), int64_t(0));
    const int64_t at = min(start + lane, length - 1);
    keys[j] = selection_key(base[at * g.input_stride], largest);
    if (Wide(keys[j]) > largest_key) largest_key = Wide(keys[j]);
  }
  // One block's copy engine issues a few segments' prefetches quickly, not a huge row's hundreds.
  const int segment = int(threadIdx.x);
  if (Parts == 1 && layout.blocks_per_row <= kSamplePrefetchSegments &&
      segment < layout.blocks_per_row) {
    int64_t begin, end;
    segment_bounds(length, layout.blocks_per_row, segment, begin, end);
    prefetch_segment_head(base, g.input_stride, begin, end, layout.l2_prefetch_bytes);
  }

  Key prefix = 0;
  int resolved = 0;
  uint32_t needed = sample_rank;
  while (!whole_window && resolved < kKeyBits) {
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
  const Key threshold_key = whole_window          ? Key(0)
                            : resolved < kKeyBits ? Key(prefix << (kKeyBits - resolved))
                                                  : prefix;
  if constexpr (Parts == 1) {
    __shared__ Wide warp_max[kWarps];
    for (int offset = 16; offset > 0; offset >>= 1) {
      largest_key = max(largest_key, Wide(__shfl_xor_sync(0xffffffffu, largest_key, offset)));
    }
    if (lane == 0) warp_max[threadIdx.x >> 5] = largest_key;
    __syncthreads();  // also: the state is cleared before thread 0 writes into it
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarps; ++w) largest_key = max(largest_key, warp_max[w]);
      const Key lowest = KeyThreshold<T>::lowest_accepted_key(threshold_key, largest);
      state->threshold = Comp(lowest) << 32;
      state->threshold_shift = key_bin_shift(Key(largest_key), lowest);
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
// parts' tops (ties counted) is the threshold, and the largest bounds the key bins' span. One
// warp merges the parts' descending lists, a lane's head each, taking the largest head
// sample_rank times: ranking every key against all the others instead kept every SM's issue
// slots busy for ~4 us (bf16 2^26's pass 42.0 -> 47.2 us).
template <class Key, class Comp>
__device__ void merge_split_sample(const RowState<Comp>* state, uint32_t sample_rank,
                                   Key& threshold_key, Key& largest_key) {
  static_assert(kSplitSampleParts * kSplitSampleMaxRank <= kMultiThreads, "a key a thread");
  static_assert(kSplitSampleParts <= 32, "a part a lane");
  __shared__ Key tops[kSplitSampleParts * kSplitSampleMaxRank];
  __shared__ Key ranked, largest_top;
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
      if (step == 0 && lane == 0) largest_top = Key(taken);
    }
    if (lane == 0) ranked = Key(taken);
  }
  __syncthreads();
  threshold_key = ranked;
  largest_key = largest_top;
}

}  // namespace cuda
}  // namespace mtk
