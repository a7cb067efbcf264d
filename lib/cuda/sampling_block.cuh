// Block-wide building blocks of the CUDA sampling kernels (sampling_rows.cuh): reductions and
// scans of exact sums, and threshold searches over the bits of keys and masses. One block works
// on one row; every function here must be called by all threads of the block, and each ends
// with a barrier so that its shared memory may be reused at once.
//
// Everything that decides a result is integer arithmetic on exact sums (core/sampling_math.hpp),
// so the order in which threads, warps and atomics combine partial sums never shows in a result:
// that is what makes these kernels agree bit for bit with the CPU backend.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/sampling_math.hpp"

namespace mtk {
namespace cuda {
namespace sampling {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullWarp = 0xffffffffu;
// Threshold searches take 8 bits of a key per pass: 256 bins, which one warp scans (8 a lane).
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
// The top-k filter's first pass bins keys by their top 12 bits (an eighth of an octave of a
// float): fine enough that the bins at and above the k-th key usually hold few tokens.
constexpr int kWideBits = 12;
constexpr int kWideBins = 1 << kWideBits;
// Rows whose top-k filter keeps at most this many tokens finish on those tokens in shared memory.
constexpr int kCandidateCapacity = 2048;
// A top-k filter that keeps at most half that many tokens of a row of at least
// kMinSampledTokens first guesses which tokens to gather from the keys of kSampleKeys of them
// (every block of a split row samples the same keys), taken in runs of kSampleRun (one
// coalesced load a warp): sampling_rows.cuh, gather_top_candidates.
constexpr int kSampleKeys = 8192;
constexpr int kSampleRun = 32;
constexpr int64_t kMinSampledTokens = 2 * kSampleKeys;
// Exact sums of masses go through 64-bit sums of significands, one bin per exponent field
// (masses are at most 2^64: fields 0 to 191). Each bin is replicated so that the lanes of a warp,
// whose masses crowd a few binades, rarely add to one shared-memory word at once (an atomic
// conflict serialises them); the odd stride puts a bin's replicas in different banks.
constexpr int kExponentBins = 192;
constexpr int kSumReplicas = 8;
constexpr int kExponentStride = kExponentBins + 1;
// A row of a small batch is read by a cluster of up to this many blocks (sampling_split.cuh;
// over 8, a non-portable cluster size, which the H100 and H200 run).
constexpr int kMaxSplitBlocks = 16;

struct SharedState {
  // The top-k filter's first histogram, the exponent bins of the filters and totals after it,
  // and the candidates' sort: never live at once.
  union {
    uint32_t wide_counts[kWideBins];
    uint16_t sample_keys[kSampleKeys];  // the keys' top 16 bits (kGuessShift)
    unsigned long long exponent_sums[kSumReplicas][kExponentStride];
    unsigned long long sort_words[kCandidateCapacity];
  };
  uint32_t counts[kBins];
  unsigned long long sums[kBins];
  ExactSum warp_sums[kWarps];
  unsigned long long warp_words[kWarps];
  // What warp 0's bin scan found, for the whole block.
  uint32_t selected_bin;
  uint32_t selected_count_before;
  unsigned long long selected_units_before;
  ExactSum selected_exact_before;
  // A draw's token, and the piece of the row where its cumulative sum crosses the threshold.
  uint32_t token;
  int64_t crossing_begin, crossing_end;
  // The candidates of a row whose top-k filter keeps few tokens: index, then input value or
  // mass. Compacting and sorting them by index goes through sort_words.
  uint32_t candidate_count, kept_count;
  uint32_t candidate_index[kCandidateCapacity];
  float candidate_mass[kCandidateCapacity];
  // A row split over a cluster (sampling_split.cuh): what block 0 decided for the cluster
  // (ClusterGroup::decide, in block 0's copy), and what each block found in its slice (largest
  // mass or logit, exact sums; two of each, each written once a row). Nothing else writes them,
  // so that a block may go on while the others still read them.
  alignas(16) unsigned char split_choice[48];
  unsigned long long split_words[2];
  ExactSum split_sums[2];
  // min-p's candidates (gather_min_p_candidates): the largest mass's bits the block has read so
  // far, and how many candidates each warp gathered.
  uint32_t block_most;
  uint32_t warp_candidates[kWarps];
};

// ---- warp and block collectives ------------------------------------------------------------

__device__ __forceinline__ ExactSum shuffle_exact_up(ExactSum v, int delta) {
  for (int i = 0; i < 4; ++i) {
    v.limb[i] = __shfl_up_sync(kFullWarp, (unsigned long long)v.limb[i], delta);
  }
  return v;
}

__device__ __forceinline__ ExactSum shuffle_exact_xor(ExactSum v, int lane_mask) {
  for (int i = 0; i < 4; ++i) {
    v.limb[i] = __shfl_xor_sync(kFullWarp, (unsigned long long)v.limb[i], lane_mask);
  }
  return v;
}

__device__ __forceinline__ ExactSum warp_inclusive_exact(ExactSum v) {
  const int lane = threadIdx.x & 31;
  for (int delta = 1; delta < 32; delta <<= 1) {
    const ExactSum lower = shuffle_exact_up(v, delta);
    if (lane >= delta) v = exact_add(lower, v);
  }
  return v;
}

// The warp's total, in every lane.
__device__ __forceinline__ ExactSum warp_exact_sum(ExactSum v) {
  for (int mask = 16; mask > 0; mask >>= 1) v = exact_add(v, shuffle_exact_xor(v, mask));
  return v;
}

// The block's total, in every thread.
__device__ __forceinline__ ExactSum block_exact_sum(SharedState& s, ExactSum v) {
  v = warp_exact_sum(v);
  if ((threadIdx.x & 31) == 0) s.warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  ExactSum total = exact_zero();
  for (int w = 0; w < kWarps; ++w) total = exact_add(total, s.warp_sums[w]);
  __syncthreads();
  return total;
}

// The sum of v over the threads of lower index.
__device__ __forceinline__ ExactSum block_exclusive_exact(SharedState& s, ExactSum v) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const ExactSum inclusive = warp_inclusive_exact(v);
  ExactSum exclusive = shuffle_exact_up(inclusive, 1);
  if (lane == 0) exclusive = exact_zero();
  if (lane == 31) s.warp_sums[warp] = inclusive;
  __syncthreads();
  for (int w = 0; w < warp; ++w) exclusive = exact_add(exclusive, s.warp_sums[w]);
  __syncthreads();
  return exclusive;
}

__device__ __forceinline__ unsigned long long block_max_word(SharedState& s,
                                                             unsigned long long v) {
  for (int mask = 16; mask > 0; mask >>= 1) {
    const unsigned long long other = __shfl_xor_sync(kFullWarp, v, mask);
    v = other > v ? other : v;
  }
  if ((threadIdx.x & 31) == 0) s.warp_words[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned long long most = 0u;
  for (int w = 0; w < kWarps; ++w) most = s.warp_words[w] > most ? s.warp_words[w] : most;
  __syncthreads();
  return most;
}

// ---- the bin scan of one threshold-search pass ---------------------------------------------

__device__ __forceinline__ uint32_t shuffle_up(uint32_t v, int delta) {
  return __shfl_up_sync(kFullWarp, v, delta);
}
__device__ __forceinline__ unsigned long long shuffle_up(unsigned long long v, int delta) {
  return __shfl_up_sync(kFullWarp, v, delta);
}
__device__ __forceinline__ ExactSum shuffle_up(ExactSum v, int delta) {
  return shuffle_exact_up(v, delta);
}
__device__ __forceinline__ uint32_t plus(uint32_t a, uint32_t b) { return a + b; }
__device__ __forceinline__ unsigned long long plus(unsigned long long a, unsigned long long b) {
  return a + b;
}
__device__ __forceinline__ ExactSum plus(ExactSum a, ExactSum b) { return exact_add(a, b); }
__device__ __forceinline__ void store_before(SharedState& s, uint32_t v) {
  s.selected_count_before = v;
}
__device__ __forceinline__ void store_before(SharedState& s, unsigned long long v) {
  s.selected_units_before = v;
}
__device__ __forceinline__ void store_before(SharedState& s, ExactSum v) {
  s.selected_exact_before = v;
}

// Walks the Bins bins in order (the last first when from_top) accumulating bin_value(bin), and
// records in s the first bin whose running total `reaches`, with the total of the bins before
// it (selected_bin, selected_*_before). `reaches` must be monotone and reached by the total.
// Run by warp 0 only; the caller synchronises after.
template <int Bins = kBins, class Acc, class BinValue, class Reaches>
__device__ __forceinline__ void scan_bins(SharedState& s, bool from_top, Acc zero,
                                          BinValue bin_value, Reaches reaches) {
  constexpr int kBinsPerLane = Bins / 32;
  const int lane = threadIdx.x;
  Acc lane_total = zero;
  for (int j = 0; j < kBinsPerLane; ++j) {
    // A lane's own bins in a rotated order (sums do not depend on it): the lanes then read
    // different shared-memory banks rather than one bank 32 times.
    const int position = lane * kBinsPerLane + (j + lane) % kBinsPerLane;
    lane_total = plus(lane_total, bin_value(from_top ? Bins - 1 - position : position));
  }
  Acc inclusive = lane_total;
  for (int delta = 1; delta < 32; delta <<= 1) {
    const Acc lower = shuffle_up(inclusive, delta);
    if (lane >= delta) inclusive = plus(lower, inclusive);
  }
  Acc running = shuffle_up(inclusive, 1);
  if (lane == 0) running = zero;
  if (reaches(running) || !reaches(inclusive)) return;
  for (int j = 0; j < kBinsPerLane; ++j) {
    const int position = lane * kBinsPerLane + j;
    const int bin = from_top ? Bins - 1 - position : position;
    const Acc after = plus(running, bin_value(bin));
    if (reaches(after)) {
      s.selected_bin = uint32_t(bin);
      store_before(s, running);
      return;
    }
    running = after;
  }
}

__device__ __forceinline__ void clear_bins(SharedState& s) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    s.counts[b] = 0u;
    s.sums[b] = 0u;
  }
  __syncthreads();
}

// ---- the blocks that search a row together ---------------------------------------------------
// A threshold search fills bins from every token, then scans them once. OneBlock: the block reads
// the whole row, its bins are the row's. ClusterGroup (sampling_split.cuh): each block of a
// cluster reads a slice, block 0's bins take the others', block 0 scans and every block reads
// what it decided. The searches below are written once for both.

struct OneBlock {
  __device__ bool lead() const { return true; }
  __device__ SharedState* lead_state(SharedState& s) const { return &s; }
  __device__ unsigned blocks() const { return 1u; }
  // Every thread of the group waits for the others.
  __device__ void sync() const { __syncthreads(); }
  // A barrier in two halves: what a thread wrote before arrive() every thread sees after wait().
  __device__ void arrive() const {}
  __device__ void wait() const { __syncthreads(); }
  // After the bins were cleared, before they are filled.
  __device__ void bins_cleared() const {}
  // After every thread filled its share of the bins (and of sums, where `sums`): the lead's bins
  // are the row's.
  __device__ void sum_bins(SharedState&, bool) const { __syncthreads(); }
  // The same for wide_counts, cleared before bins_cleared() where `after_bins_cleared`, else
  // before the group's last sync().
  __device__ void sum_wide_counts(SharedState&, bool) const { __syncthreads(); }
  // warp 0 of the lead runs scan(), then read(lead's state) in every thread of the group.
  template <class Scan, class Read>
  __device__ auto decide(SharedState& s, Scan scan, Read read) const {
    if (threadIdx.x < 32) scan();
    __syncthreads();
    const auto decided = read(s);
    __syncthreads();
    return decided;
  }
};

// What one pass of a threshold search decided.
struct BinChoice {
  uint32_t bin;
  uint32_t count_before;  // or
  unsigned long long units_before;
  uint32_t equal;         // the tokens in the bin
};

__device__ __forceinline__ BinChoice bin_choice(const SharedState& s) {
  return {s.selected_bin, s.selected_count_before, s.selected_units_before,
          s.counts[s.selected_bin]};
}

// ---- selection by count ----------------------------------------------------------------------

struct CountSelection {
  uint32_t value;   // of the need-th element
  uint32_t before;  // elements strictly before that value in the order
  uint32_t equal;   // elements of that value
};

// The bits that every value of a set holds alike (`fixed`, their values in `value`), and the
// set's size: a search skips the passes whose digit they cover. A row's top-k candidates share
// most of their keys' bits (the top byte by their range, all sixteen low ones where the input is
// bfloat16), and a pass over a shared digit puts every candidate in one bin: one shared-memory
// word, whose atomics run one after another.
struct SharedBits {
  uint32_t fixed;
  uint32_t value;
  uint32_t count;
};

// The bits shared by the `count` values that for_each_value(f) visits, in every thread.
template <class ForEachValue>
__device__ SharedBits block_shared_bits(SharedState& s, ForEachValue for_each_value,
                                        uint32_t count) {
  uint32_t all = 0xffffffffu, any = 0u;
  for_each_value([&](uint32_t v) {
    all &= v;
    any |= v;
  });
  all = __reduce_and_sync(kFullWarp, all);
  any = __reduce_or_sync(kFullWarp, any);
  if ((threadIdx.x & 31) == 0) {
    s.warp_words[threadIdx.x >> 5] = (static_cast<unsigned long long>(all) << 32) | any;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) {
    all &= uint32_t(s.warp_words[w] >> 32);
    any |= uint32_t(s.warp_words[w]);
  }
  __syncthreads();
  return {~(all ^ any), all, count};
}

// The value of the need-th (1-based) of a set of values of `bits` bits, ordered descending
// (from_top) or ascending. for_each_value(f) calls f(v) for every value of the set, each thread
// for its share; `known` the bits the set shares, if they were found.
template <class Group = OneBlock, class ForEachValue>
__device__ CountSelection select_by_count(SharedState& s, ForEachValue for_each_value, int bits,
                                          uint32_t need, bool from_top, const Group& g = {},
                                          SharedBits known = {0u, 0u, 0u}) {
  constexpr uint32_t kDigit = kBins - 1;
  uint64_t prefix = 0u;
  uint32_t before = 0u, equal = known.count;
  for (int pass = (bits + kDigitBits - 1) / kDigitBits - 1; pass >= 0; --pass) {
    const int shift = pass * kDigitBits;
    if (((known.fixed >> shift) & kDigit) == kDigit) {  // every value left is in one bin
      prefix |= uint64_t((known.value >> shift) & kDigit) << shift;
      continue;
    }
    clear_bins(s);
    g.bins_cleared();
    for_each_value([&](uint32_t v) {
      if ((uint64_t(v) >> (shift + kDigitBits)) != (prefix >> (shift + kDigitBits))) return;
      atomicAdd(&s.counts[(v >> shift) & (kBins - 1)], 1u);
    });
    g.sum_bins(s, false);
    const uint32_t target = need - before;
    const BinChoice choice = g.decide(
        s,
        [&] {
          scan_bins(s, from_top, 0u, [&](int bin) { return s.counts[bin]; },
                    [&](uint32_t total) { return total >= target; });
        },
        bin_choice);
    before += choice.count_before;
    equal = choice.equal;
    prefix |= uint64_t(choice.bin) << shift;
  }
  return {uint32_t(prefix), before, equal};
}

__device__ __forceinline__ int index_bits(int64_t n) {
  int bits = 1;
  while (bits < 31 && (int64_t(1) << bits) < n) ++bits;
  return bits;
}

// ---- exponent-binned exact sums ----------------------------------------------------------------

__device__ __forceinline__ void clear_exponent_bins(SharedState& s) {
  unsigned long long* words = &s.exponent_sums[0][0];
  for (int b = threadIdx.x; b < kSumReplicas * kExponentStride; b += kThreads) words[b] = 0u;
  __syncthreads();
}

// Adds `value` to a 64-bit sum in shared memory through 32-bit atomics: the low word takes the
// value, and the add that wraps it carries one into the high word, so that after a barrier the
// sum is exact. sm_90 has no 64-bit shared-memory atomic add: atomicAdd on one is a
// compare-and-swap loop (ATOMS.CAST.SPIN.64), which lanes adding to one bin serialise and retry.
__device__ __forceinline__ void add_to_shared_sum(unsigned long long* sum, uint32_t value) {
  uint32_t* words = reinterpret_cast<uint32_t*>(sum);  // little-endian: the low word first
  const uint32_t before = atomicAdd(&words[0], value);
  if (before + value < before) atomicAdd(&words[1], 1u);
}

__device__ __forceinline__ void add_to_exponent_bin(SharedState& s, uint32_t bits) {
  if (bits == 0u) return;
  add_to_shared_sum(&s.exponent_sums[threadIdx.x % kSumReplicas][bits >> 23],
                    uint32_t(mass_significand(bits)));
}

// Folds the replicas into the first (exponent_sums[0][e]: the significand sum of field e) and
// returns the exact total, in every thread.
__device__ ExactSum merge_exponent_bins(SharedState& s) {
  __syncthreads();
  ExactSum own = exact_zero();
  for (int e = threadIdx.x; e < kExponentBins; e += kThreads) {
    unsigned long long sum = 0u;
    for (int r = 0; r < kSumReplicas; ++r) sum += s.exponent_sums[r][e];
    s.exponent_sums[0][e] = sum;
    own = exact_add(own, exact_of_exponent_sum(sum, uint32_t(e)));
  }
  return block_exact_sum(s, own);
}

// What the pass that computes a row's masses also finds: their exact total (its exponent bins
// left in exponent_sums[0] for top-p) and the largest mass's bits (for min-p).
struct MassTotals {
  ExactSum total;
  uint32_t most;
};

// Ends a pass in which every thread called add_to_exponent_bin for its masses and kept the
// largest of their bits in `most`.
__device__ MassTotals finish_mass_totals(SharedState& s, uint32_t most) {
  MassTotals t;
  t.most = uint32_t(block_max_word(s, most));
  t.total = merge_exponent_bins(s);
  return t;
}

// ---- visiting a view's masses -------------------------------------------------------------------

// Calls visit(j, mass) for j = first, first + step, ... below end, in that order. A batch's
// loads are all issued before its visits: the visits do shared-memory atomics or stores that may
// alias the masses, which the compiler does not move loads across, and one block a row has too
// few warps to hide a memory latency per element.
constexpr int kMassBatch = 8;

template <class View, class Visit>
__device__ __forceinline__ void for_each_mass_from(const View& view, int64_t first, int64_t end,
                                                   int64_t step, Visit&& visit) {
  for (; first < end; first += step * kMassBatch) {
    float batch[kMassBatch];
#pragma unroll
    for (int u = 0; u < kMassBatch; ++u) {
      const int64_t j = first + int64_t(u) * step;
      batch[u] = j < end ? view.mass(j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kMassBatch; ++u) {
      const int64_t j = first + int64_t(u) * step;
      if (j < end) visit(j, batch[u]);
    }
  }
}

// Calls visit(j, mass) for every j below view.count(), each thread for j = threadIdx.x + m *
// kThreads, in that order.
template <class View, class Visit>
__device__ __forceinline__ void for_each_mass(const View& view, Visit&& visit) {
  for_each_mass_from(view, threadIdx.x, view.count(), kThreads, visit);
}

// The order in which the lanes of a read go through [begin, end): from begin up, or from end
// down. A pass that reads back what the pass before it read last, backward, finds that part
// still in the L2 (a row of 256 that each read 600 KB leaves the last third of each in 50 MB).
enum class ReadOrder { kForward, kBackward };

// Calls visit(j, mass) for every j in [begin, end), each of `lanes` threads (this one `lane`)
// for its share, the lanes together going through the range in `kOrder`. Where the view's
// masses derive from floats stored contiguously (view.stored(), mass j = view.mass_of(j,
// stored[j])), from a 16-byte boundary, a thread takes four consecutive masses in one load and
// four loads are in flight: twice the bytes in flight of for_each_mass_from, which a block alone
// on a row needs to hide the latency of memory. For readers only: a visit that stores to the row
// element by element would turn each lane's four stores into four scattered store instructions.
template <ReadOrder kOrder = ReadOrder::kForward, class View, class Visit>
__device__ __forceinline__ void for_each_mass_read(const View& view, int64_t begin, int64_t end,
                                                   int lane, int lanes, Visit&& visit) {
  const float* stored = view.stored();
  if (stored == nullptr || (reinterpret_cast<uintptr_t>(stored + begin) & 15u) != 0u) {
    for_each_mass_from(view, begin + lane, end, lanes, visit);
    return;
  }
  constexpr int kInFlight = 4;
  const uint4* words = reinterpret_cast<const uint4*>(stored + begin);
  const int64_t vectors = (end - begin) / 4;
  const auto visit_vector = [&](int64_t q, uint4 word) {
    float parts[4];
    memcpy(parts, &word, 16);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t j = begin + q * 4 + e;
      visit(j, view.mass_of(j, parts[e]));
    }
  };
  const auto visit_batch = [&](int64_t q) {
    uint4 loaded[kInFlight];  // unrolled, as in for_each_element (sampling_rows.cuh)
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) loaded[b] = words[q + b * lanes];
#pragma unroll
    for (int b = 0; b < kInFlight; ++b) visit_vector(q + b * lanes, loaded[b]);
  };
  const int64_t batch = int64_t(kInFlight) * lanes;
  if constexpr (kOrder == ReadOrder::kForward) {
    int64_t q = lane;
    for (; q + (kInFlight - 1) * lanes < vectors; q += batch) visit_batch(q);
    for (; q < vectors; q += lanes) visit_vector(q, words[q]);
    for_each_mass_from(view, begin + vectors * 4 + lane, end, lanes, visit);
  } else {
    // The same batches, from the last: first the masses past the whole batches.
    const int64_t batched = vectors / batch * batch;
    for_each_mass_from(view, begin + vectors * 4 + lane, end, lanes, visit);
    for (int64_t q = batched + lane; q < vectors; q += lanes) visit_vector(q, words[q]);
    for (int64_t q = batched - batch + lane; q >= 0; q -= batch) visit_batch(q);
  }
}

