// The CUDA sampling filters and samplers (docs/CONTRACT.md, "Sampling filters"), one block per
// row, the same steps as the CPU backend (lib/cpu/sampling.cpp) with the same arithmetic
// (core/sampling_math.hpp), so that every result is the CPU's bit for bit. (A small batch's rows
// are each read by a cluster of blocks: sampling_split.cuh, built on the steps here.)
//
// A row's top-k filter is a threshold search over the contract's keys, never a sort. Where it
// keeps at most kCandidateCapacity tokens, a histogram of the keys' top 12 bits finds the bin of
// the k-th key and a second read gathers the tokens of that bin and above into shared memory;
// the search finishes there, and everything after (softmax, top-p, min-p, renormalisation or
// the draw) runs on the kept tokens alone: two reads of the row. Where that bin holds too many
// tokens, the search reads the row once per 8 bits of key (ties at the threshold broken by a
// search over their indices). top_k_mask_logits writes its row in the read that gathers the
// candidates, from a guess or from the histogram's bin (16-byte stores, every token below the
// prefix masked), and then masks the few candidates the cutoff drops. Without a top-k filter,
// or a larger one, the same steps run over all of the row's masses: probabilities without a
// top-k filter are their own masses, read from the input; the others' masses go to the
// workspace.
//
// No filter adds 256-bit sums element by element: the pass that computes the masses also sums
// them exactly by exponent (64-bit significand sums in shared memory, converted once per
// exponent) and finds the largest. Those bins give the total and top-p's cut to the exponent;
// three passes over the significand's bits within that exponent (64-bit sums again) and, for a
// run of ties, a search over indices finish the cut, which returns the exact sum it keeps and is
// applied by the next reader. min-p is one pass (a comparison of float bits, binned sums of what
// it keeps). The renormalisation divides by a reciprocal of the sum computed once; the draw
// scans exact sums of ranges in vocabulary order. Without top-k, top_p_renorm_probs reads the
// input five times and writes the row once. Probabilities that neither top-k nor top-p filters
// (min-p alone, or no filter): one read finds the largest mass, the next draws (or sums, and a
// third writes the renormalised row).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/sampling_math.hpp"
#include "cuda/sampling_block.cuh"
#include "metaltopk.h"

namespace mtk {
namespace cuda {
namespace sampling {

// A per-row float parameter: the [rows] tensor where given, else the scalar.
struct RowFloatArg {
  const float* data;
  int64_t stride;
  float value;
  __device__ float at(int64_t row) const { return data != nullptr ? data[row * stride] : value; }
};

// A per-row integer parameter: the [rows] int32 or int64 tensor where given, else the scalar.
struct RowIntegerArg {
  const void* data;
  int64_t stride;
  int64_t value;
  bool is_int32;
  __device__ int64_t at(int64_t row) const {
    if (data == nullptr) return value;
    return is_int32 ? int64_t(static_cast<const int32_t*>(data)[row * stride])
                    : static_cast<const int64_t*>(data)[row * stride];
  }
};

struct SamplingArgs {
  int64_t n;
  const void* input;
  int64_t input_row_stride, input_stride;  // elements
  RowIntegerArg top_k;
  RowFloatArg top_p, min_p, temperature, uniforms;
  void* output;
  bool output_int64;
  int64_t output_row_stride, output_stride;
  // [rows, masses_row_stride] floats of the workspace, for rows that do not finish on
  // candidates; null when no row needs them.
  float* masses;
  int64_t masses_row_stride;
};

// The input formats: raw element type, -inf in it, and its widening to float32 bits (exact).
struct Float32Input {
  using Raw = uint32_t;
  static constexpr Raw kNegativeInfinity = 0xff800000u;
  __device__ static uint32_t widen(Raw r) { return r; }
};
struct Float16Input {
  using Raw = uint16_t;
  static constexpr Raw kNegativeInfinity = 0xfc00u;
  __device__ static uint32_t widen(Raw r) { return f16_to_f32_bits(r); }
};
struct Bfloat16Input {
  using Raw = uint16_t;
  static constexpr Raw kNegativeInfinity = 0xff80u;
  __device__ static uint32_t widen(Raw r) { return bf16_to_f32_bits(r); }
};

template <class Format>
struct InputRow {
  const typename Format::Raw* data;
  int64_t stride;
  __device__ typename Format::Raw raw(int64_t i) const { return data[i * stride]; }
};

template <class Format>
__device__ __forceinline__ float value_of(typename Format::Raw raw) {
  return float_from_bits(Format::widen(raw));
}

// How a token ranks: a logit by the top-k contract's key (widening is exact, so the float32 key
// orders f16 and bf16 too); a probability by its mass, whose float bits order as its value.
__device__ __forceinline__ uint32_t rank_key(float value, bool logits) {
  return logits ? key_from_f32(value) : bits_from_float(probability_mass(value));
}

// Calls visit(i, raw) for every element of the row, each thread for its share (in no
// particular order): 16-byte loads, several in flight, where the row is contiguous and aligned.
template <class Raw, class Visit>
__device__ __forceinline__ void visit_vector(uint4 word, int64_t first, Visit& visit) {
  constexpr int kPerVector = int(16 / sizeof(Raw));
  Raw parts[kPerVector];
  memcpy(parts, &word, 16);
#pragma unroll
  for (int e = 0; e < kPerVector; ++e) visit(first + e, parts[e]);
}

template <class Format, class Visit>
__device__ void for_each_element(const InputRow<Format>& row, int64_t n, Visit visit) {
  using Raw = typename Format::Raw;
  constexpr int kPerVector = int(16 / sizeof(Raw));
  constexpr int kInFlight = 4;
  const bool vectors_fit =
      row.stride == 1 && (reinterpret_cast<uintptr_t>(row.data) & 15u) == 0u;
  const int64_t vectors = vectors_fit ? n / kPerVector : 0;
  const uint4* words = reinterpret_cast<const uint4*>(row.data);
  int64_t q = threadIdx.x;
  for (; q + (kInFlight - 1) * kThreads < vectors; q += kInFlight * kThreads) {
    // Unrolled, `loaded` is registers; left to nvcc, these loops were not unrolled in the
    // sample_from_logits kernels, and each load went to local memory and back (nvdisasm).
    uint4 loaded[kInFlight];
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) loaded[b] = __ldg(words + q + b * kThreads);
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) {
      visit_vector<Raw>(loaded[b], (q + b * kThreads) * kPerVector, visit);
    }
  }
  for (; q < vectors; q += kThreads) visit_vector<Raw>(__ldg(words + q), q * kPerVector, visit);
  for (int64_t i = vectors * kPerVector + threadIdx.x; i < n; i += kThreads) visit(i, row.raw(i));
}

// What a top-k filter keeps: keys above `key`, and of those equal to it the ones at indices up
// to last_index (the contract's ties to the lower index).
struct TopkCutoff {
  uint32_t key;
  uint32_t last_index;
  __device__ bool keeps(uint32_t k, int64_t i) const {
    return k > key || (k == key && uint32_t(i) <= last_index);
  }
};
__device__ __forceinline__ TopkCutoff keep_all() { return {0u, 0xffffffffu}; }

// The ties-th lowest index (1-based) of the `equal` pairs whose key is `key`, up to kBins of
// them (a bfloat16 row's k-th key is often shared by a few tokens): they go to shared memory and
// each counts the indices below its own. Borrows s.counts and s.kept_count, which no search or
// keep_candidates holds across this call.
template <class ForEachPair>
__device__ uint32_t tie_index(SharedState& s, ForEachPair for_each_pair, uint32_t key,
                              uint32_t equal, uint32_t ties) {
  if (threadIdx.x == 0) s.kept_count = 0u;
  __syncthreads();
  for_each_pair([&](uint32_t pair_key, int64_t i) {
    if (pair_key == key) s.counts[atomicAdd(&s.kept_count, 1u)] = uint32_t(i);
  });
  __syncthreads();
  for (uint32_t j = threadIdx.x; j < equal; j += kThreads) {
    const uint32_t index = s.counts[j];
    uint32_t below = 0u;
    for (uint32_t m = 0; m < equal; ++m) below += s.counts[m] < index ? 1u : 0u;
    if (below == ties - 1u) s.selected_bin = index;
  }
  __syncthreads();
  const uint32_t index = s.selected_bin;
  __syncthreads();
  return index;
}

// How a cutoff is searched. kByCount: a search by count over the keys' 32 bits, then over the
// index bits of the k-th key's ties. kSharedBitsFirst: the bits every key shares found first
// (block_shared_bits) and their passes skipped, the ties ranked in shared memory (tie_index);
// over the candidates of a bfloat16 row one pass where kByCount takes four, and none for the
// ties where kByCount takes three. Only the mask kernels take it: in the kernels that keep the
// candidates to finish on them, which nvcc bounds to 128 registers, its code cost more than it
// saved (H100, top_k_renorm_probs 64x151936 53.3 -> 60.7 us, bench/CUDA_NOTES.md lead 12).
enum class CutoffSearch { kByCount, kSharedBitsFirst };

// The cutoff that keeps exactly the k largest of a set of (key, index) pairs that holds at
// least k; for_each_pair(f) calls f(key, index) for each pair, each thread for its share;
// `known` the bits every key shares (kSharedBitsFirst).
template <CutoffSearch kSearch = CutoffSearch::kByCount, class ForEachPair>
__device__ TopkCutoff top_k_cutoff(SharedState& s, ForEachPair for_each_pair, uint32_t k,
                                   int64_t n, SharedBits known = {0u, 0u, 0u}) {
  const auto for_each_key = [&](auto&& f) {
    for_each_pair([&](uint32_t key, int64_t) { f(key); });
  };
  const CountSelection kth = select_by_count(s, for_each_key, 32, k, true, OneBlock{}, known);
  const uint32_t ties = k - kth.before;
  uint32_t last_index = 0xffffffffu;
  if (ties < kth.equal) {
    if (kSearch == CutoffSearch::kSharedBitsFirst && kth.equal <= uint32_t(kBins)) {
      last_index = tie_index(s, for_each_pair, kth.value, kth.equal, ties);
    } else {
      const auto for_each_tie = [&](auto&& f) {
        for_each_pair([&](uint32_t key, int64_t i) {
          if (key == kth.value) f(uint32_t(i));
        });
      };
      last_index = select_by_count(s, for_each_tie, index_bits(n), ties, false).value;
    }
  }
  return {kth.value, last_index};
}

// ---- the top-k filter's candidates -------------------------------------------------------------
// The first step of a top-k filter that keeps k <= kCandidateCapacity tokens gathers the tokens
// of every key from some key up (index and input value) into the candidates, where they hold
// the row's k largest and every token tied with the k-th, so that the filter's cutoff is found
// among them alone (cutoff_of_candidates). Two ways: a guess from a sample of the keys, in one
// read of the row, where k is at most half the capacity and the row long; else, or where the
// guess missed (fewer than k gathered, or more than fit), a histogram of the keys' top 12 bits,
// which takes a read to count and one to gather. One block searches a row, or a cluster of
// blocks each its slice of it (the Group: OneBlock, or sampling_split.cuh's ClusterGroup), the
// candidates and counts meeting in the lead block.

// The part of a row one block of its group reads (the whole row for one block). In a cluster: a
// whole number of 8-token pieces (at least 16 bytes), so that the slices of an aligned row start
// aligned for 16-byte loads.
struct RowSlice {
  int64_t begin, end;
  __device__ int64_t size() const { return end - begin; }
};

template <class Format>
__device__ __forceinline__ InputRow<Format> slice_input(const InputRow<Format>& row,
                                                        RowSlice slice) {
  return {row.data + slice.begin * row.stride, row.stride};
}

// Whether a top-k filter keeping k of a row of n tokens guesses from a sample first.
__device__ __forceinline__ bool guesses_from_sample(int64_t n, uint32_t k) {
  return k <= uint32_t(kCandidateCapacity / 2) && n >= kMinSampledTokens;
}

// Tokens to aim the guess at: as many times k as the capacity is times the aim, so that the
// sample's error stays inside both bounds with the fewest candidates to finish on.
__device__ __forceinline__ uint32_t sample_target(uint32_t k) {
  return uint32_t(sqrtf(float(k) * float(kCandidateCapacity)));
}

// Keys are guessed and gathered by their top 16 bits: fine enough to place a threshold between
// neighbouring ranks of the sample, and every token of one key falls on the same side.
constexpr int kGuessShift = 16;

// Guesses a row may take before the histogram: each after the first aims by what the one
// before gathered.
constexpr int kGuesses = 3;

// The largest k that guesses from the sample alone. Up to it the target lies 2.8 times or more
// from both bounds and a miss is rare; above it rows miss now and then (at k = 1024 on 262144
// tokens the target lies 1.4 times from both, two standard deviations of the sample's count
// below it and three above), and a batch waits for its slowest row. So above it a row guesses
// once, and that read also counts the histogram: a miss then costs the histogram's gather, one
// read, where guessing again could cost several.
constexpr uint32_t kSureGuessMostK = kCandidateCapacity / 8;

// The fewest sample keys a first guess aims at, where those stand for at most half the capacity:
// fewer misjudge the row's rate (the 5th key of one benchmark row stood for 45 tokens, not 320).
constexpr int64_t kLeastFirstRank = 16;

// Loads into s.sample_keys the top 16 bits of kSampleKeys keys of the row's n tokens (at least
// kMinSampledTokens, so that the runs never overlap): runs of kSampleRun spread evenly over it.
template <class Format>
__device__ void load_key_sample(SharedState& s, const InputRow<Format>& row, int64_t n,
                                bool logits) {
  constexpr int kPerThread = kSampleKeys / kThreads;
  const int64_t run_stride = n / (kSampleKeys / kSampleRun);
  uint16_t loaded[kPerThread];  // every load in flight before the first store
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int j = int(threadIdx.x) + u * kThreads;
    const int64_t i = (j / kSampleRun) * run_stride + j % kSampleRun;
    loaded[u] = uint16_t(rank_key(value_of<Format>(row.raw(i)), logits) >> kGuessShift);
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) s.sample_keys[int(threadIdx.x) + u * kThreads] = loaded[u];
  __syncthreads();
}

