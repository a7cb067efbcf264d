// The end of the multi-block pipeline: one block per row resolves the last bits and writes the
// row (finish_kernel); for k above kSortCapacity, a block per row sorts and writes its winners
// (sort_row_winners), or, past what a block sorts, writes the rows CUB sorted
// (write_sorted_kernel).
#pragma once

#include <cstdint>

#include "cuda/topk_block_select.cuh"
#include "cuda/topk_key_bins.cuh"
#include "cuda/topk_multi_pass.cuh"

namespace mtk {
namespace cuda {

// The finish kernel's shared memory: BlockShared, the k-th's bucket when it starts small, and
// the key-prefix bins above it (see finish_in_key_bins).
template <class Comp>
struct FinishShared {
  static constexpr int kBins = kFinishByKeyBins<Comp> ? kMultiBins : 1;
  BlockShared<Comp> block;
  uint32_t bucket_count;
  Comp bucket[kBlockThreads];
  uint32_t bin_count[kBins];
  uint32_t bin_next[kBins];
  uint32_t highest_key;  // finish_by_finer_key_bins

  // Gathers c into the bucket; a broken invariant (more than a block of them) cannot overrun it.
  __device__ __forceinline__ void add_to_bucket(Comp c) {
    const uint32_t slot = atomicAdd(&bucket_count, 1u);
    if (slot < uint32_t(kBlockThreads)) bucket[slot] = c;
  }
};

struct BinRange {
  uint32_t begin, end;
};

// Writes the winners of a row ranked within their key-prefix bins: winners[0, above) holds each
// bin's elements in the range range_of(bin) returns, higher bins first, and the k-th's bucket
// (bucket_count elements, `needed` of which win) ranks after them; a window shorter than k is
// padded.
template <class T, class Comp, class Bins, class RangeOf>
__device__ void write_binned_winners(const RowGeometry& g, const T* input, void* values,
                                     void* indices, bool index64, bool largest,
                                     const RowTarget& o, const Bins& bins, const Comp* winners,
                                     uint32_t above, RangeOf range_of, const Comp* bucket,
                                     uint32_t bucket_count, uint32_t needed) {
  for (uint32_t p = threadIdx.x; p < above; p += kBlockThreads) {
    const Comp c = winners[p];
    const BinRange range = range_of(bins.of_composite(c));
    const uint32_t rank = range.begin + count_above(winners, range.begin, range.end, c);
    write_winner(g, input, values, indices, index64, largest, o, rank, c);
  }
  if (threadIdx.x < bucket_count) {
    const Comp c = bucket[threadIdx.x];
    const uint32_t rank = count_above(bucket, 0, bucket_count, c);
    if (rank < needed) write_winner(g, input, values, indices, index64, largest, o, above + rank, c);
  }
  write_padding<T>(g, values, indices, index64, o, o.count, g.k);
}

// A direct finish that knows the k-th's bin `kth_bin` of `bins` (KeyBins or TiedKeyBins), the
// count of each bin above it (count_of) and the `needed` winners of its bucket, which holds at
// most a block of elements. The bin counts give each bin above the bucket its first output
// rank, so each winner goes to its bin's range of `placed` and is ranked by counting within its
// bin, and the bucket's winners follow: the k winners need no sort, which was a chain of
// barriers. `placed` is shared memory of k composites: the finish's own up to kSortCapacity,
// finish_placing_kernel's dynamic shared memory past it.
// Returns false, having written no output, when ranking within the bins would cost more than
// `budget` comparisons (see kBinRankingBudget; top keys crowded into few bins); every thread
// returns the same.
template <class T, class Comp, class Bins, class Source, class CountOf>
__device__ bool finish_in_key_bins(const RowGeometry& g, const T* input, void* values,
                                   void* indices, bool index64, bool largest,
                                   const RowTarget& o, const Bins& bins, uint32_t kth_bin,
                                   uint32_t needed, CountOf count_of, uint32_t budget,
                                   const Source& source, Comp* placed, FinishShared<Comp>& fs) {
  BlockShared<Comp>& sh = fs.block;
  constexpr int kBinsPerThread = kMultiBins / kBlockThreads;
  static_assert(kMultiBins % kBlockThreads == 0, "whole bins per thread");
  const int first = int(threadIdx.x) * kBinsPerThread;
  uint32_t counts[kBinsPerThread];
  uint32_t mine = 0;
#pragma unroll
  for (int u = 0; u < kBinsPerThread; ++u) {
    const uint32_t bin = uint32_t(first + u);
    counts[u] = bin > kth_bin ? count_of(bin) : 0u;
    mine += counts[u];
  }
  if (bin_ranking_work<kBlockThreads>(counts, sh.scan) > budget) return false;
  if (threadIdx.x == 0) fs.bucket_count = 0;
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
    if (bins.below(c)) return;  // below the finer bins' edge: no winner
    const uint32_t bin = bins.of_composite(c);
    if (bin > kth_bin) {
      placed[atomicAdd(&fs.bin_next[bin], 1u)] = c;
    } else if (bin == kth_bin) {
      fs.add_to_bucket(c);
    }
  });
  __syncthreads();
  // Each bin's range now ends where its next slot stands.
  write_binned_winners(g, input, values, indices, index64, largest, o, bins, placed, above,
                       [&](uint32_t bin) {
                         const uint32_t end = fs.bin_next[bin];
                         return BinRange{end - fs.bin_count[bin], end};
                       },
                       fs.bucket, min(fs.bucket_count, uint32_t(kBlockThreads)), needed);
  return true;
}