// A visit that adds each mass to `sum`.
__device__ __forceinline__ auto mass_adder(ExactSum& sum) {
  return [&sum](int64_t, float m) {
    if (bits_from_float(m) != 0u) sum = exact_add_mass(sum, m);
  };
}

// The exact sum of this thread's share (as for_each_mass_read) of the view's masses in
// [begin, end): in one word where the view's masses lie in a window that fits (mass_window), which
// makes the pass a read rather than four-word carries per mass.
template <ReadOrder kOrder = ReadOrder::kForward, class View>
__device__ ExactSum sum_of_masses(const View& view, int64_t begin, int64_t end, int lane,
                                  int lanes) {
  const MassWindow window = view.window();
  if (window.fits) {
    uint64_t own = 0u;
    for_each_mass_read<kOrder>(view, begin, end, lane, lanes, [&](int64_t, float m) {
      const uint32_t bits = bits_from_float(m);
      if (bits != 0u) own = window_add_mass(own, bits, window.base);
    });
    return exact_of_window_sum(own, window.base);
  }
  ExactSum own = exact_zero();
  for_each_mass_read<kOrder>(view, begin, end, lane, lanes, mass_adder(own));
  return own;
}

// The exact sum of the view's masses, in every thread.
template <class View>
__device__ ExactSum view_total(SharedState& s, const View& view) {
  return block_exact_sum(s, sum_of_masses(view, 0, view.count(), threadIdx.x, kThreads));
}