// The 16-bit key prefix of the rank-th largest of the block's sample.
__device__ CountSelection sample_prefix(SharedState& s, uint32_t rank) {
  const auto for_each_sample = [&](auto&& f) {
    for (int j = threadIdx.x; j < kSampleKeys; j += kThreads) f(s.sample_keys[j]);
  };
  return select_by_count(s, for_each_sample, 32 - kGuessShift, rank, true);
}

// The sample's rank to aim a row's first guess at: where the target lies by the sample's rate,
// but at least kLeastFirstRank where those keys stand for at most half the capacity (at least 1;
// at most a tenth of the sample, as the row holds at least twice as many tokens).
__device__ __forceinline__ uint32_t first_sample_rank(uint32_t k, int64_t n, int64_t sampled) {
  const int64_t aimed = (int64_t(sample_target(k)) * sampled + n - 1) / n;
  const int64_t half_capacity = int64_t(kCandidateCapacity / 2) * sampled / n;
  const int64_t least = half_capacity < kLeastFirstRank ? half_capacity : kLeastFirstRank;
  return uint32_t(aimed > least ? aimed : least);
}

// The rank for the next guess, after `guess` gathered `gathered` tokens (fewer than k or more
// than fit): the sample holds one key in every n / sampled of the row's, so the target lies
// about (target - gathered) * sampled / n keys past the guess's own, whatever the guess's luck;
// at least one key past its prefix; 0 where no other prefix is left.
__device__ __forceinline__ uint32_t next_sample_rank(CountSelection guess, uint32_t gathered,
                                                     uint32_t k, int64_t n, int64_t sampled) {
  const int64_t at_or_above = int64_t(guess.before) + guess.equal;
  const int64_t rank =
      at_or_above + (int64_t(sample_target(k)) - int64_t(gathered)) * sampled / n;
  if (gathered > uint32_t(kCandidateCapacity)) {
    if (guess.before == 0u) return 0u;
    return uint32_t(rank < 1 ? 1 : rank > int64_t(guess.before) ? int64_t(guess.before) : rank);
  }
  if (at_or_above >= sampled) return 0u;
  return uint32_t(rank <= at_or_above ? at_or_above + 1 : rank > sampled ? sampled : rank);
}

// The histogram's bin of a key.
constexpr int kWideShift = 32 - kWideBits;

__device__ __forceinline__ void clear_wide_counts(SharedState& s) {
  for (int b = threadIdx.x; b < kWideBins; b += kThreads) s.wide_counts[b] = 0u;
}

// No output written by the candidates' read (every operation but top_k_mask_logits).
struct NoMaskSlice {
  static constexpr bool kWrites = false;
};

// top_k_mask_logits' output for the part of the row one block reads: the read that gathers the
// candidates from a key prefix (a guess's, or the histogram's bin) also writes it, every token
// below the prefix masked and every other as it is; once the candidates hold the top k
// (`written`), the candidates the cutoff drops are the only tokens left to mask
// (mask_dropped_candidates), and no read of the row is needed after the gathering one.
template <class Format>
struct MaskSlice {
  static constexpr bool kWrites = true;
  typename Format::Raw* out;  // the part's first token
  int64_t stride;
  bool written;
};

