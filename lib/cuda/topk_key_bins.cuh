// Key-prefix bins of a sampled threshold, shared by the multi-block kernels that read them.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/device_utils.cuh"
#include "cuda/topk_config.hpp"

namespace mtk {
namespace cuda {

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

// Key-prefix bins measured from `base` in units of 2^shift keys, the last taking every farther
// key: the threshold pass's (from the row's threshold) or the finish's finer ones (from the
// k-th's bucket, finish_by_finer_key_bins).
template <class Key>
struct KeyBins {
  Key base;
  int shift;
  __device__ __forceinline__ uint32_t of(Key key) const {
    return threshold_key_bin(key, base, shift);
  }
  // The same on composites: bins rank a winner by its key alone.
  template <class Comp>
  __device__ __forceinline__ uint32_t of_composite(Comp c) const {
    return of(Key(c >> 32));
  }
  template <class Comp>
  __device__ __forceinline__ bool below(Comp c) const {
    return Key(c >> 32) < base;
  }
};

// Finer bins for winners crowded into few keys (16-bit keys, ties): each key from `base` up
// gets 2^index_bits bins, split by the top bits of the index, lower indices in higher bins as
// they rank first. Ranking within a bin then compares a few of a key's elements instead of all
// of them (bf16 rows of 2^20, k = 4096: ~190 elements a key, every row past kBinRankingBudget
// by key alone). The caller sizes it so that its highest key's bins exist: (highest - base + 1)
// << index_bits <= kMultiBins, and every index of the row is below 2^(index_shift +
// index_bits).
template <class Key>
struct TiedKeyBins {
  Key base;
  int index_bits;
  int index_shift;
  template <class Comp>
  __device__ __forceinline__ uint32_t of_composite(Comp c) const {
    const uint32_t key_units = uint32_t(Key(c >> 32)) - uint32_t(base);
    const uint32_t index_part = composite_index(c) >> index_shift;
    return (key_units << index_bits) | ((1u << index_bits) - 1u - index_part);
  }
  template <class Comp>
  __device__ __forceinline__ bool below(Comp c) const {
    return Key(c >> 32) < base;
  }
};

// The threshold pass's bins of a row, as the sample kernel (or a split sample's merge) left them
// in its state.
template <class Key, class Comp>
__device__ __forceinline__ KeyBins<Key> threshold_key_bins(const RowState<Comp>* state) {
  return KeyBins<Key>{Key(state->threshold >> 32), int(state->threshold_shift)};
}

// The bin of the k-th's key: the key prefix the threshold pass chose, counted from the
// threshold's.
template <class Key, class Comp>
__device__ __forceinline__ uint32_t kth_key_bin(const RowState<Comp>* state) {
  const Key threshold_key = Key(state->threshold >> 32);
  const int key_shift = int(state->threshold_shift);
  return uint32_t(WideKey<Key>(Key(state->prefix)) - WideKey<Key>(threshold_key >> key_shift));
}

// The shift of the threshold pass's key bins (see threshold_key_bin): 512 units span the
// sample's keys from the threshold to its largest.
template <class Key>
__device__ __forceinline__ uint32_t key_bin_shift(Key largest_key, Key threshold_key) {
  const uint64_t span = uint64_t(largest_key) - uint64_t(threshold_key);
  const int span_bits = span == 0 ? 0 : 64 - __clzll(static_cast<long long>(span));
  return uint32_t(max(0, span_bits - 9));
}

// Whether the finish kernel places winners by key-prefix bins (finish_by_key_bins): with
// 128-bit composites the bins leave no room beside BlockShared in 48 KB, so those keep the sort.
template <class Comp>
constexpr bool kFinishByKeyBins = sizeof(Comp) <= 8;

// The most comparisons the finish may spend ranking each winner against the others of its
// key-prefix bin: the sum over the bins above the k-th's of their squared sizes. Adjacent
// winners share a bin, so a warp's lanes scan the same range: at this budget a thread makes ~512
// comparisons. bf16 2^26's ties of a key (35 bins of up to 110 elements, 62k in all) took 15.1
// us in the finish this way, 22.8 us through the sort (a limit of 64 elements per bin,
// measured). Counts are capped before squaring so the sums fit 32 bits; a capped bin alone
// exceeds the budget.
constexpr uint32_t kBinRankingBudget = uint32_t(kSortCapacity) * 128;
// The same for the threshold pass's bins when each is a whole key: past this (64 comparisons a
// thread) the finish bins the row again with each key split by index (TiedKeyBins), which costs
// two more reads of its candidates, a few a thread.
constexpr uint32_t kWholeKeyBinRankingBudget = kBinRankingBudget / 8;
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

}  // namespace cuda
}  // namespace mtk