// ---- top-p over a set of masses ---------------------------------------------------------------

// What top-p keeps: masses above `bits`, and of those equal to it the ones at indices up to
// last_index; and the exact sum of what it keeps.
struct MassCut {
  uint32_t bits;
  uint32_t last_index;
  ExactSum kept;
  __device__ bool keeps(uint32_t mass_bits, uint32_t index) const {
    return mass_bits > bits || (mass_bits == bits && index <= last_index);
  }
};

// The exponent of top-p's cut and the exact sum of the masses of higher exponents.
struct ExponentChoice {
  uint32_t exponent;
  ExactSum above;
};

// The cut of the shortest prefix of the view's masses in the contract's order (descending mass,
// ties to the lower index) whose exact sum reaches `target` (at least one token). The exponent
// bins of the masses' total (exponent_sums[0], finish_mass_totals) give exact prefix sums by
// exponent: the scan finds the exponent of the cut. Within one exponent masses are significands
// of one unit, so the passes that refine the cut over the significand's bits (8, 8 and 7 of
// them) compare 64-bit sums. Ties at the cut are broken by index. Nothing is dropped: the cut
// is applied by whoever reads the masses next (CutMasses). The second pass also gathers the
// masses it refines (those of the first pass's bin, where they fit) into the lead's candidates,
// unless the view is the candidates: the third pass and the ties then read those alone.
template <class View, class Group = OneBlock>
__device__ MassCut top_p_cut(SharedState& s, const View& view, ExactSum target, int64_t n,
                             const Group& g = {}) {
  ExactSum one = exact_zero();
  one.limb[0] = 1u;
  if (exact_is_zero(target)) target = one;  // "reaches 0" keeps the first token alone
  constexpr bool kMayGather = !View::kHoldsCandidates;
  SharedState* const lead = g.lead_state(s);
  if (kMayGather && g.lead() && threadIdx.x == 0) s.candidate_count = 0u;  // before the barriers
  const ExponentChoice found = g.decide(
      s,
      [&] {
        scan_bins<kExponentBins>(
            s, true, exact_zero(),
            [&](int e) { return exact_of_exponent_sum(s.exponent_sums[0][e], uint32_t(e)); },
            [&](ExactSum total) { return exact_compare(total, target) >= 0; });
      },
      [](const SharedState& lead) {
        return ExponentChoice{lead.selected_bin, lead.selected_exact_before};
      });
  const uint32_t exponent = found.exponent;
  const int position = mass_position(exponent);
  const ExactSum above = found.above;  // the masses of higher exponents
  unsigned long long needed = exact_ceil_shifted(exact_subtract(target, above), position);
  unsigned long long units_before = 0u;
  uint32_t prefix = exponent << 23;
  uint32_t equal = 0u;
  bool from_candidates = false;  // the lead's candidates hold every mass left to refine
  // f(mass, token) for every mass with a prefix left to refine: from the view, or from the
  // candidates (in the lead; the other blocks of a cluster have none).
  const auto for_each_refined = [&](auto&& f) {
    if (!from_candidates) {
      for_each_mass_read(view, 0, view.count(), threadIdx.x, kThreads,
                         [&](int64_t j, float mass) { f(mass, j); });
    } else if (g.lead()) {
      for (uint32_t j = threadIdx.x; j < s.candidate_count; j += kThreads) {
        f(s.candidate_mass[j], int64_t(-1) - int64_t(j));
      }
    }
  };
  // The token of for_each_refined's position: j >= 0 in the view, -1 - j in the candidates.
  const auto token_of = [&](int64_t at) {
    return at >= 0 ? view.index(at) : s.candidate_index[-1 - at];
  };
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 15 : (pass == 1 ? 7 : 0);
    const int width = pass == 2 ? 7 : kDigitBits;
    const int decided = shift + width;  // the bits above are the prefix's
    const bool gathers = kMayGather && pass == 1 && equal <= uint32_t(kCandidateCapacity);
    clear_bins(s);
    g.bins_cleared();
    for_each_refined([&](float mass, int64_t at) {
      const uint32_t bits = bits_from_float(mass);
      if (bits == 0u || (bits >> decided) != (prefix >> decided)) return;
      const uint32_t bin = (bits >> shift) & ((1u << width) - 1u);
      atomicAdd(&s.counts[bin], 1u);
      add_to_shared_sum(&s.sums[bin], uint32_t(mass_significand(bits)));
      if (gathers) {
        const uint32_t slot = atomicAdd(&lead->candidate_count, 1u);
        lead->candidate_index[slot] = token_of(at);
        lead->candidate_mass[slot] = mass;
      }
    });
    g.sum_bins(s, true);  // and every gathered mass is in the lead's candidates
    from_candidates = from_candidates || gathers;
    const BinChoice choice = g.decide(
        s,
        [&] {
          scan_bins(s, true, 0ull, [&](int bin) { return s.sums[bin]; },
                    [&](unsigned long long total) { return total >= needed; });
        },
        bin_choice);
    needed -= choice.units_before;
    units_before += choice.units_before;
    equal = choice.equal;
    prefix |= choice.bin << shift;
  }
  // prefix is now the mass at the cut; `needed` units more must come from its ties.
  const uint64_t units = mass_significand(prefix);
  const uint32_t ties_kept = uint32_t((needed + units - 1) / units);
  uint32_t last_index = 0xffffffffu;
  if (ties_kept < equal) {
    const auto for_each_tie = [&](auto&& f) {
      for_each_refined([&](float m, int64_t at) {
        if (bits_from_float(m) == prefix) f(token_of(at));
      });
    };
    last_index = select_by_count(s, for_each_tie, index_bits(n), ties_kept, false, g).value;
  }
  MassCut cut;
  cut.bits = prefix;
  cut.last_index = last_index;
  cut.kept = exact_add_shifted(above, units_before + uint64_t(ties_kept) * units, position);
  return cut;
}