// Adds to `lead`'s candidates the tokens of `part` (token `first` of the row first) whose key
// prefix (key >> shift) is at least `prefix`; past the capacity it only counts them. kCount: also
// counts every token into this block's histogram (s.wide_counts). A MaskSlice is written as it
// reads.
template <bool kCount, class Format, class Mask>
__device__ void gather_from_prefix(SharedState& s, SharedState* lead, const InputRow<Format>& part,
                                   int64_t size, int64_t first, uint32_t prefix, int shift,
                                   bool logits, const Mask& mask) {
  using Raw = typename Format::Raw;
  const auto gather = [&](int64_t i, Raw raw) {
    const float value = value_of<Format>(raw);
    const uint32_t key = rank_key(value, logits);
    if (kCount) atomicAdd(&s.wide_counts[key >> kWideShift], 1u);
    const bool at_or_above = (key >> shift) >= prefix;
    if (at_or_above) {
      const uint32_t slot = atomicAdd(&lead->candidate_count, 1u);
      if (slot < uint32_t(kCandidateCapacity)) {
        lead->candidate_index[slot] = uint32_t(first + i);
        lead->candidate_mass[slot] = value;
      }
    }
    return at_or_above;
  };
  if constexpr (Mask::kWrites) {
    map_row(part, size, mask.out, mask.stride, [&](int64_t i, Raw raw) {
      return gather(i, raw) ? raw : Raw(Format::kNegativeInfinity);
    });
  } else {
    for_each_element(part, size, [&](int64_t i, Raw raw) { gather(i, raw); });
  }
}

__device__ __forceinline__ bool guess_holds(uint32_t gathered, uint32_t k) {
  return gathered >= k && gathered <= uint32_t(kCandidateCapacity);
}

// The candidates of the row's top k (see above), every block of the group reading its slice
// (tokens [slice.begin, slice.end) of the row's n): true in every block once the lead's
// candidates hold them; false in every block, nothing gathered, where they would not fit. A
// MaskSlice is written by the gathering reads, and marked written in every block where the
// candidates were gathered.
template <class Format, class Group, class Mask = NoMaskSlice>
__device__ bool gather_top_candidates(const Group& g, SharedState& s, const InputRow<Format>& row,
                                      RowSlice slice, int64_t n, uint32_t k, bool logits,
                                      Mask&& mask = NoMaskSlice{}) {
  using Raw = typename Format::Raw;
  const InputRow<Format> part = slice_input(row, slice);
  SharedState* const lead_state = g.lead_state(s);
  bool counted = false;  // by the guess's read
  if (guesses_from_sample(n, k)) {
    const bool count_while_guessing = k > kSureGuessMostK;
    // Every block samples the whole row and selects from it alike, so that no cluster barrier
    // waits on the selection: the blocks agree on every guess's prefix.
    load_key_sample(s, row, n, logits);
    uint32_t rank = first_sample_rank(k, n, kSampleKeys);
    for (int guess = 0; guess < kGuesses && rank != 0u; ++guess) {
      if (g.lead() && threadIdx.x == 0) s.candidate_count = 0u;
      g.arrive();
      const CountSelection prefix = sample_prefix(s, rank);
      g.wait();  // the lead's count is reset before any block gathers
      if (count_while_guessing) {
        clear_wide_counts(s);  // over the sample, which every thread has read for the last time
        __syncthreads();
        gather_from_prefix<true>(s, lead_state, part, slice.size(), slice.begin, prefix.value,
                                 kGuessShift, logits, mask);
      } else {
        gather_from_prefix<false>(s, lead_state, part, slice.size(), slice.begin, prefix.value,
                                  kGuessShift, logits, mask);
      }
      g.sync();  // every block's tokens are in the lead's candidates
      const uint32_t gathered = lead_state->candidate_count;
      g.sync();  // every block has read the count before the lead resets it or goes on
      if (guess_holds(gathered, k)) {
        if constexpr (std::decay_t<Mask>::kWrites) mask.written = true;
        return true;
      }
      if (count_while_guessing) {
        counted = true;
        break;
      }
      rank = next_sample_rank(prefix, gathered, k, n, kSampleKeys);
    }
  }
  if (g.lead() && threadIdx.x == 0) s.candidate_count = 0u;
  if (!counted) {
    clear_wide_counts(s);
    __syncthreads();
    g.bins_cleared();
    for_each_element(part, slice.size(), [&](int64_t, Raw raw) {
      atomicAdd(&s.wide_counts[rank_key(value_of<Format>(raw), logits) >> kWideShift], 1u);
    });
  }
  g.sum_wide_counts(s, !counted);
  struct TopBins {
    uint32_t bin, gathered;
  };
  const TopBins top = g.decide(
      s,
      [&] {
        scan_bins<kWideBins>(s, true, 0u, [&](int bin) { return s.wide_counts[bin]; },
                             [&](uint32_t total) { return total >= k; });
      },
      [](const SharedState& l) {
        return TopBins{l.selected_bin, l.selected_count_before + l.wide_counts[l.selected_bin]};
      });
  if (top.gathered > uint32_t(kCandidateCapacity)) {
    g.sync();  // every block has read the lead's choice before the lead goes on
    return false;
  }
  gather_from_prefix<false>(s, lead_state, part, slice.size(), slice.begin, top.bin, kWideShift,
                            logits, mask);
  g.sync();  // every candidate is in the lead's
  if constexpr (std::decay_t<Mask>::kWrites) mask.written = true;
  return true;
}

// Keeps the candidates `cut` keeps (compacted through sort_words).
__device__ void keep_candidates(SharedState& s, TopkCutoff cut, bool logits) {
  const uint32_t count = s.candidate_count;
  if (threadIdx.x == 0) s.kept_count = 0u;
  __syncthreads();
  for (uint32_t j = threadIdx.x; j < count; j += kThreads) {
    const float value = s.candidate_mass[j];
    const uint32_t index = s.candidate_index[j];
    if (cut.keeps(rank_key(value, logits), index)) {
      s.sort_words[atomicAdd(&s.kept_count, 1u)] =
          (uint64_t(index) << 32) | bits_from_float(value);
    }
  }
  __syncthreads();
  const uint32_t kept = s.kept_count;
  for (uint32_t j = threadIdx.x; j < kept; j += kThreads) {
    s.candidate_index[j] = uint32_t(s.sort_words[j] >> 32);
    s.candidate_mass[j] = float_from_bits(uint32_t(s.sort_words[j]));
  }
  if (threadIdx.x == 0) s.candidate_count = kept;
  __syncthreads();
}

// Gathers the tokens `cut` keeps (their input values) into the candidates.
template <class Format>
__device__ void gather_candidates(SharedState& s, const InputRow<Format>& row, int64_t n,
                                  TopkCutoff cut, bool logits) {
  using Raw = typename Format::Raw;
  if (threadIdx.x == 0) s.candidate_count = 0u;
  __syncthreads();
  for_each_element(row, n, [&](int64_t i, Raw raw) {
    const float value = value_of<Format>(raw);
    if (cut.keeps(rank_key(value, logits), i)) {
      const uint32_t slot = atomicAdd(&s.candidate_count, 1u);
      s.candidate_index[slot] = uint32_t(i);
      s.candidate_mass[slot] = value;
    }
  });
  __syncthreads();
}

// The top-k filter's cutoff from candidates that hold the row's k largest
// (gather_top_candidates);
// with `keep`, the candidates are left holding exactly the kept tokens.
template <CutoffSearch kSearch = CutoffSearch::kByCount>
__device__ __forceinline__ TopkCutoff cutoff_of_candidates(SharedState& s, int64_t n, uint32_t k,
                                                           bool logits, bool keep) {
  const auto for_each_candidate = [&](auto&& f) {
    for (uint32_t j = threadIdx.x; j < s.candidate_count; j += kThreads) {
      f(rank_key(s.candidate_mass[j], logits), int64_t(s.candidate_index[j]));
    }
  };
  SharedBits known{0u, 0u, 0u};
  if constexpr (kSearch == CutoffSearch::kSharedBitsFirst) {
    known = block_shared_bits(
        s, [&](auto&& f) { for_each_candidate([&](uint32_t key, int64_t) { f(key); }); },
        s.candidate_count);
  }
  const TopkCutoff cut = top_k_cutoff<kSearch>(s, for_each_candidate, k, n, known);
  if (keep) keep_candidates(s, cut, logits);
  return cut;
}