// finish_in_key_bins on the threshold pass's bins and histogram (in the row state). Bins of
// whole keys (shift 0) cannot be split further by key: where ranking within them costs more than
// kWholeKeyBinRankingBudget, finish_by_finer_key_bins splits the row's keys by index instead.
template <class T, class Comp, class Source>
__device__ bool finish_by_key_bins(const RowGeometry& g, const T* input, void* values,
                                   void* indices, bool index64, bool largest,
                                   const RowTarget& o, const RowState<Comp>* state,
                                   const Source& source, const Selection<Comp>& start,
                                   Comp* placed, FinishShared<Comp>& fs) {
  using Key = typename KeyTraits<T>::Key;
  const KeyBins<Key> bins = threshold_key_bins<Key>(state);
  return finish_in_key_bins(g, input, values, indices, index64, largest, o, bins,
                            kth_key_bin<Key>(state), start.needed,
                            [&](uint32_t bin) { return __ldcg(&state->hist[bin]); },
                            bins.shift == 0 ? kWholeKeyBinRankingBudget : kBinRankingBudget,
                            source, placed, fs);
}

// Counts the row's candidates at or above the lower edge of `bins` into them, chooses the k-th's
// bin and finishes the row in them (finish_in_key_bins). Returns false, having written no
// output, as that does, or when the k-th's bin holds more than a block.
template <class T, class Comp, class Bins, class Source>
__device__ bool finish_in_counted_bins(const RowGeometry& g, const T* input, void* values,
                                       void* indices, bool index64, bool largest,
                                       const RowTarget& o, const Bins& bins,
                                       const Source& source, Comp* placed,
                                       FinishShared<Comp>& fs) {
  for_each_composite(source, [&](Comp c) {
    if (!bins.below(c)) atomicAdd(&fs.bin_count[bins.of_composite(c)], 1u);
  });
  __syncthreads();
  const BucketChoice kth = choose_bucket<kMultiBins, kBlockThreads>(
      fs.bin_count, uint32_t(o.count), fs.block.scan, &fs.block.choice);
  if (kth.count > uint32_t(kBlockThreads)) return false;
  return finish_in_key_bins(g, input, values, indices, index64, largest, o, bins, kth.digit,
                            uint32_t(o.count) - kth.above,
                            [&](uint32_t bin) { return fs.bin_count[bin]; }, kBinRankingBudget,
                            source, placed, fs);
}