// min-p: drops the masses below min_p times the largest (`most`, the bits of the view's largest
// mass), compared exactly (as float bits against the least mass that reaches the bound), and
// returns the exact sum kept. A view that reads the input (kDropsInPlace false) cannot write
// it: its least kept mass rises instead, so that the masses below read as 0.
template <class View>
__device__ ExactSum keep_min_p(SharedState& s, View& view, uint32_t most, float fraction) {
  const ExactSum largest = exact_of_mass(float_from_bits(most));
  const uint32_t least = least_mass_bits_reaching(exact_ceil_scaled(largest, fraction));
  clear_exponent_bins(s);
  if constexpr (View::kDropsInPlace) {
    for_each_mass(view, [&](int64_t j, float mass) {
      const uint32_t bits = bits_from_float(mass);
      if (bits < least) {
        if (bits != 0u) view.drop(j);
      } else {
        add_to_exponent_bin(s, bits);
      }
    });
  } else {
    view.raise_least(least);
    for_each_mass_read(view, 0, view.count(), threadIdx.x, kThreads,
                       [&](int64_t, float mass) { add_to_exponent_bin(s, bits_from_float(mass)); });
  }
  return merge_exponent_bins(s);
}

// v of lane `source`, in every lane of the warp.
__device__ __forceinline__ unsigned long long shuffle_word_from(unsigned long long v, int source) {
  const uint32_t low = __shfl_sync(kFullWarp, uint32_t(v), source);
  const uint32_t high = __shfl_sync(kFullWarp, uint32_t(v >> 32), source);
  return (uint64_t(high) << 32) | low;
}