// The row's top-k filter (0 < k < n). With `gather` (k <= kCandidateCapacity), the kept
// tokens are also left in the candidates. The candidates (gather_top_candidates, which writes
// `mask` as it reads) are tried first where k allows; else, or where they do not fit, the
// threshold search reads the row once per 8 bits of key. kSearch: how the cutoff is searched.
template <CutoffSearch kSearch = CutoffSearch::kByCount, class Format, class Mask = NoMaskSlice>
__device__ TopkCutoff top_k_of_row(SharedState& s, const InputRow<Format>& row, int64_t n,
                                   uint32_t k, bool logits, bool gather,
                                   Mask&& mask = NoMaskSlice{}) {
  using Raw = typename Format::Raw;
  if (k <= uint32_t(kCandidateCapacity) &&
      gather_top_candidates(OneBlock{}, s, row, RowSlice{0, n}, n, k, logits, mask)) {
    return cutoff_of_candidates<kSearch>(s, n, k, logits, gather);
  }
  const auto for_each_token = [&](auto&& f) {
    for_each_element(row, n, [&](int64_t i, Raw raw) {
      f(rank_key(value_of<Format>(raw), logits), i);
    });
  };
  const TopkCutoff cut = top_k_cutoff<kSearch>(s, for_each_token, k, n);
  if (gather) gather_candidates(s, row, n, cut, logits);
  return cut;
}

// The row's first token in the top-k order of its logits (argmax, NaN first).
template <class Format>
__device__ uint32_t top1_logit(SharedState& s, const InputRow<Format>& row, int64_t n) {
  unsigned long long best = 0u;
  for_each_element(row, n, [&](int64_t i, typename Format::Raw raw) {
    const unsigned long long word =
        (uint64_t(key_from_f32_bits(Format::widen(raw))) << 32) | (0xffffffffu - uint32_t(i));
    best = word > best ? word : best;
  });
  return 0xffffffffu - uint32_t(block_max_word(s, best));
}

__device__ __forceinline__ void write_token(const SamplingArgs& a, int64_t row, uint32_t token) {
  if (threadIdx.x != 0) return;
  const int64_t at = row * a.output_row_stride;
  if (a.output_int64) {
    static_cast<int64_t*>(a.output)[at] = int64_t(token);
  } else {
    static_cast<int32_t*>(a.output)[at] = int32_t(token);
  }
}

// out[q] = map(q, in[q]) for `vectors` 16-byte words, each thread for q = threadIdx.x + m *
// kThreads, four loads in flight (unrolled, as in for_each_element). kReadOnly: loads through the
// read-only path, for input nothing in the kernel writes.
template <bool kReadOnly, class MapVector>
__device__ __forceinline__ void map_vectors(const uint4* in, uint4* out, int64_t vectors,
                                            MapVector map) {
  constexpr int kInFlight = 4;
  const auto load = [&](int64_t q) {
    if constexpr (kReadOnly) {
      return __ldg(in + q);
    } else {
      return in[q];
    }
  };
  int64_t q = threadIdx.x;
  for (; q + (kInFlight - 1) * kThreads < vectors; q += kInFlight * kThreads) {
    uint4 loaded[kInFlight];
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) loaded[b] = load(q + b * kThreads);
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) out[q + b * kThreads] = map(q + b * kThreads, loaded[b]);
  }
  for (; q < vectors; q += kThreads) out[q] = map(q, load(q));
}

// Writes out[i] = transform(i, raw) for every element of the row, each thread for its share:
// 16-byte loads and stores, several in flight, where both rows are contiguous and aligned.
template <class Format, class Transform>
__device__ void map_row(const InputRow<Format>& row, int64_t n, typename Format::Raw* out,
                        int64_t out_stride, Transform transform) {
  using Raw = typename Format::Raw;
  constexpr int kPerVector = int(16 / sizeof(Raw));
  const bool vectors_fit = row.stride == 1 && out_stride == 1 &&
                           ((reinterpret_cast<uintptr_t>(row.data) |
                             reinterpret_cast<uintptr_t>(out)) & 15u) == 0u;
  const int64_t vectors = vectors_fit ? n / kPerVector : 0;
  map_vectors<true>(reinterpret_cast<const uint4*>(row.data), reinterpret_cast<uint4*>(out),
                    vectors, [&](int64_t q, uint4 word) {
                      Raw parts[kPerVector];
                      memcpy(parts, &word, 16);
#pragma unroll
                      for (int e = 0; e < kPerVector; ++e) {
                        parts[e] = transform(q * kPerVector + e, parts[e]);
                      }
                      memcpy(&word, parts, 16);
                      return word;
                    });
  for (int64_t i = vectors * kPerVector + threadIdx.x; i < n; i += kThreads) {
    out[i * out_stride] = transform(i, row.raw(i));
  }
}

// Writes 0 to every element of a float32 row: 16-byte stores where it is contiguous and aligned.
__device__ __forceinline__ void fill_zeros(float* out, int64_t n, int64_t stride) {
  const bool vectors_fit = stride == 1 && (reinterpret_cast<uintptr_t>(out) & 15u) == 0u;
  const int64_t vectors = vectors_fit ? n / 4 : 0;
  const uint4 zeros = {0u, 0u, 0u, 0u};
  uint4* words = reinterpret_cast<uint4*>(out);
  for (int64_t q = threadIdx.x; q < vectors; q += kThreads) words[q] = zeros;
  for (int64_t i = vectors * 4 + threadIdx.x; i < n; i += kThreads) out[i * stride] = 0.0f;
}

// After a guess's read wrote the row's mask (MaskSlice): masks the candidates that the cutoff
// drops, the only tokens at or above the guess's prefix that top-k does not keep. `out` is the
// row's output.
template <class Format>
__device__ void mask_dropped_candidates(const SharedState& s, TopkCutoff cut,
                                        typename Format::Raw* out, int64_t stride) {
  for (uint32_t j = threadIdx.x; j < s.candidate_count; j += kThreads) {
    if (!cut.keeps(rank_key(s.candidate_mass[j], true), s.candidate_index[j])) {
      out[int64_t(s.candidate_index[j]) * stride] = typename Format::Raw(Format::kNegativeInfinity);
    }
  }
}

// Writes the row in 16-byte stores through the cutoff: a store per dropped element as the
// filter finds it made the row's writes eight (bfloat16) or four (float32) times as many
// instructions.
template <class Format>
__device__ void write_mask(const InputRow<Format>& row, int64_t n, int64_t first,
                           typename Format::Raw* out, int64_t stride, TopkCutoff cut) {
  using Raw = typename Format::Raw;
  map_row(row, n, out, stride, [&](int64_t i, Raw raw) {
    return cut.keeps(key_from_f32_bits(Format::widen(raw)), first + i)
               ? raw
               : Raw(Format::kNegativeInfinity);
  });
}

// Where the candidates are gathered, the gathering read writes the row as well and only the
// dropped candidates are masked after the cutoff. Else (k or the tokens tied with the k-th past
// the candidates' capacity) the threshold search finds the cutoff, then a read writes the row
// (write_mask).
template <class Format>
__device__ void mask_logits(SharedState& s, const SamplingArgs& a, const InputRow<Format>& row,
                            int64_t r) {
  using Raw = typename Format::Raw;
  Raw* const out = static_cast<Raw*>(a.output) + r * a.output_row_stride;
  const int64_t k = a.top_k.at(r);
  if (!top_k_filters(k, a.n)) {
    write_mask(row, a.n, 0, out, a.output_stride, keep_all());
    return;
  }
  MaskSlice<Format> mask{out, a.output_stride, false};
  const TopkCutoff cut =
      top_k_of_row<CutoffSearch::kSharedBitsFirst>(s, row, a.n, uint32_t(k), true, false, mask);
  if (mask.written) {
    mask_dropped_candidates<Format>(s, cut, out, a.output_stride);
  } else {
    write_mask(row, a.n, 0, out, a.output_stride, cut);
  }
}

// ---- masses ---------------------------------------------------------------------------------

// The largest non-NaN scaled logit as a word: 1 above its key, or 0 where there is none.
__device__ __forceinline__ unsigned long long scaled_logit_word(float z) {
  return is_nan_f32(z) ? 0ull : (1ull << 32) | key_from_f32(z);
}

// exp(z - M) as the CPU's softmax_masses computes it, M given by its word.
__device__ __forceinline__ float softmax_mass(float z, unsigned long long most_word) {
  if ((most_word >> 32) == 0u || is_nan_f32(z)) return 0.0f;
  const float most = float_from_key(uint32_t(most_word));
  const uint32_t most_bits = bits_from_float(most);
  if (most_bits == 0xff800000u) return 0.0f;
  if (most_bits == kF32Exponent) return bits_from_float(z) == kF32Exponent ? 1.0f : 0.0f;
  return exp_of_negative_gap(gap_below(most, z));
}