// The threshold pass's bins are sized by the sample's span of keys above the threshold, a
// quarter of them in use. Where the winners crowd a few of those bins, or the k-th's bucket
// holds more than a block, the row's candidates are binned again, finer: from the lower edge of
// the k-th's bucket (every winner is at or above it) to the highest candidate, over all the
// bins. A window of about 2k keys needed this: its winners span both signs, whose keys lie
// 2^31 apart, so the threshold pass's bins were half a binade wide and held ~300 winners each
// (the work of ranking within them twice the budget), and a window sampled whole (shorter than
// the sample) put ~2000 candidates into the k-th's bucket of a binade. Either took the finish's
// sort of k, which set the whole batch's finish time (64 rows of 4096..131072, k = 2048: one
// such row among them). Where the winners span fewer keys than half the bins (16-bit keys, ties)
// each key's bins are split by index (TiedKeyBins). Returns false, having written no output, as
// finish_in_key_bins does or when the finer bucket still holds more than a block.
template <class T, class Comp, class Source>
__device__ bool finish_by_finer_key_bins(const RowGeometry& g, const T* input, void* values,
                                         void* indices, bool index64, bool largest,
                                         const RowTarget& o, const RowState<Comp>* state,
                                         const Source& source, Comp* placed,
                                         FinishShared<Comp>& fs) {
  using Key = typename KeyTraits<T>::Key;
  static_assert(sizeof(Key) <= sizeof(uint32_t), "finer bins take keys of up to 32 bits");
  const int coarse_shift = int(state->threshold_shift);
  const Key edge = Key(Key(state->prefix) << coarse_shift);
  if (threadIdx.x == 0) fs.highest_key = 0;
  for (int b = threadIdx.x; b < kMultiBins; b += kBlockThreads) fs.bin_count[b] = 0;
  __syncthreads();
  uint32_t highest = 0;
  for_each_composite(source, [&](Comp c) { highest = max(highest, uint32_t(c >> 32)); });
  highest = __reduce_max_sync(0xffffffffu, highest);
  if ((threadIdx.x & 31) == 0) atomicMax(&fs.highest_key, highest);
  __syncthreads();
  // The k-th is at or above the edge, so the highest candidate is too.
  const uint32_t span = fs.highest_key - uint32_t(edge);
  const int span_bits = span == 0 ? 0 : 64 - __clzll(static_cast<long long>(span));
  if (span_bits < kMultiDigitBits) {
    // span + 1 keys, each 2^index_bits bins; every position of a window is below g.n.
    const int index_bits = kMultiDigitBits - span_bits;
    const int position_bits = g.n > 1 ? 64 - __clzll(static_cast<long long>(g.n - 1)) : 0;
    const TiedKeyBins<Key> bins{edge, index_bits, max(0, position_bits - index_bits)};
    return finish_in_counted_bins(g, input, values, indices, index64, largest, o, bins, source,
                                  placed, fs);
  }
  const KeyBins<Key> bins{edge, span_bits - kMultiDigitBits};
  return finish_in_counted_bins(g, input, values, indices, index64, largest, o, bins, source,
                                placed, fs);
}

// The finish of a row whose winners the first filter launch placed (place_winners_by_bins):
// each bin's range of winners ends at its entry of the row's histogram and begins at the next
// higher bin's end; the winners and the k-th's bucket move to shared memory to be ranked there.
template <class T, class Comp>
__device__ void finish_placed_winners(const RowGeometry& g, const T* input, void* values,
                                      void* indices, bool index64, bool largest,
                                      const RowTarget& o, const RowState<Comp>* state,
                                      const Comp* row_winners, const Comp* bucket,
                                      FinishShared<Comp>& fs) {
  const uint32_t needed = state->needed;
  const uint32_t above = uint32_t(o.count) - needed;
  const uint32_t bucket_count = min(__ldcg(&state->next_count), uint32_t(kBlockThreads));
  for (int b = threadIdx.x; b < kMultiBins; b += kBlockThreads) {
    fs.bin_next[b] = __ldcg(&state->hist[b]);
  }
  for (uint32_t p = threadIdx.x; p < above; p += kBlockThreads) {
    fs.block.winners[p] = __ldcg(&row_winners[p]);
  }
  if (threadIdx.x < bucket_count) fs.bucket[threadIdx.x] = __ldcg(&bucket[threadIdx.x]);
  __syncthreads();
  using Key = typename KeyTraits<T>::Key;
  write_binned_winners(g, input, values, indices, index64, largest, o,
                       threshold_key_bins<Key>(state), fs.block.winners, above,
                       [&](uint32_t bin) {
                         const uint32_t begin =
                             bin + 1 < uint32_t(kMultiBins) ? fs.bin_next[bin + 1] : 0u;
                         return BinRange{begin, fs.bin_next[bin]};
                       },
                       fs.bucket, bucket_count, needed);
}