__device__ __forceinline__ ExactSum shuffle_exact_from(ExactSum v, int source) {
  for (int i = 0; i < 4; ++i) v.limb[i] = shuffle_word_from(v.limb[i], source);
  return v;
}

// The ranges of the view that first_exceeding's warps sum: contiguous, 16-byte aligned, in
// the view's order (warp w's before warp w + 1's). end(w, begin(w)) ends warp w's.
struct WarpRanges {
  int64_t count, per_warp;
  __device__ explicit WarpRanges(int64_t n)
      : count(n), per_warp(((n + kWarps - 1) / kWarps + 3) / 4 * 4) {}
  __device__ int64_t begin(int w) const { return w * per_warp < count ? w * per_warp : count; }
  __device__ int64_t end(int, int64_t begin) const {
    return begin + per_warp < count ? begin + per_warp : count;
  }
};

// The bits of the view's largest mass (0 where none has mass), in every thread: each warp reads
// its range of sum_warp_ranges forward, so that the ranges' ends, read last, are still in the L2
// when sum_warp_ranges<ReadOrder::kBackward> reads them first.
template <class View>
__device__ uint32_t largest_mass_by_warp_ranges(SharedState& s, const View& view) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const WarpRanges ranges(view.count());
  const int64_t warp_begin = ranges.begin(warp);
  uint32_t most = 0u;
  const auto keep_largest = [&](int64_t, float m) {
    const uint32_t bits = bits_from_float(m);
    most = bits > most ? bits : most;
  };
  for_each_mass_read(view, warp_begin, ranges.end(warp, warp_begin), lane, 32, keep_largest);
  return uint32_t(block_max_word(s, most));
}