// Records one computed mass in the totals of its pass (finish_mass_totals).
__device__ __forceinline__ void count_mass(SharedState& s, float mass, uint32_t& most) {
  const uint32_t bits = bits_from_float(mass);
  add_to_exponent_bin(s, bits);
  most = bits > most ? bits : most;
}

// The candidates' values become their masses; returns their totals.
__device__ __forceinline__ MassTotals candidate_masses(SharedState& s, bool logits,
                                                       float reciprocal) {
  const int count = int(s.candidate_count);
  clear_exponent_bins(s);
  uint32_t most_mass = 0u;
  if (!logits) {
    for (int j = threadIdx.x; j < count; j += kThreads) {
      const float mass = probability_mass(s.candidate_mass[j]);
      s.candidate_mass[j] = mass;
      count_mass(s, mass, most_mass);
    }
    return finish_mass_totals(s, most_mass);
  }
  unsigned long long most = 0u;
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const float z = scaled_logit(s.candidate_mass[j], reciprocal);
    const unsigned long long word = scaled_logit_word(z);
    most = word > most ? word : most;
  }
  most = block_max_word(s, most);
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const float mass = softmax_mass(scaled_logit(s.candidate_mass[j], reciprocal), most);
    s.candidate_mass[j] = mass;
    count_mass(s, mass, most_mass);
  }
  return finish_mass_totals(s, most_mass);
}

// The largest scaled logit among the tokens `cut` keeps as a word (scaled_logit_word), in every
// thread; token i of `row` is token first + i of the cut's row.
template <class Format>
__device__ unsigned long long largest_scaled_logit(SharedState& s, const InputRow<Format>& row,
                                                   int64_t n, int64_t first, TopkCutoff cut,
                                                   float reciprocal) {
  unsigned long long most = 0u;
  for_each_element(row, n, [&](int64_t i, typename Format::Raw raw) {
    const float value = value_of<Format>(raw);
    if (!cut.keeps(key_from_f32(value), first + i)) return;
    const unsigned long long word = scaled_logit_word(scaled_logit(value, reciprocal));
    most = word > most ? word : most;
  });
  return block_max_word(s, most);
}

// Every token's mass (0 where `cut` drops it) into masses[i]; returns their totals. Logits need
// `most`, the largest scaled logit's word (largest_scaled_logit) of the whole row.
template <class Format>
__device__ MassTotals row_masses(SharedState& s, const InputRow<Format>& row, int64_t n,
                                 int64_t first, TopkCutoff cut, bool logits, float reciprocal,
                                 unsigned long long most, float* masses) {
  using Raw = typename Format::Raw;
  clear_exponent_bins(s);
  uint32_t most_mass = 0u;
  for_each_element(row, n, [&](int64_t i, Raw raw) {
    const float value = value_of<Format>(raw);
    float mass = 0.0f;
    if (!logits) {
      const uint32_t key = rank_key(value, false);
      if (cut.keeps(key, first + i)) mass = float_from_bits(key);
    } else if (cut.keeps(key_from_f32(value), first + i)) {
      mass = softmax_mass(scaled_logit(value, reciprocal), most);
    }
    masses[i] = mass;
    count_mass(s, mass, most_mass);
  });
  return finish_mass_totals(s, most_mass);
}

// ---- the end of a row: filters, then renormalisation or the draw ------------------------------

// Every kept mass divided by the view's total rounded to float32 (divide_f32's rounding, by a
// reciprocal computed once). Where the masses are stored (whose tokens are consecutive) and both
// rows are contiguous and aligned, 16-byte loads and stores, several in flight (as map_row): a
// block alone on a row is bound by the bytes it keeps in flight.
template <class View>
__device__ void write_renormalised(const View& view, ExactSum total, float* out, int64_t stride) {
  const float sum = exact_to_f32(total);
  const MassDivisor divisor = mass_divisor(bits_from_float(sum) != 0u ? sum : 1.0f);
  const auto renormalised = [&](float m) {
    return bits_from_float(m) != 0u ? divide_by(m, divisor) : 0.0f;
  };
  const float* stored = view.stored();
  float* const row_out = stored != nullptr ? out + int64_t(view.index(0)) * stride : out;
  if (stored == nullptr || stride != 1 ||
      ((reinterpret_cast<uintptr_t>(stored) | reinterpret_cast<uintptr_t>(row_out)) & 15u) != 0u) {
    for_each_mass(view, [&](int64_t j, float m) {
      out[int64_t(view.index(j)) * stride] = renormalised(m);
    });
    return;
  }
  // Not the read-only path: a workspace row of masses was written earlier in this kernel.
  const int64_t vectors = view.count() / 4;
  map_vectors<false>(reinterpret_cast<const uint4*>(stored), reinterpret_cast<uint4*>(row_out),
                     vectors, [&](int64_t q, uint4 word) {
                       float parts[4];
                       memcpy(parts, &word, 16);
#pragma unroll
                       for (int e = 0; e < 4; ++e) {
                         parts[e] = renormalised(view.mass_of(q * 4 + e, parts[e]));
                       }
                       memcpy(&word, parts, 16);
                       return word;
                     });
  for (int64_t j = vectors * 4 + threadIdx.x; j < view.count(); j += kThreads) {
    row_out[j] = renormalised(view.mass(j));
  }
}

// Row r of a renormalisation's output.
__device__ __forceinline__ float* renormalised_row(const SamplingArgs& a, int64_t r) {
  return static_cast<float*>(a.output) + r * a.output_row_stride;
}

// The contract's draw from the view's masses: the first token whose cumulative mass exceeds the
// uniform times the total (0 where the view has no mass); kOrder as for sum_warp_ranges.
template <ReadOrder kOrder = ReadOrder::kForward, class View, class Ranges>
__device__ uint32_t draw(SharedState& s, const View& view, Ranges ranges, float uniform) {
  const float u = clamped_uniform(uniform);
  return first_exceeding<kOrder>(s, view, ranges,
                                 [&](ExactSum total) { return exact_scaled(total, u).floor; });
}

template <ReadOrder kOrder = ReadOrder::kForward, class View>
__device__ __forceinline__ uint32_t draw(SharedState& s, const View& view, float uniform) {
  return draw<kOrder>(s, view, WarpRanges(view.count()), uniform);
}

// min-p, then the renormalised row (kOp renormalises) or the draw, on masses that top-p (if any)
// has cut.
template <mtk_sampling_op kOp, class Format, class View>
__device__ void end_row(SharedState& s, const SamplingArgs& a, int64_t r,
                        const InputRow<Format>& row, View& view, MassTotals totals,
                        bool candidates) {
  ExactSum total = totals.total;
  const float min_p = a.min_p.at(r);
  if (min_p_filters(min_p)) total = keep_min_p(s, view, totals.most, min_p_fraction(min_p));
  if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS) {
    write_renormalised(view, total, renormalised_row(a, r), a.output_stride);
  } else {
    if (exact_is_zero(total)) {  // no mass: the first token in the contract's order
      write_token(a, r, kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS ? top1_logit(s, row, a.n) : 0u);
      return;
    }
    if (candidates) sort_candidates_by_index(s);
    write_token(a, r, draw(s, view, a.uniforms.at(r)));
  }
}

// The filters after top-k (top-p on what top-k kept, then min-p on what top-p kept), then the
// renormalised row or the draw.
template <mtk_sampling_op kOp, class Format, class View>
__device__ void finish_row(SharedState& s, const SamplingArgs& a, int64_t r,
                           const InputRow<Format>& row, View& view, MassTotals totals,
                           bool candidates) {
  const float top_p = a.top_p.at(r);
  if (top_p_filters(top_p) && !exact_is_zero(totals.total)) {
    const ExactSum target = exact_ceil_scaled(totals.total, top_p_fraction(top_p));
    CutMasses<View> kept{&view, top_p_cut(s, view, target, a.n)};
    totals.total = kept.cut.kept;
    end_row<kOp>(s, a, r, row, kept, totals, candidates);
    return;
  }
  end_row<kOp>(s, a, r, row, view, totals, candidates);
}

// A mass min-p keeps (its bits at least `least`) as itself, one it drops as 0.
__device__ __forceinline__ float mass_if_kept(uint32_t bits, uint32_t least) {
  return bits >= least ? float_from_bits(bits) : 0.0f;
}