// One block per row: resolves the remaining bits of an unfinished row from its candidates (in
// the buffer the last pass wrote, or the input after an overflow), appends the last winners,
// and sorts the row when k fits. Past that, `large_placement` is shared memory of k composites
// where a row's winners are ranked within key bins (finish_placing_kernel), or null: the
// winners then go to the row's list in scratch, for the sort kernel.
template <class T>
__device__ void finish_row(const RowGeometry& g, const T* input, void* values, void* indices,
                           bool index64, bool largest, const MultiLayout& layout,
                           RowState<Composite<typename KeyTraits<T>::Key>>* states,
                           Composite<typename KeyTraits<T>::Key>* winners,
                           const Composite<typename KeyTraits<T>::Key>* candidates,
                           const Composite<typename KeyTraits<T>::Key>* first_output,
                           bool sort_here, const RaggedRows& ragged,
                           Composite<typename KeyTraits<T>::Key>* large_placement) {
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  constexpr int kBits = kCompositeBits<Key>;
  __shared__ FinishShared<Comp> finish_shared;
  BlockShared<Comp>& sh = finish_shared.block;
  const int64_t row = blockIdx.x;
  RowState<Comp>* state = states + row;
  Comp* row_winners = winners + row * g.k;
  const RowTarget& o = share_row_target(sh, g, ragged, row);
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
  // selected (the direct case; at least the row's count by then): each thread ranks one
  // candidate by counting those above it, and that rank is its output slot. One staging copy and
  // one pass over shared memory instead of radix rounds and a sort, each a chain of barriers
  // (k = 50 of 150k took 12 us that way).
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
      if (rank < uint32_t(o.count)) {
        write_winner(g, input, values, indices, index64, largest, o, rank, mine);
      }
    }
    write_padding<T>(g, values, indices, index64, o, o.count, g.k);
    return;
  }
  // The block appends the row's last winners after those of the filter passes, counting them in
  // shared memory: a global append makes each warp wait on an L2 atomic (for k = 4096 of 131072,
  // ~13 appends a warp in a row). When the row is sorted here, the earlier winners move to
  // shared memory first and the last ones join them there; otherwise the list stays in global
  // memory, which this block alone writes now.
  const uint32_t earlier = state->winners;
  if (sort_here) {
    for (uint32_t r = threadIdx.x; r < earlier; r += kBlockThreads) sh.winners[r] = row_winners[r];
  }
  if (threadIdx.x == 0) sh.winner_count = earlier;
  __syncthreads();
  auto append = [&](bool take, Comp c) {
    if (sort_here) {
      if (take) sh.winners[atomicAdd(&sh.winner_count, 1u)] = c;
    } else {
      warp_append(take, c, row_winners, &sh.winner_count);
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
          state->finish_direct ? Selection<Comp>{Comp(0), 0, uint32_t(o.count), state->source_count}
                               : start;
      // Where ranking within the key-prefix bins above the k-th's bucket fits
      // kBinRankingBudget, the winners need no sort (k = 1024: 69.5 us); finer bins first
      // where the threshold pass's do not. Past kSortCapacity the row's sort kernel then skips
      // it (k = 4096 of 131072 on 256 rows, H200: 40 us of radix sort gone).
      if constexpr (kFinishByKeyBins<Comp>) {
        Comp* const placed = sort_here ? sh.winners : large_placement;
        if (placed != nullptr && state->finish_direct && start.resolved > 0 &&
            ((start.in_bucket <= uint32_t(kBlockThreads) &&
              finish_by_key_bins(g, input, values, indices, index64, largest, o, state, source,
                                 start, placed, finish_shared)) ||
             finish_by_finer_key_bins(g, input, values, indices, index64, largest, o, state,
                                      source, placed, finish_shared))) {
          if (!sort_here && threadIdx.x == 0) state->output_written = 1;
          return;
        }
      }
      if (state->finish_direct && start.resolved > 0 &&
          start.in_bucket <= uint32_t(kBlockThreads)) {
        // The threshold pass's key-prefix bins left the k-th's bucket within a block (k = 1024
        // of 150k: a few dozen; bf16 2^26's ties of a key: ~130): one pass takes everything
        // above it and gathers the bucket, whose elements are then ranked by counting, instead
        // of radix rounds over the whole buffer and a pass to collect the winners (k = 1024:
        // 79.4 -> 77.6 us). After the filter passes the same measured 1.2 us slower than the
        // rounds, so they keep those.
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
      const InputRow<T> source = input_row(g, input, o, largest);
      const Selection<Comp> final_sel = block_refine<kBits>(source, start, sh);
      for_each_composite(source,
                         [&](Comp c) { append(is_winner<kBits>(c, start, final_sel), c); });
    }
  }
  if (!sort_here) {
    // A short row's unused winner slots hold zero composites, which any sort puts last and
    // write_sorted_kernel writes as padding.
    for (int64_t r = o.count + threadIdx.x; r < g.k; r += kBlockThreads) row_winners[r] = Comp(0);
    return;
  }
  __syncthreads();
  sort_and_write(sh, int(o.count), g, input, values, indices, index64, largest, o);
}

