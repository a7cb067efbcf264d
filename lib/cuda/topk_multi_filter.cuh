// The multi-block filter passes (multi_filter_kernel): each splits the elements still in play
// by the digit just chosen into winners and the next candidates.
#pragma once

#include <cstdint>

#include "cuda/topk_block_select.cuh"
#include "cuda/topk_key_bins.cuh"
#include "cuda/topk_multi_pass.cuh"

namespace mtk {
namespace cuda {

constexpr int kMultiPasses = 2;  // multi-block filter passes before the finish

// Up to this many elements in the bucket a filter pass leaves the rest to the finish kernel.
constexpr uint32_t kFinishBucketCandidates = 2 * kBlockThreads;

// Candidates per block of a filter pass over the buffer: two batches of for_each_composite.
constexpr int64_t kFilterItemsPerBlock = int64_t(2) * kCompositeBatch * kMultiThreads;

// A block's appends to one of its row's global lists (winners or next candidates), gathered in
// shared memory and written with one global atomic per block at the end of the pass. Appending
// straight to the list cost one atomic on the row's counter per warp vote: with k = 2048 of
// 262144 every vote had a taker, and the passes' 40 warps a row queued on one L2 address
// (256 x 262144 f32: 379 us for a pass that reads the input in ~70). Takers past the stage's
// capacity (rows taking most of their elements) still go straight to the list.
template <class Comp>
struct BlockStage {
  static constexpr uint32_t kCapacity = 8192 / sizeof(Comp);
  Comp items[kCapacity];
  uint32_t count;
  uint32_t base;

  __device__ __forceinline__ void append(bool take, const Comp& item, Comp* out,
                                         uint32_t* counter) {
    const uint32_t active = __activemask();
    const uint32_t want = __ballot_sync(active, take);
    if (want == 0) return;
    const int lane = threadIdx.x & 31;
    const int leader = __ffs(want) - 1;
    uint32_t first = 0;
    if (lane == leader) first = atomicAdd(&count, uint32_t(__popc(want)));
    const uint32_t slot = __shfl_sync(active, first, leader) + __popc(want & ((1u << lane) - 1));
    const bool staged = slot < kCapacity;
    if (take && staged) items[slot] = item;
    warp_append(take && !staged, item, out, counter);
  }

  // Every thread of the block calls both, the first before any append.
  __device__ __forceinline__ void clear() {
    if (threadIdx.x == 0) count = 0;
  }
  __device__ __forceinline__ void flush(Comp* out, uint32_t* counter) {
    __syncthreads();
    const uint32_t staged = min(count, kCapacity);
    if (threadIdx.x == 0 && staged != 0) base = atomicAdd(counter, staged);
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < staged; i += blockDim.x) out[base + i] = items[i];
  }
};

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
                        bool histogram_next, bool after_threshold_pass, RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  constexpr int kBits = kCompositeBits<Key>;
  __shared__ MultiPassShared pass;
  __shared__ BlockStage<Comp> winner_stage, candidate_stage;

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
  const RowTarget o = device_row_target(g, ragged, row);
  if (after_threshold_pass && state->fallback) {
    histogram_pass(g, input, largest, layout, state, o, seg, pass);
    return;
  }

  const Comp prefix = state->prefix;
  const int resolved = int(state->resolved);
  const uint32_t needed = state->needed, in_bucket = state->in_bucket;
  const bool from_buffer = state->source_is_buffer;
  const int64_t source_count = from_buffer ? int64_t(state->source_count) : o.length;
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
  }
  winner_stage.clear();
  candidate_stage.clear();
  __syncthreads();
  const InputRow<T> row_input = input_row(g, input, o, largest);
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
        winner_stage.append(win[e], items[e], row_winners, &state->winners);
        if (fits) candidate_stage.append(bucket[e], items[e], row_candidates, &state->next_count);
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
    visit_row_segment<kMultiThreads>(row_input, begin, end, consider);
  }
  winner_stage.flush(row_winners, &state->winners);
  candidate_stage.flush(row_candidates, &state->next_count);
  if (histogram) {
    __syncthreads();
    add_to_row_histogram(state->hist, pass.hist);
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

}  // namespace cuda
}  // namespace mtk