// A row of probabilities read as masses, those below `least` (min-p's bound, as float bits) as 0;
// position j is token first + j (first is not 0 in a slice of the row, sampling_split.cuh).
// `most`: the bits of the row's largest mass, where known (else 0).
template <class Format>
struct InputMasses {
  static constexpr bool kDropsInPlace = false;
  static constexpr bool kHoldsCandidates = false;
  InputRow<Format> row;
  int64_t n;
  uint32_t least;
  int64_t first;
  uint32_t most;
  __device__ int64_t count() const { return n; }
  __device__ float mass(int64_t j) const { return kept(value_of<Format>(row.raw(j))); }
  // Probabilities come as float32; a row of them is stored contiguously where its stride is 1.
  __device__ const float* stored() const {
    if constexpr (sizeof(typename Format::Raw) == 4) {
      return row.stride == 1 ? reinterpret_cast<const float*>(row.data) : nullptr;
    } else {
      return nullptr;
    }
  }
  __device__ float mass_of(int64_t, float stored) const { return kept(stored); }
  __device__ float kept(float value) const { return mass_if_kept(rank_key(value, false), least); }
  __device__ uint32_t index(int64_t j) const { return uint32_t(first + j); }
  // The masses it keeps: at least `least`, at most the row's largest.
  __device__ MassWindow window() const {
    return most != 0u ? mass_window(least, most, n) : no_mass_window();
  }
  __device__ void raise_least(uint32_t bits) { least = bits > least ? bits : least; }
};

// Every mass of the row read from the input (before any filter), the row's largest not yet known.
template <class Format>
__device__ __forceinline__ InputMasses<Format> input_masses(const InputRow<Format>& row, int64_t n,
                                                            int64_t first) {
  return {row, n, 1u, first, 0u};
}

// The totals of a view's masses (those of finish_mass_totals) in one read.
template <class View>
__device__ MassTotals view_mass_totals(SharedState& s, const View& view) {
  clear_exponent_bins(s);
  uint32_t most = 0u;
  for_each_mass_read(view, 0, view.count(), threadIdx.x, kThreads,
                     [&](int64_t, float mass) { count_mass(s, mass, most); });
  return finish_mass_totals(s, most);
}

// The bits of the least mass that min-p keeps in a row whose largest mass has the bits `most`
// (1, every mass above 0, where min-p does not filter).
__device__ __forceinline__ uint32_t min_p_least(uint32_t most, float min_p) {
  if (!min_p_filters(min_p) || most == 0u) return 1u;
  return least_mass_bits_reaching(
      exact_ceil_scaled(exact_of_mass(float_from_bits(most)), min_p_fraction(min_p)));
}

// The min-p view of n masses of a row (`first` its first token) whose largest mass has the bits
// `most`.
template <class Format>
__device__ InputMasses<Format> min_p_masses(const InputRow<Format>& row, int64_t n, int64_t first,
                                            uint32_t most, float min_p) {
  return {row, n, min_p_least(most, min_p), first, most};
}

// ---- min-p's candidates ------------------------------------------------------------------------

// Where a row's min-p candidates go: its workspace row, each warp `per_warp` slots of token
// indices, then as many of mass bits (two arrays of words: a workspace row is 4-byte aligned).
struct MinPCandidateSlots {
  uint32_t* indices;
  uint32_t* bits;
  int64_t per_warp;
  __device__ int64_t begin(int w) const { return int64_t(w) * per_warp; }
};

__device__ __forceinline__ MinPCandidateSlots min_p_candidate_slots(const SamplingArgs& a,
                                                                    int64_t r) {
  uint32_t* words = reinterpret_cast<uint32_t*>(a.masses + r * a.masses_row_stride);
  const int64_t per_warp = a.masses_row_stride / 2 / kWarps;
  return {words, words + per_warp * kWarps, per_warp};
}

// Appends the masses (as bits) of this warp's lanes that reach `least` to the warp's slots after
// its `count` candidates, in token order: lane l holds kPer consecutive tokens from
// `first_token`, each lane's after the lane's before it. Returns false, appending nothing, where
// they do not fit.
template <int kPer>
__device__ __forceinline__ bool append_candidates(const uint32_t (&bits)[kPer],
                                                  uint32_t first_token, uint32_t least,
                                                  const MinPCandidateSlots& slots,
                                                  int64_t& count) {
  static_assert(kPer < 8, "a lane's count in three bits");
  unsigned taken = 0u;
#pragma unroll
  for (int e = 0; e < kPer; ++e) taken |= (bits[e] >= least ? 1u : 0u) << e;
  const int own = __popc(taken);
  const unsigned lanes_below = (1u << (threadIdx.x & 31)) - 1u;
  int64_t before = 0, total = 0;
  // The lanes' counts by bit: an exclusive scan of them in three votes.
#pragma unroll
  for (int bit = 0; bit < 3; ++bit) {
    if ((kPer >> bit) == 0) break;
    const unsigned has = __ballot_sync(kFullWarp, (own >> bit) & 1);
    before += int64_t(__popc(has & lanes_below)) << bit;
    total += int64_t(__popc(has)) << bit;
  }
  if (count + total > slots.per_warp) return false;
  int64_t at = slots.begin(int(threadIdx.x >> 5)) + count + before;
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    if ((taken >> e) & 1u) {
      slots.indices[at] = first_token + uint32_t(e);
      slots.bits[at] = bits[e];
      ++at;
    }
  }
  count += total;
  return true;
}

// A warp's count in SharedState::warp_candidates where its candidates did not fit its slots.
constexpr uint32_t kCandidatesOverflowed = 0xffffffffu;

// What gather_min_p_candidates found: the bits of the row's largest mass, and whether every
// warp's candidates fit its slots.
struct MinPGather {
  uint32_t most;
  bool fits;
};

// The read of largest_mass_by_warp_ranges (the same warp ranges, forward) that also gathers
// every mass min-p may keep: each warp, in token order, the masses of its range at or above
// min-p's bound for the largest mass the block has read so far, shared after each batch of
// loads. That bound only rises with the largest mass, so what min-p keeps of the row is among
// them, and the masses far below the row's largest (nearly all of a softmax row) are not
// written. A warp whose slots fill gathers no more; the row then reads its input again.
template <class View>
__device__ MinPGather gather_min_p_candidates(SharedState& s, const View& view, float min_p,
                                              const MinPCandidateSlots& slots) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const WarpRanges ranges(view.count());
  const int64_t begin = ranges.begin(warp), end = ranges.end(warp, begin);
  if (threadIdx.x == 0) s.block_most = 0u;
  __syncthreads();
  uint32_t seen = 0u, least = 1u;
  int64_t count = 0;
  bool fits = true;
  const auto raise_bound = [&](uint32_t lane_most) {
    const uint32_t warp_most = __reduce_max_sync(kFullWarp, lane_most);
    uint32_t block_most = 0u;
    if (lane == 0) block_most = atomicMax(&s.block_most, warp_most);
    block_most = __shfl_sync(kFullWarp, block_most, 0);
    block_most = block_most > warp_most ? block_most : warp_most;
    if (block_most > seen) {
      seen = block_most;
      least = min_p_least(seen, min_p);
    }
  };
  const auto bits_of = [&](int64_t j, float stored) {
    return bits_from_float(view.mass_of(j, stored));
  };
  const float* stored = view.stored();
  int64_t scalar_from = begin;
  if (stored != nullptr && (reinterpret_cast<uintptr_t>(stored + begin) & 15u) == 0u) {
    // As for_each_mass_read: four 16-byte loads in flight a lane; the warp's steps are uniform
    // (the votes need every lane), the lanes past the range holding no mass.
    constexpr int kInFlight = 4;
    const uint4* words = reinterpret_cast<const uint4*>(stored + begin);
    const int64_t vectors = (end - begin) / 4;
    int64_t q0 = 0;
    for (; q0 + kInFlight * 32 <= vectors; q0 += kInFlight * 32) {
      uint4 loaded[kInFlight];
#pragma unroll
      for (int b = 0; b < kInFlight; ++b) loaded[b] = words[q0 + b * 32 + lane];
      uint32_t bits[kInFlight][4];
      uint32_t lane_most = 0u;
#pragma unroll
      for (int b = 0; b < kInFlight; ++b) {
        float parts[4];
        memcpy(parts, &loaded[b], 16);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          bits[b][e] = bits_of(begin + (q0 + b * 32 + lane) * 4 + e, parts[e]);
          lane_most = bits[b][e] > lane_most ? bits[b][e] : lane_most;
        }
      }
      raise_bound(lane_most);
#pragma unroll
      for (int b = 0; b < kInFlight; ++b) {
        const int64_t j = begin + (q0 + b * 32 + lane) * 4;
        fits = fits && append_candidates<4>(bits[b], view.index(j), least, slots, count);
      }
    }
    for (; q0 < vectors; q0 += 32) {
      const int64_t q = q0 + lane;
      uint32_t bits[4] = {0u, 0u, 0u, 0u};
      if (q < vectors) {
        const uint4 loaded = words[q];
        float parts[4];
        memcpy(parts, &loaded, 16);
#pragma unroll
        for (int e = 0; e < 4; ++e) bits[e] = bits_of(begin + q * 4 + e, parts[e]);
      }
      uint32_t lane_most = 0u;
#pragma unroll
      for (int e = 0; e < 4; ++e) lane_most = bits[e] > lane_most ? bits[e] : lane_most;
      raise_bound(lane_most);
      fits = fits && append_candidates<4>(bits, view.index(begin + q * 4), least, slots, count);
    }
    scalar_from = begin + vectors * 4;
  }
  // A token a lane (a row not stored contiguously, or a range's last few tokens), a batch of
  // kMassBatch loads in flight.
  for (int64_t j0 = scalar_from; j0 < end; j0 += int64_t(kMassBatch) * 32) {
    uint32_t bits[kMassBatch][1];
    uint32_t lane_most = 0u;
#pragma unroll
    for (int u = 0; u < kMassBatch; ++u) {
      const int64_t j = j0 + u * 32 + lane;
      bits[u][0] = j < end ? bits_from_float(view.mass(j)) : 0u;
      lane_most = bits[u][0] > lane_most ? bits[u][0] : lane_most;
    }
    raise_bound(lane_most);
#pragma unroll
    for (int u = 0; u < kMassBatch; ++u) {
      const int64_t j = j0 + u * 32 + lane;
      fits = fits && append_candidates<1>(bits[u], view.index(j), least, slots, count);
    }
  }
  if (lane == 0) s.warp_candidates[warp] = fits ? uint32_t(count) : kCandidatesOverflowed;
  __syncthreads();
  MinPGather gathered{s.block_most, true};
  for (int w = 0; w < kWarps; ++w) {
    gathered.fits = gathered.fits && s.warp_candidates[w] != kCandidatesOverflowed;
  }
  return gathered;
}