// first_exceeding's first level: each warp's range sum into s.warp_sums, which must stay as they
// are until first_exceeding_in_ranges; returns the view's exact sum, in every thread. `ranges`
// (WarpRanges, or any with its begin(w) and end(w, begin(w))) hold every mass of the view.
template <ReadOrder kOrder = ReadOrder::kForward, class View, class Ranges>
__device__ ExactSum sum_warp_ranges(SharedState& s, const View& view, Ranges ranges) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int64_t warp_begin = ranges.begin(warp);
  ExactSum own =
      sum_of_masses<kOrder>(view, warp_begin, ranges.end(warp, warp_begin), lane, 32);
  own = warp_exact_sum(own);
  if (lane == 0) s.warp_sums[warp] = own;
  __syncthreads();
  ExactSum total = exact_zero();
  for (int w = 0; w < kWarps; ++w) total = exact_add(total, s.warp_sums[w]);
  return total;
}

template <ReadOrder kOrder = ReadOrder::kForward, class View>
__device__ __forceinline__ ExactSum sum_warp_ranges(SharedState& s, const View& view) {
  return sum_warp_ranges<kOrder>(s, view, WarpRanges(view.count()));
}

// first_exceeding after sum_warp_ranges over the same ranges, against `threshold` (less than the
// view's sum).
template <class View, class Ranges>
__device__ uint32_t first_exceeding_in_ranges(SharedState& s, const View& view, Ranges ranges,
                                              ExactSum threshold) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  if (threadIdx.x == 0) s.token = 0u;
  ExactSum before = exact_zero();
  int crossing = 0;
  for (; crossing < kWarps - 1; ++crossing) {
    const ExactSum after = exact_add(before, s.warp_sums[crossing]);
    if (exact_compare(after, threshold) > 0) break;
    before = after;
  }
  __syncthreads();
  const int64_t first = ranges.begin(crossing), last = ranges.end(crossing, first);
  const int64_t piece = (last - first + kThreads - 1) / kThreads;
  const int64_t begin = first + threadIdx.x * piece < last ? first + threadIdx.x * piece : last;
  const int64_t end = begin + piece < last ? begin + piece : last;
  ExactSum mine = exact_zero();
  for_each_mass_from(view, begin, end, 1, mass_adder(mine));
  const ExactSum cumulative = exact_add(before, block_exclusive_exact(s, mine));
  if (exact_compare(cumulative, threshold) <= 0 &&
      exact_compare(exact_add(cumulative, mine), threshold) > 0) {
    s.crossing_begin = begin;
    s.crossing_end = end;
    s.selected_exact_before = cumulative;
  }
  __syncthreads();
  if (warp == 0) {
    ExactSum running = s.selected_exact_before;
    const int64_t walk_end = s.crossing_end;
    for (int64_t j0 = s.crossing_begin; j0 < walk_end; j0 += 32) {
      const int64_t j = j0 + lane;
      const float m = j < walk_end ? view.mass(j) : 0.0f;
      const ExactSum inclusive =
          exact_add(running, warp_inclusive_exact(bits_from_float(m) != 0u ? exact_of_mass(m)
                                                                           : exact_zero()));
      const unsigned exceeding = __ballot_sync(kFullWarp, exact_compare(inclusive, threshold) > 0);
      if (exceeding != 0u) {
        if (lane == __ffs(exceeding) - 1) s.token = view.index(j);
        break;
      }
      running = shuffle_exact_from(inclusive, 31);
    }
  }
  __syncthreads();
  const uint32_t token = s.token;
  __syncthreads();
  return token;
}

