// The threshold pass of sampled plans (multi_threshold_kernel): the one full read of the input,
// which keeps the elements at or above the row's sampled threshold as candidates.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/key_threshold.hpp"
#include "cuda/topk_key_bins.cuh"
#include "cuda/topk_multi_pass.cuh"
#include "cuda/topk_multi_sample.cuh"

namespace mtk {
namespace cuda {

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

// The threshold test of a vector's elements: take[e] for each, and whether any passed.
template <class Test, class T, int Count>
__device__ __forceinline__ bool test_each_element(const Test& passes, const T (&elements)[Count],
                                                  bool (&take)[Count]) {
  bool any = false;
#pragma unroll
  for (int e = 0; e < Count; ++e) {
    take[e] = passes(elements[e]);
    any |= take[e];
  }
  return any;
}

template <class Test, class T, int Count>
__device__ __forceinline__ bool test_elements(const Test& passes, const T (&elements)[Count],
                                              bool (&take)[Count]) {
  return test_each_element(passes, elements, take);
}

#if defined(__CUDA_ARCH__)
// bf16 and f16 pairs compared in their own format: `set` on bf16x2 / f16x2 answers for both
// halves in one instruction (a mask of 0xffff per true half), where each element took a
// widening and a float comparison; a 16-bit row has twice a float row's elements per byte read.
// Its answers are the widened comparison's (FixedFloatTest::bound_bits).
template <class T, bool AcceptUnordered>
__device__ __forceinline__ uint32_t pair_test_mask(uint32_t pair, uint32_t bound_pair) {
  uint32_t mask;
  if constexpr (std::is_same_v<T, bf16_bits>) {
    if constexpr (AcceptUnordered) {
      asm("set.geu.u32.bf16x2 %0, %1, %2;" : "=r"(mask) : "r"(pair), "r"(bound_pair));
    } else {
      asm("set.lt.u32.bf16x2 %0, %1, %2;" : "=r"(mask) : "r"(pair), "r"(bound_pair));
    }
  } else {
    static_assert(std::is_same_v<T, f16_bits>, "bf16 or f16 pairs");
    if constexpr (AcceptUnordered) {
      asm("set.geu.u32.f16x2 %0, %1, %2;" : "=r"(mask) : "r"(pair), "r"(bound_pair));
    } else {
      asm("set.lt.u32.f16x2 %0, %1, %2;" : "=r"(mask) : "r"(pair), "r"(bound_pair));
    }
  }
  return mask;
}

template <class T, bool AcceptUnordered, int Count>
__device__ __forceinline__ bool test_elements(const FixedFloatTest<T, AcceptUnordered>& test,
                                              const T (&elements)[Count], bool (&take)[Count]) {
  if constexpr (sizeof(T) == 2 && Count % 2 == 0) {
    uint32_t pairs[Count / 2];
    memcpy(pairs, elements, sizeof(pairs));
    const uint32_t bound_pair = uint32_t(test.bound_bits) * 0x10001u;
    uint32_t any = 0;
#pragma unroll
    for (int p = 0; p < Count / 2; ++p) {
      const uint32_t mask = pair_test_mask<T, AcceptUnordered>(pairs[p], bound_pair);
      take[2 * p] = (mask & 0xffffu) != 0;
      take[2 * p + 1] = (mask >> 16) != 0;
      any |= mask;
    }
    return any != 0;
  } else {
    return test_each_element(test, elements, take);
  }
}
#endif

// The row's threshold key and the width of its key bins: merged from the parts of a split
// sample (and recorded for the kernels after this one), or as the sample kernel left them. Either
// way the key is the lowest its test accepts (see multi_sample_kernel).
template <class T, class Key, class Comp>
__device__ __forceinline__ void read_row_threshold(RowState<Comp>* state,
                                                   const MultiLayout& layout, int seg,
                                                   bool largest, Key& threshold_key,
                                                   int& key_shift) {
  if (layout.split_sample_rank > 0) {
    Key ranked, sample_largest;
    merge_split_sample(state, layout.split_sample_rank, ranked, sample_largest);
    threshold_key = KeyThreshold<T>::lowest_accepted_key(ranked, largest);
    key_shift = int(key_bin_shift(sample_largest, threshold_key));
    // Every block of the row holds the same.
    if (seg == 0 && threadIdx.x == 0) {
      state->threshold = Comp(threshold_key) << 32;
      state->threshold_shift = uint32_t(key_shift);
    }
  } else {
    threshold_key = Key(state->threshold >> 32);
    key_shift = int(state->threshold_shift);
  }
}

// Run by the last threshold block of a row, once every block's candidates are counted: either
// leaves few candidates to the finish kernel alone (placing the winners by bins where that
// pays, start_bin_ranges), or chooses the first digit over them for the filter passes, or, when
// the threshold missed, clears what the pass left and flags the row for the exact passes over
// the input. `k` is the row's count of winners (fewer in a ragged window shorter than k).
// `pass.hist` is free for its use.
template <class Key, class Comp>
__device__ __forceinline__ void conclude_threshold_pass(RowState<Comp>* state, int64_t k,
                                                        uint32_t capacity,
                                                        CandidateHistogram histogram,
                                                        Key threshold_key, int key_shift,
                                                        MultiPassShared& pass) {
  const bool histogram_candidates = histogram != CandidateHistogram::None;
  const bool key_prefix = histogram == CandidateHistogram::KeyPrefix;
  const uint32_t count = __ldcg(&state->next_count);
  bool hit = count >= uint32_t(k) && count <= capacity;
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
    key_choice = choose_bucket<kMultiBins, kMultiThreads>(pass.hist, uint32_t(k), pass.scan,
                                                          &pass.choice);
    if (key_choice.digit == uint32_t(kMultiBins - 1)) hit = false;  // beyond the bins
    if constexpr (kFinishByKeyBins<Comp>) {
      // The finish ranks the placed winners in shared memory, as it sorts them.
      if (hit && !direct && k <= kSortCapacity &&
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
    state->needed = uint32_t(k);
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
      state->needed = uint32_t(k) - key_choice.above;
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

// The one read of the input for sampled plans: candidates (the elements that pass the row's
// threshold test, see key_threshold.hpp) go to the buffer and their top digit to the row's
// histogram; the last block of the row then decides how the row goes on
// (conclude_threshold_pass).
//
// Candidates are staged in shared memory and copied out once per block: a global atomic whose
// result a warp waits for costs an L2 round trip, and on a single long row every warp would wait
// on the same counter. Beyond the stage's capacity they go straight to the buffer.
//
// A ragged row reads its window; rows the sample kernel flagged for the exact passes, or found
// empty, skip it.
template <class T, int StageBytes>
__global__ void __launch_bounds__(kMultiThreads, threshold_blocks_per_sm(int(sizeof(T))))
    multi_threshold_kernel(RowGeometry g, const T* input, bool largest, MultiLayout layout,
                           RowState<Composite<typename KeyTraits<T>::Key>>* states,
                           Composite<typename KeyTraits<T>::Key>* candidates,
                           CandidateHistogram histogram, RaggedRows ragged) {
  const int64_t row = blockIdx.x / layout.blocks_per_row;
  const int seg = int(blockIdx.x % layout.blocks_per_row);
  int64_t begin, end;
  // The input is not an earlier kernel's output: its prefetch need not wait. A ragged row's
  // window is (its lengths and starts may be).
  if (!ragged.is_ragged()) {
    segment_bounds(g.n, layout.blocks_per_row, seg, begin, end);
    if (threadIdx.x == 0) {
      prefetch_segment_head(input + device_row_offsets(g, row).input, g.input_stride, begin, end,
                            layout.l2_prefetch_bytes);
    }
  }
  wait_for_previous_kernel();
  allow_next_kernel();
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  // Set by the sample kernel, the same for every block.
  if (states[row].fallback || states[row].complete) return;
  const RowTarget o = device_row_target(g, ragged, row);
  segment_bounds(o.length, layout.blocks_per_row, seg, begin, end);
  if (ragged.is_ragged() && threadIdx.x == 0) {
    prefetch_segment_head(input + o.input, g.input_stride, begin, end, layout.l2_prefetch_bytes);
  }
  __shared__ MultiPassShared pass;
  constexpr int kSlots = kThresholdSlotsPerThread<StageBytes, int(sizeof(StageEntry<T>))>;
  __shared__ StageEntry<T> staged[kSlots][kMultiThreads];
  __shared__ uint32_t staged_base;

  RowState<Comp>* state = states + row;
  Key threshold_key;
  int key_shift;
  read_row_threshold<T>(state, layout, seg, largest, threshold_key, key_shift);
  const uint32_t capacity = uint32_t(layout.capacity);
  Comp* row_candidates = candidates + row * layout.capacity;

  for (int b = threadIdx.x; b < kMultiBins; b += kMultiThreads) pass.hist[b] = 0;
  __syncthreads();
  int staged_count = 0;  // this thread's slots in use
  const InputRow<T> source = input_row(g, input, o, largest);
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
      if (!test_elements(passes, elements, take)) return;
      // A candidate costs its thread a store of its raw bits and index; its key waits for the
      // copy-out below, where every thread of the block has one to build (built here, they made
      // the few lanes holding candidates run ~90 instructions a vector while the rest of the
      // warp waited, and k ~ 1024 rows have a candidate in most vectors). Where the vector's
      // candidates all fit the thread's slots, the stores are predicated rather than branched:
      // a branch and a spill path per element made the loop ~10000 instructions for bf16, and a
      // quarter of its warp samples waited for instructions to be fetched.
      int taken = 0;
  #pragma unroll
      for (int e = 0; e < kCount; ++e) taken += take[e] ? 1 : 0;
      if (staged_count + taken <= kSlots) {
  #pragma unroll
        for (int e = 0; e < kCount; ++e) {
          const StageEntry<T> entry = stage_entry(elements[e], first + uint32_t(e));
          if (take[e]) staged[staged_count][threadIdx.x] = entry;
          staged_count += take[e] ? 1 : 0;
        }
        return;
      }
      // Past the thread's slots (heavy ties, adversarial rows, a few threads of large-k rows) a
      // candidate takes a slot of the buffer through a global atomic its converged lanes share:
      // rare (the plan sizes the sample for it), and kept out of the registers of the common
      // path.
  #pragma unroll
      for (int e = 0; e < kCount; ++e) {
        if (!take[e]) continue;
        const uint32_t index = first + uint32_t(e);
        if (staged_count < kSlots) {
          staged[staged_count++][threadIdx.x] = stage_entry(elements[e], index);
        } else {
          keep_candidate(elements[e], index, claim_slot_per_lane(&state->next_count));
        }
      }
    });
  });
  // The stage goes out slot by slot: the j-th candidates of a warp's lanes to adjacent slots of
  // the buffer, each (slot, warp) run after the next one's. Each thread's candidates in a run
  // of their own made every store instruction touch 32 sectors (the copy-out was 9% of the
  // pass's warp samples on 256x131072, H200).
  constexpr int kWarps = kMultiThreads / 32;
  constexpr int kRuns = kSlots * kWarps;
  static_assert(kRuns <= kMultiThreads, "a run a thread");
  __shared__ uint32_t run_start[kRuns];
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const unsigned lanes_below = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const unsigned holding = __ballot_sync(0xffffffffu, staged_count > j);
    if (lane == 0) run_start[j * kWarps + warp] = uint32_t(__popc(holding));
  }
  __syncthreads();
  const uint32_t run_size = threadIdx.x < kRuns ? run_start[threadIdx.x] : 0u;
  uint32_t stage_size;
  const uint32_t after_run = block_suffix_sum<kMultiThreads>(run_size, pass.scan, stage_size);
  if (threadIdx.x < kRuns) run_start[threadIdx.x] = after_run;
  if (threadIdx.x == 0) staged_base = atomicAdd(&state->next_count, stage_size);
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const unsigned holding = __ballot_sync(0xffffffffu, staged_count > j);
    if (holding == 0) break;
    if (staged_count > j) {
      const StageEntry<T> entry = staged[j][threadIdx.x];
      const uint32_t slot =
          staged_base + run_start[j * kWarps + warp] + uint32_t(__popc(holding & lanes_below));
      keep_candidate(stage_value<T>(entry), stage_index(entry), slot);
    }
  }
  if (histogram_candidates) {
    __syncthreads();
    add_to_row_histogram(state->hist, pass.hist);
  }
  if (last_block_of_row(&state->blocks_done, layout.blocks_per_row, &pass.last_flag)) {
    conclude_threshold_pass(state, o.count, capacity, histogram, threshold_key, key_shift, pass);
  }
}

}  // namespace cuda
}  // namespace mtk