// The candidates as a view of masses (sum_warp_ranges, draw), with the ranges that hold them:
// warp w's gathered ones, in token order, in its slots. Those below `least` (min-p's bound for
// the row's largest mass) read as 0.
struct MinPCandidates {
  MinPCandidateSlots slots;
  uint32_t least, most;
  int64_t n;  // the row's tokens
  __device__ int64_t count() const { return slots.per_warp * kWarps; }
  __device__ float mass(int64_t j) const { return mass_if_kept(slots.bits[j], least); }
  __device__ const float* stored() const { return nullptr; }
  __device__ float mass_of(int64_t j, float) const { return mass(j); }
  __device__ uint32_t index(int64_t j) const { return slots.indices[j]; }
  __device__ MassWindow window() const { return mass_window(least, most, n); }
};

struct MinPCandidateRanges {
  MinPCandidateSlots slots;
  const uint32_t* counts;  // SharedState::warp_candidates
  __device__ int64_t begin(int w) const { return slots.begin(w); }
  __device__ int64_t end(int w, int64_t begin) const { return begin + counts[w]; }
};

// Whether min_p_row gathers its candidates: in min-p's own kernel (sampling.cu), where the
// workspace holds their slots; sampling_row's min-p rows read the input twice, so that the
// gathering's code stays out of the kernel of every other row.
enum class MinPReads { kInputTwice, kCandidates };

// A row of probabilities that neither top-k nor top-p filters. min-p needs only the largest
// mass, so one read finds it; with kCandidates, the same read gathers the masses min-p may keep
// (gather_min_p_candidates), and the draw or the renormalisation's total reads those alone.
// Otherwise, or where they do not fit, the next read takes the input as the masses min-p keeps:
// for the draw, or for the total. The renormalised row is then written from the input. No sum of
// a mass that min-p drops.
// The second read goes backward through the warp ranges the first read forward (ReadOrder).
template <mtk_sampling_op kOp, MinPReads kReads, class Format>
__device__ void min_p_row(SharedState& s, const SamplingArgs& a, int64_t r,
                          const InputRow<Format>& row) {
  const float min_p = a.min_p.at(r);
  const InputMasses<Format> masses = input_masses(row, a.n, 0);
  uint32_t most;
  if (kReads == MinPReads::kCandidates && a.masses != nullptr && min_p_filters(min_p)) {
    const MinPCandidateSlots slots = min_p_candidate_slots(a, r);
    const MinPGather gathered = gather_min_p_candidates(s, masses, min_p, slots);
    most = gathered.most;
    if (gathered.fits) {
      const InputMasses<Format> view = min_p_masses(row, a.n, 0, most, min_p);
      const MinPCandidates candidates{slots, view.least, most, a.n};
      const MinPCandidateRanges ranges{slots, s.warp_candidates};
      if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS) {
        write_renormalised(view, sum_warp_ranges(s, candidates, ranges), renormalised_row(a, r),
                           a.output_stride);
      } else {
        write_token(a, r, draw(s, candidates, ranges, a.uniforms.at(r)));
      }
      return;
    }
  } else {
    most = largest_mass_by_warp_ranges(s, masses);
  }
  const InputMasses<Format> view = min_p_masses(row, a.n, 0, most, min_p);
  if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS) {
    write_renormalised(view, sum_warp_ranges<ReadOrder::kBackward>(s, view),
                       renormalised_row(a, r), a.output_stride);
  } else {
    // no mass: token 0, the contract's
    write_token(a, r, draw<ReadOrder::kBackward>(s, view, a.uniforms.at(r)));
  }
}

// What a row's parameters ask of it; the one-block and the split paths decide alike.
struct RowSteps {
  bool greedy;       // sampling from logits at temperature 0: the row's argmax
  float reciprocal;  // of the temperature (1 for probabilities)
  int64_t k;
  bool top_k;        // a top-k filter ...
  bool candidates;   // ... that keeps few enough tokens to finish on candidates
  bool min_p_alone;  // probabilities that neither top-k nor top-p filters (min_p_row)
};

template <mtk_sampling_op kOp>
__device__ RowSteps steps_of_row(const SamplingArgs& a, int64_t r) {
  constexpr bool logits = kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  RowSteps steps{};
  steps.reciprocal = 1.0f;
  if (logits) {
    const float temperature = a.temperature.at(r);
    steps.greedy = !temperature_samples(temperature);
    if (steps.greedy) return steps;
    steps.reciprocal = reciprocal_temperature(temperature);
  }
  steps.k = a.top_k.at(r);
  steps.top_k = top_k_filters(steps.k, a.n);
  steps.candidates = steps.top_k && steps.k <= kCandidateCapacity;
  steps.min_p_alone = !logits && !steps.top_k && !top_p_filters(a.top_p.at(r));
  return steps;
}

// Row r of the input.
template <class Format>
__device__ __forceinline__ InputRow<Format> input_row(const SamplingArgs& a, int64_t r) {
  return {static_cast<const typename Format::Raw*>(a.input) + r * a.input_row_stride,
          a.input_stride};
}

// ---- a few candidates, finished by one warp ----------------------------------------------------
// A top-k filter that keeps at most kWarpCandidates tokens (the engines' common top_k = 50)
// leaves little work after it, but finish_row's block passes (top-p's search, the sort by index,
// the draw's scans) take some sixty block barriers. Warp 0 does the same alone: two candidates a
// lane, sorted by warp-wide bitonic sorts, cut and drawn through warp scans of the same exact
// sums, so the results are finish_row's bit for bit.
constexpr int kWarpCandidates = 64;

// Sorts the warp's 64 words, word t of lane l at position 2l + t, descending.
__device__ __forceinline__ void warp_sort_descending(unsigned long long (&w)[2]) {
  const int lane = int(threadIdx.x & 31);
#pragma unroll
  for (int size = 2; size <= kWarpCandidates; size <<= 1) {
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride == 1) {  // positions 2l and 2l + 1: both in this lane
        const bool descending = ((2 * lane) & size) == 0;
        if ((w[0] < w[1]) == descending) {
          const unsigned long long t = w[0];
          w[0] = w[1];
          w[1] = t;
        }
        continue;
      }
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const unsigned long long other = __shfl_xor_sync(kFullWarp, w[t], stride >> 1);
        const int position = 2 * lane + t;
        const bool larger_here = ((position & stride) == 0) == ((position & size) == 0);
        w[t] = larger_here ? (w[t] > other ? w[t] : other) : (w[t] < other ? w[t] : other);
      }
    }
  }
}

// The exact sums of the masses up to and including each of the lane's two positions, in the
// order of the warp's positions (2l + t).
struct WarpPrefix {
  ExactSum through[2];
};