// The index of the first mass, in the view's order (which must be index order), whose exact
// cumulative sum exceeds threshold_of(total), `total` the view's exact sum (threshold_of must
// return less than a nonzero total); 0 where the view has no mass. Three levels of ranges, each
// a prefix scan of exact sums: each warp sums a contiguous range of the view (its lanes read it
// coalesced) and a scan of those sums picks the range where the cumulative sum crosses; every
// thread sums a contiguous piece of that range and a block scan picks the piece that crosses;
// warp 0 reads that piece 32 masses at a time, a warp scan finding the token. The row is read
// once in full, the crossing range twice, and no thread walks masses one dependent load after
// another.
template <ReadOrder kOrder = ReadOrder::kForward, class View, class Ranges, class ThresholdOf>
__device__ uint32_t first_exceeding(SharedState& s, const View& view, Ranges ranges,
                                    ThresholdOf threshold_of) {
  const ExactSum total = sum_warp_ranges<kOrder>(s, view, ranges);
  if (exact_is_zero(total)) {
    __syncthreads();
    return 0u;
  }
  return first_exceeding_in_ranges(s, view, ranges, threshold_of(total));
}

template <ReadOrder kOrder = ReadOrder::kForward, class View, class ThresholdOf>
__device__ __forceinline__ uint32_t first_exceeding(SharedState& s, const View& view,
                                                    ThresholdOf threshold_of) {
  return first_exceeding<kOrder>(s, view, WarpRanges(view.count()), threshold_of);
}