template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    finish_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                  bool largest, MultiLayout layout,
                  RowState<Composite<typename KeyTraits<T>::Key>>* states,
                  Composite<typename KeyTraits<T>::Key>* winners,
                  const Composite<typename KeyTraits<T>::Key>* candidates,
                  const Composite<typename KeyTraits<T>::Key>* first_output, bool sort_here,
                  RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  finish_row<T>(g, input, values, indices, index64, largest, layout, states, winners, candidates,
                first_output, sort_here, ragged, nullptr);
}

// Row `row`'s k winners (k above kSortCapacity; a short window's unused slots hold zero
// composites, which sort last) sorted by its block in `items`, shared memory of
// plan.row_sort_bytes, and written, padding after the window's winners (sort_rows_kernel,
// topk_sort_rows.cuh).
template <class T>
__device__ void sort_row_winners(Composite<typename KeyTraits<T>::Key>* items, const RowGeometry& g,
                                 const T* input, void* values, void* indices, bool index64,
                                 bool largest, const Composite<typename KeyTraits<T>::Key>* winners,
                                 const RaggedRows& ragged, int64_t row) {
  const auto* row_winners = winners + row * g.k;
  for (int64_t i = threadIdx.x; i < g.k; i += kBlockThreads) items[i] = row_winners[i];
  sort_shared(items, int(g.k));  // its first barrier follows the copy
  const RowTarget o = device_row_target(g, ragged, row);
  for (int r = threadIdx.x; r < int(o.count); r += kBlockThreads) {
    write_winner(g, input, values, indices, index64, largest, o, r, items[r]);
  }
  write_padding<T>(g, values, indices, index64, o, o.count, g.k);
}

// Writes rows whose winners CUB sorted in global memory (k past what a block sorts); a zero
// composite is a short row's padding.
template <class T>
__global__ void write_sorted_kernel(RowGeometry g, const T* input, void* values, void* indices,
                                    bool index64, bool largest,
                                    const Composite<typename KeyTraits<T>::Key>* winners,
                                    RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  using Comp = Composite<typename KeyTraits<T>::Key>;
  const int64_t total = g.rows * g.k;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = t / g.k, rank = t % g.k;
    const RowTarget o = device_row_target(g, ragged, row);
    const Comp winner = winners[t];
    if (winner == Comp(0)) {
      write_padding_at<T>(g, values, indices, index64, o, rank);
    } else {
      write_winner(g, input, values, indices, index64, largest, o, rank, winner);
    }
  }
}

}  // namespace cuda
}  // namespace mtk