__device__ __forceinline__ WarpPrefix warp_prefix_sums(float first, float second) {
  const int lane = int(threadIdx.x & 31);
  const ExactSum own_first =
      bits_from_float(first) != 0u ? exact_of_mass(first) : exact_zero();
  const ExactSum own_both =
      bits_from_float(second) != 0u ? exact_add_mass(own_first, second) : own_first;
  const ExactSum inclusive = warp_inclusive_exact(own_both);
  ExactSum before = shuffle_exact_up(inclusive, 1);
  if (lane == 0) before = exact_zero();
  return {{exact_add(before, own_first), exact_add(before, own_both)}};
}

// The first of the warp's positions whose prefix sum passes `test`, in every lane (64 where
// none does).
template <class Passes>
__device__ __forceinline__ int first_position(const WarpPrefix& prefix, Passes passes) {
  const unsigned at_first = __ballot_sync(kFullWarp, passes(prefix.through[0]));
  const unsigned at_second = __ballot_sync(kFullWarp, passes(prefix.through[1]));
  const int first = at_first != 0u ? 2 * (__ffs(at_first) - 1) : kWarpCandidates;
  const int second = at_second != 0u ? 2 * (__ffs(at_second) - 1) + 1 : kWarpCandidates;
  return first < second ? first : second;
}

// Whether finish_in_one_warp finishes this row: few enough candidates with mass, and min-p
// keeping the largest (where it keeps nothing, the row's draw falls back to its first token,
// which the block finds).
__device__ __forceinline__ bool finishes_in_one_warp(const SharedState& s, const SamplingArgs& a,
                                                     int64_t r, const MassTotals& totals) {
  return s.candidate_count <= uint32_t(kWarpCandidates) && !exact_is_zero(totals.total) &&
         min_p_least(totals.most, a.min_p.at(r)) <= totals.most;
}

// finish_row on the candidates (at most kWarpCandidates, their masses computed, with mass in
// all), by warp 0 alone: top-p's cut (the shortest prefix in descending mass, ties to the lower
// index, whose sum reaches its target), min-p, then the renormalised masses or the draw (the
// first token in index order whose cumulative mass exceeds the uniform's share of the total).
template <mtk_sampling_op kOp>
__device__ void finish_in_one_warp(SharedState& s, const SamplingArgs& a, int64_t r,
                                   const MassTotals& totals) {
  const int lane = int(threadIdx.x & 31);
  const int count = int(s.candidate_count);
  uint32_t index[2];
  float mass[2];
  // Each candidate's place in top-p's order: descending mass, ties to the lower index; empty
  // slots last.
  unsigned long long rank_word[2];
#pragma unroll
  for (int t = 0; t < 2; ++t) {
    const int j = 2 * lane + t;
    index[t] = j < count ? s.candidate_index[j] : 0u;
    mass[t] = j < count ? s.candidate_mass[j] : 0.0f;
    rank_word[t] = j < count
                       ? (uint64_t(bits_from_float(mass[t])) << 32) | (0xffffffffu - index[t])
                       : 0u;
  }
  ExactSum total = totals.total;
  const float top_p = a.top_p.at(r);
  if (top_p_filters(top_p)) {
    ExactSum target = exact_ceil_scaled(total, top_p_fraction(top_p));
    if (exact_is_zero(target)) target.limb[0] = 1u;  // "reaches 0" keeps the first token alone
    unsigned long long order[2] = {rank_word[0], rank_word[1]};
    warp_sort_descending(order);
    const WarpPrefix prefix =
        warp_prefix_sums(float_from_bits(uint32_t(order[0] >> 32)),
                         float_from_bits(uint32_t(order[1] >> 32)));
    const int last = first_position(
        prefix, [&](const ExactSum& sum) { return exact_compare(sum, target) >= 0; });
    // The cut's word: candidates at or above it in the order are kept.
    // Positions picked by value, not by indexing: an array indexed at run time would live in
    // local memory.
    const bool second = (last & 1) != 0;
    const unsigned long long cut = shuffle_word_from(second ? order[1] : order[0], last >> 1);
    total = shuffle_exact_from(second ? prefix.through[1] : prefix.through[0], last >> 1);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if (rank_word[t] < cut) mass[t] = 0.0f;
    }
  }
  const float min_p = a.min_p.at(r);
  if (min_p_filters(min_p)) {
    const uint32_t least = min_p_least(totals.most, min_p);
    ExactSum own = exact_zero();
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if (bits_from_float(mass[t]) < least) mass[t] = 0.0f;
      if (bits_from_float(mass[t]) != 0u) own = exact_add_mass(own, mass[t]);
    }
    total = warp_exact_sum(own);
  }
  if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS) {
    const float sum = exact_to_f32(total);
    const MassDivisor divisor = mass_divisor(bits_from_float(sum) != 0u ? sum : 1.0f);
    float* const out = renormalised_row(a, r);
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      if (2 * lane + t < count) {
        out[int64_t(index[t]) * a.output_stride] =
            bits_from_float(mass[t]) != 0u ? divide_by(mass[t], divisor) : 0.0f;
      }
    }
  } else {
    unsigned long long order[2];  // index order; empty slots last
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      order[t] = 2 * lane + t < count
                     ? (uint64_t(0xffffffffu - index[t]) << 32) | bits_from_float(mass[t])
                     : 0u;
    }
    warp_sort_descending(order);
    const WarpPrefix prefix = warp_prefix_sums(float_from_bits(uint32_t(order[0])),
                                               float_from_bits(uint32_t(order[1])));
    const ExactSum threshold = exact_scaled(total, clamped_uniform(a.uniforms.at(r))).floor;
    const int token_at = first_position(
        prefix, [&](const ExactSum& sum) { return exact_compare(sum, threshold) > 0; });
    const unsigned long long word =
        shuffle_word_from((token_at & 1) != 0 ? order[1] : order[0], token_at >> 1);
    write_token(a, r, 0xffffffffu - uint32_t(word >> 32));
  }
}

// The end of a row whose top-k filter left exactly the kept tokens in the candidates.
template <mtk_sampling_op kOp, class Format>
__device__ void finish_on_candidates(SharedState& s, const SamplingArgs& a, int64_t r,
                                     const InputRow<Format>& row, float reciprocal) {
  const MassTotals totals =
      candidate_masses(s, kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS, reciprocal);
  if (finishes_in_one_warp(s, a, r, totals)) {
    if (threadIdx.x < 32) finish_in_one_warp<kOp>(s, a, r, totals);
    return;
  }
  Candidates view{&s};
  finish_row<kOp>(s, a, r, row, view, totals, true);
}

// One row of the sampling operation kOp; every thread of the block calls it. The operation is a
// template parameter so that each kernel holds its own steps alone: registers are allocated for
// them, and a change to one operation's code leaves the others' as they were.
template <mtk_sampling_op kOp, class Format>
__device__ void sampling_row(SharedState& s, const SamplingArgs& a, int64_t r) {
  const InputRow<Format> row = input_row<Format>(a, r);
  if constexpr (kOp == MTK_SAMPLING_TOP_K_MASK_LOGITS) {
    mask_logits(s, a, row, r);
  } else {
    constexpr bool logits = kOp == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    const RowSteps steps = steps_of_row<kOp>(a, r);
    if (steps.greedy) {
      write_token(a, r, top1_logit(s, row, a.n));
      return;
    }
    if (steps.min_p_alone) {
      min_p_row<kOp, MinPReads::kInputTwice>(s, a, r, row);
      return;
    }
    if constexpr (!logits) {
      if (!steps.top_k) {  // top-p filters: its passes read the input as the masses
        InputMasses<Format> view = input_masses(row, a.n, 0);
        const MassTotals totals = view_mass_totals(s, view);
        view.most = totals.most;
        finish_row<kOp>(s, a, r, row, view, totals, false);
        return;
      }
    }
    // A renormalised row that finishes on candidates is zeros but for them (write_renormalised).
    if (kOp == MTK_SAMPLING_RENORM_PROBS && steps.candidates) {
      fill_zeros(renormalised_row(a, r), a.n, a.output_stride);
    }
    const TopkCutoff cut = steps.top_k ? top_k_of_row(s, row, a.n, uint32_t(steps.k), logits,
                                                      steps.candidates)
                                       : keep_all();
    if (steps.candidates) {
      finish_on_candidates<kOp>(s, a, r, row, steps.reciprocal);
      return;
    }
    RowMasses view{a.masses + r * a.masses_row_stride, a.n, 0};
    const unsigned long long most =
        logits ? largest_scaled_logit(s, row, a.n, 0, cut, steps.reciprocal) : 0u;
    const MassTotals totals =
        row_masses(s, row, a.n, 0, cut, logits, steps.reciprocal, most, view.masses);
    finish_row<kOp>(s, a, r, row, view, totals, false);
  }
}

}  // namespace sampling
}  // namespace cuda
}  // namespace mtk