// ---- views of a row's masses ---------------------------------------------------------------
// Masses are +0 or positive (subnormals included), so "has mass" is a test of the bits, which no
// flush-to-zero mode can change.

// The tokens of the row (or of a slice of it), their masses in the workspace: position j is token
// first + j.
struct RowMasses {
  static constexpr bool kDropsInPlace = true;
  static constexpr bool kHoldsCandidates = false;
  float* masses;
  int64_t n;
  int64_t first;
  __device__ int64_t count() const { return n; }
  __device__ float mass(int64_t j) const { return masses[j]; }
  __device__ const float* stored() const { return masses; }
  __device__ float mass_of(int64_t, float stored) const { return stored; }
  __device__ uint32_t index(int64_t j) const { return uint32_t(first + j); }
  __device__ void drop(int64_t j) const { masses[j] = 0.0f; }
  __device__ MassWindow window() const { return no_mass_window(); }  // softmax masses span widely
};

// A view with a top-p cut applied: the masses it does not keep read as 0. Every top-p token keeps
// the view's largest mass (the first in the order), so min-p after it sees the same largest.
template <class View>
struct CutMasses {
  static constexpr bool kDropsInPlace = View::kDropsInPlace;
  static constexpr bool kHoldsCandidates = View::kHoldsCandidates;
  View* base;
  MassCut cut;
  __device__ int64_t count() const { return base->count(); }
  __device__ float mass(int64_t j) const { return kept(j, base->mass(j)); }
  __device__ const float* stored() const { return base->stored(); }
  __device__ float mass_of(int64_t j, float stored) const {
    return kept(j, base->mass_of(j, stored));
  }
  __device__ float kept(int64_t j, float m) const {
    return cut.keeps(bits_from_float(m), base->index(j)) ? m : 0.0f;
  }
  __device__ uint32_t index(int64_t j) const { return base->index(j); }
  __device__ void drop(int64_t j) const { base->drop(j); }
  __device__ void raise_least(uint32_t bits) const { base->raise_least(bits); }
  __device__ MassWindow window() const { return base->window(); }  // a subset of the base's
};

// The tokens a top-k filter kept, in shared memory (in index order once sorted).
struct Candidates {
  static constexpr bool kDropsInPlace = true;
  static constexpr bool kHoldsCandidates = true;
  SharedState* s;
  __device__ int64_t count() const { return s->candidate_count; }
  __device__ float mass(int64_t j) const { return s->candidate_mass[j]; }
  __device__ const float* stored() const { return nullptr; }  // few, in shared memory
  __device__ float mass_of(int64_t, float stored) const { return stored; }
  __device__ uint32_t index(int64_t j) const { return s->candidate_index[j]; }
  __device__ void drop(int64_t j) const { s->candidate_mass[j] = 0.0f; }
  __device__ MassWindow window() const { return no_mass_window(); }
};

// Sorts the candidates by index (a bitonic sort of index-and-mass words), so that a draw can
// scan them in vocabulary order.
__device__ __forceinline__ void sort_candidates_by_index(SharedState& s) {
  const int count = int(s.candidate_count);
  int size = 1;
  while (size < count) size <<= 1;
  for (int j = threadIdx.x; j < size; j += kThreads) {
    s.sort_words[j] = j < count ? (uint64_t(s.candidate_index[j]) << 32) |
                                      bits_from_float(s.candidate_mass[j])
                                : ~0ull;
  }
  __syncthreads();
  for (int span = 2; span <= size; span <<= 1) {
    for (int stride = span >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int partner = i ^ stride;
        if (partner <= i) continue;
        const unsigned long long a = s.sort_words[i], b = s.sort_words[partner];
        const bool ascending = (i & span) == 0;
        if ((a > b) == ascending) {
          s.sort_words[i] = b;
          s.sort_words[partner] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int j = threadIdx.x; j < count; j += kThreads) {
    s.candidate_index[j] = uint32_t(s.sort_words[j] >> 32);
    s.candidate_mass[j] = float_from_bits(uint32_t(s.sort_words[j]));
  }
  __syncthreads();
}

}  // namespace sampling
}  // namespace cuda
}  // namespace mtk
