// The sampling filters and samplers (docs/CONTRACT.md, "Sampling filters") as one kernel,
// templated over the input's element type (instantiated in lib/metal/sampling.metal).
//
// One threadgroup per row, so a row's result never depends on the batch around it, and every
// decision is lib/core/sampling_math.hpp's integer arithmetic, the CPU backend's copy: sums are
// exact (a 256-bit fixed-point ExactSum), so the reduction tree and the threadgroup size cannot
// change them. Per row:
//   top-k:  the k-th largest (key, index) word by an MSB-first radix select over its 8 bytes,
//           stopping as soon as every word matching the chosen prefix is kept;
//   masses: the probabilities' masses, or the softmax of the kept logits (two passes: the
//           largest scaled logit, then exp_of_negative_gap of each gap), in device memory (the
//           output for mtk_renorm_probs, the workspace for the samplers);
//   top-p:  the last word of the shortest prefix reaching the target, by binary search over
//           the 64-bit word space with an exact masked sum per step;
//   min-p:  the largest mass by a reduction, then an exact comparison per element;
//   output: the renormalised masses, or the first token whose cumulative mass exceeds
//           u * total (a sum per thread over contiguous segments, a serial scan of the
//           threads' sums, then one thread walks its segment).
// Every pass but the last walks the row with the same stride (i = thread, thread + threads,
// ...), so each thread reads back only the masses it wrote; the segment walk is preceded by a
// device-memory barrier.
#pragma once

#include "mtk_dialect.h"
#include "../core/float_formats.hpp"
#include "../core/sampling_math.hpp"
#include "sampling_params.h"

// ---- Element types of the input: float32 bits as read, and -inf in the element's format --------

struct SampleF32 {
  typedef uint Storage;
  enum : uint { negative_infinity = 0xff800000u };
  static uint widen(Storage s) { return s; }
};
struct SampleF16 {
  typedef ushort Storage;
  enum : uint { negative_infinity = 0xfc00u };
  static uint widen(Storage s) { return mtk::f16_to_f32_bits(s); }
};
struct SampleBF16 {
  typedef ushort Storage;
  enum : uint { negative_infinity = 0xff80u };
  static uint widen(Storage s) { return mtk::bf16_to_f32_bits(s); }
};

// (key, index) as one word, larger for the better token: the larger key, then the lower index
// (the CPU backend's `ranked`). Rows are shorter than 2^31.
inline ulong ranked_word(uint key, uint index) { return (ulong(key) << 32) | ulong(0xffffffffu - index); }
inline uint index_of_word(ulong word) { return 0xffffffffu - uint(word); }

// The words of a row of logits, by the top-k contract's keys (widening f16 and bf16 is exact,
// so their float32 keys order them as their own keys do).
template <typename DT>
struct LogitWords {
  device const typename DT::Storage* input;
  long base, stride;

  uint bits(uint i) const { return DT::widen(input[base + long(i) * stride]); }
  ulong word(uint i) const { return ranked_word(mtk::key_from_f32_bits(bits(i)), i); }
};

// A row of masses in device memory; a mass's bits are its key (masses are >= 0, never NaN).
struct RowMasses {
  device float* data;
  long base, stride;

  float get(uint i) const { return data[base + long(i) * stride]; }
  void set(uint i, float mass) const { data[base + long(i) * stride] = mass; }
  ulong word(uint i) const { return ranked_word(mtk::bits_from_float(get(i)), i); }
};

// ---- Threadgroup reductions (every thread calls them; the result reaches every thread) ----------

// tg_sums holds 4 words per thread.
inline mtk::ExactSum threadgroup_exact_sum(mtk::ExactSum part, uint tid, uint threads, threadgroup ulong* tg_sums) {
  for (uint j = 0; j < 4; ++j) tg_sums[tid * 4 + j] = part.limb[j];
  tg_barrier();
  for (uint width = threads / 2; width > 0; width /= 2) {
    if (tid < width) {
      mtk::ExactSum other;
      for (uint j = 0; j < 4; ++j) other.limb[j] = tg_sums[(tid + width) * 4 + j];
      part = mtk::exact_add(part, other);
      for (uint j = 0; j < 4; ++j) tg_sums[tid * 4 + j] = part.limb[j];
    }
    tg_barrier();
  }
  mtk::ExactSum total;
  for (uint j = 0; j < 4; ++j) total.limb[j] = tg_sums[j];
  tg_barrier();
  return total;
}

inline ulong threadgroup_max(ulong value, uint tid, uint threads, threadgroup ulong* tg_sums) {
  tg_sums[tid] = value;
  tg_barrier();
  for (uint width = threads / 2; width > 0; width /= 2) {
    if (tid < width) tg_sums[tid] = max(tg_sums[tid], tg_sums[tid + width]);
    tg_barrier();
  }
  const ulong most = tg_sums[0];
  tg_barrier();
  return most;
}

// ---- The filters ---------------------------------------------------------------------------

// The word of the k-th best of the row's n words (0 < k < n): the words at least as large are
// exactly the top k. A radix select, most significant byte first; tg_state[0] holds the prefix
// chosen so far, [1] how many words matching it are still to be kept, [2] whether all are.
template <typename Words>
inline ulong top_k_cutoff(Words words, uint n, uint k, uint tid, uint threads, threadgroup uint* tg_hist,
                          threadgroup ulong* tg_state) {
  if (tid == 0) {
    tg_state[0] = 0;
    tg_state[1] = k;
    tg_state[2] = 0;
  }
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (uint b = tid; b < MTK_RADIX_BINS; b += threads) tg_hist[b] = 0;
    tg_barrier();
    const ulong prefix = tg_state[0];
    const uint above = uint(shift) + MTK_RADIX_BITS;  // the bits already chosen
    for (uint i = tid; i < n; i += threads) {
      const ulong w = words.word(i);
      if (above == 64 || (w >> above) == (prefix >> above)) {
        tg_atomic_add(&tg_hist[uint(w >> uint(shift)) & (MTK_RADIX_BINS - 1)], 1u);
      }
    }
    tg_barrier();
    if (tid == 0) {
      // The words matching the prefix number at least `remaining`, so the walk stops.
      ulong remaining = tg_state[1];
      uint digit = MTK_RADIX_BINS - 1;
      while (ulong(tg_hist[digit]) < remaining) {
        remaining -= tg_hist[digit];
        --digit;
      }
      tg_state[0] = prefix | (ulong(digit) << uint(shift));
      tg_state[1] = remaining;
      tg_state[2] = ulong(tg_hist[digit]) == remaining ? 1 : 0;
    }
    tg_barrier();
    if (tg_state[2] != 0) break;
  }
  const ulong cutoff = tg_state[0];
  tg_barrier();
  return cutoff;
}

// The exact sum of the masses of words at least `least` (all masses for least = 0).
inline mtk::ExactSum mass_at_or_above(RowMasses masses, uint n, ulong least, uint tid, uint threads,
                                      threadgroup ulong* tg_sums) {
  mtk::ExactSum part = mtk::exact_zero();
  for (uint i = tid; i < n; i += threads) {
    const float m = masses.get(i);
    if (ranked_word(mtk::bits_from_float(m), i) >= least) part = mtk::exact_add_mass(part, m);
  }
  return threadgroup_exact_sum(part, tid, threads, tg_sums);
}

// Drops the masses whose words are below `cutoff`.
inline void keep_at_or_above(RowMasses masses, uint n, ulong cutoff, uint tid, uint threads) {
  for (uint i = tid; i < n; i += threads) {
    if (masses.word(i) < cutoff) masses.set(i, 0.0f);
  }
}

// top-p on the masses, then min-p on what it kept (the CPU backend's filter_masses). A filter
// that is off still runs its reductions (with nothing to search or drop), so every barrier is
// reached by the whole threadgroup in every row.
inline void filter_masses(RowMasses masses, uint n, float top_p, float min_p, uint tid, uint threads,
                          threadgroup ulong* tg_sums) {
  const mtk::ExactSum total = mass_at_or_above(masses, n, 0, tid, threads, tg_sums);
  const bool top_p_filters = mtk::top_p_filters(top_p) && !mtk::exact_is_zero(total);
  mtk::ExactSum target = mtk::exact_ceil_scaled(total, top_p_filters ? mtk::top_p_fraction(top_p) : 1.0f);
  // A target of 0 still keeps one token: the first word with any mass.
  if (mtk::exact_is_zero(target)) target.limb[0] = 1;
  // The largest word W whose words at or above it reach the target is the prefix's last; without
  // the filter the search is empty and W = 0 keeps every word.
  ulong low = 0, high = top_p_filters ? ~ulong(0) : 0;
  while (low < high) {
    const ulong middle = low + ((high - low) >> 1) + 1;
    const mtk::ExactSum reached = mass_at_or_above(masses, n, middle, tid, threads, tg_sums);
    if (mtk::exact_compare(reached, target) >= 0) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  keep_at_or_above(masses, n, low, tid, threads);

  ulong most = 0;
  for (uint i = tid; i < n; i += threads) most = max(most, ulong(mtk::bits_from_float(masses.get(i))));
  most = threadgroup_max(most, tid, threads, tg_sums);
  if (mtk::min_p_filters(min_p)) {
    const mtk::ExactSum least =
        mtk::exact_ceil_scaled(mtk::exact_of_mass(mtk::float_from_bits(uint(most))), mtk::min_p_fraction(min_p));
    for (uint i = tid; i < n; i += threads) {
      const float m = masses.get(i);
      if (mtk::bits_from_float(m) != 0u && mtk::exact_compare(mtk::exact_of_mass(m), least) < 0) masses.set(i, 0.0f);
    }
  }
}

// ---- Per-row parameters ----------------------------------------------------------------------

inline long row_top_k(constant MtkSamplingParams& p, device const uchar* top_k, uint row) {
  if (p.top_k.present == 0u) return p.top_k_value;
  const long at = p.top_k.base + long(row) * p.top_k.stride;
  return p.top_k.is_64 != 0u ? ((device const long*)top_k)[at] : long(((device const int*)top_k)[at]);
}

inline float row_float(constant MtkRowFloat& v, device const float* data, uint row) {
  return v.present != 0u ? data[v.base + long(row) * v.stride] : mtk::float_from_bits(v.value_bits);
}

// ---- The kernel ------------------------------------------------------------------------------

// The row's first token in the top-k order of its logits (its top-1).
template <typename DT>
inline uint top1_logit(LogitWords<DT> logits, uint n, uint tid, uint threads, threadgroup ulong* tg_sums) {
  ulong best = 0;
  for (uint i = tid; i < n; i += threads) best = max(best, logits.word(i));
  return index_of_word(threadgroup_max(best, tid, threads, tg_sums));
}

// exp(z - M) of each scaled logit z kept by the top-k filter, M the largest non-NaN one kept
// (the CPU backend's softmax_masses); the masses' storage holds the z's in between. A greedy
// row (temperature <= 0 or NaN) gets no mass at all, so it takes its top-1 as a row without
// mass does.
template <typename DT>
inline void softmax_masses(LogitWords<DT> logits, RowMasses masses, uint n, ulong cutoff, bool greedy, float reciprocal,
                           uint tid, uint threads, threadgroup ulong* tg_sums) {
  // The largest non-NaN z by its key, plus one (0: none). Zeros of either sign give the same
  // gaps, so the key forgetting the sign of a zero maximum changes nothing.
  ulong most_plus_one = 0;
  for (uint i = tid; i < n; i += threads) {
    const float z = logits.word(i) >= cutoff ? mtk::scaled_logit(mtk::float_from_bits(logits.bits(i)), reciprocal)
                                             : mtk::float_from_bits(0x7fc00000u);
    masses.set(i, z);
    if (!mtk::is_nan_f32(z)) most_plus_one = max(most_plus_one, ulong(mtk::key_from_f32(z)) + 1);
  }
  most_plus_one = threadgroup_max(most_plus_one, tid, threads, tg_sums);
  const uint most_bits = most_plus_one != 0 ? mtk::f32_bits_from_key(uint(most_plus_one - 1)) : 0u;
  const bool none = greedy || most_plus_one == 0 || most_bits == 0xff800000u;
  const bool infinite = most_bits == mtk::kF32Exponent;
  const float most = mtk::float_from_bits(most_bits);
  for (uint i = tid; i < n; i += threads) {
    const float z = masses.get(i);
    float mass;
    if (none || mtk::is_nan_f32(z)) {
      mass = 0.0f;
    } else if (infinite) {
      mass = mtk::bits_from_float(z) == mtk::kF32Exponent ? 1.0f : 0.0f;
    } else {
      mass = mtk::exp_of_negative_gap(mtk::gap_below(most, z));
    }
    masses.set(i, mass);
  }
}

// The first token whose cumulative mass exceeds u * total (for a row without mass, after passes
// that find nothing, 0, which the caller replaces). Each thread sums
// a contiguous segment; thread 0 finds the segment where the cumulative sum crosses the
// threshold (tg_state[0]: the thread, [1..4]: the sum before its segment); that thread walks it.
inline uint draw_token(RowMasses masses, uint n, mtk::ExactSum total, float uniform, uint tid, uint threads,
                       threadgroup ulong* tg_sums, threadgroup ulong* tg_state) {
  const mtk::ExactSum threshold = mtk::exact_scaled(total, mtk::clamped_uniform(uniform)).floor;
  // Every thread reads masses other threads wrote from here on.
  threadgroup_barrier(mem_flags::mem_device);
  const uint segment = (n + threads - 1) / threads;
  const uint begin = min(n, tid * segment), end = min(n, begin + segment);
  mtk::ExactSum part = mtk::exact_zero();
  for (uint i = begin; i < end; ++i) part = mtk::exact_add_mass(part, masses.get(i));
  for (uint j = 0; j < 4; ++j) tg_sums[tid * 4 + j] = part.limb[j];
  tg_barrier();
  if (tid == 0) {
    // The threshold is below the total, so some segment crosses it.
    mtk::ExactSum before = mtk::exact_zero();
    uint crossing = 0;
    for (uint t = 0; t < threads; ++t) {
      mtk::ExactSum segment_sum;
      for (uint j = 0; j < 4; ++j) segment_sum.limb[j] = tg_sums[t * 4 + j];
      const mtk::ExactSum through = mtk::exact_add(before, segment_sum);
      if (mtk::exact_compare(through, threshold) > 0) {
        crossing = t;
        break;
      }
      before = through;
    }
    tg_state[0] = crossing;
    for (uint j = 0; j < 4; ++j) tg_state[1 + j] = before.limb[j];
  }
  tg_barrier();
  if (tid == uint(tg_state[0])) {
    mtk::ExactSum cumulative;
    for (uint j = 0; j < 4; ++j) cumulative.limb[j] = tg_state[1 + j];
    uint token = begin;
    for (uint i = begin; i < end; ++i) {
      const float m = masses.get(i);
      if (mtk::bits_from_float(m) == 0u) continue;
      cumulative = mtk::exact_add_mass(cumulative, m);
      if (mtk::exact_compare(cumulative, threshold) > 0) {
        token = i;
        break;
      }
    }
    tg_state[5] = token;
  }
  tg_barrier();
  const uint token = uint(tg_state[5]);
  tg_barrier();
  return token;
}

inline void store_token(device uchar* output, constant MtkSamplingParams& p, uint row, uint token) {
  const long at = p.output_base + long(row) * p.output_row_stride;
  if (p.output_is_64 != 0u) {
    ((device long*)output)[at] = long(token);
  } else {
    ((device int*)output)[at] = int(token);
  }
}

// Buffers: 0 input, 1 output, 2 parameters, 3 workspace (the samplers' masses, [rows, n]
// float32), 4..8 the per-row top_k, top_p, min_p, temperature and uniforms (a slot without a
// tensor holds the input's buffer, never read). Threadgroup buffers: 0 the reductions' words
// (4 per thread), 1 the radix histogram (MTK_RADIX_BINS words), 2 the row's state (8 words).
// One threadgroup of MTK_SAMPLING_THREADS threads per row, rows along y; one instance per
// operation (Op, MTK_METAL_SAMPLING_*) and input type.
//
// Barriers are never inside a branch that depends on a row's data or parameters: a filter
// that is off runs with nothing to do (a top-k of n keeps every word after one pass, an empty
// top-p search), and the samplers always compute the draw and, from logits, the top-1. Every
// thread of a threadgroup then reaches the same barriers, as Metal requires, and PoCL's
// compiler, which duplicates the code after each data-dependent barrier, stays fast.
#define MTK_SAMPLING_KERNEL_PARAMS(DT)                                                     \
  device const typename DT::Storage* input [[buffer(0)]], device uchar* output [[buffer(1)]], \
      constant MtkSamplingParams& p [[buffer(2)]], device float* workspace [[buffer(3)]],    \
      device const uchar* top_k [[buffer(4)]], device const float* top_p [[buffer(5)]],       \
      device const float* min_p [[buffer(6)]], device const float* temperature [[buffer(7)]], \
      device const float* uniforms [[buffer(8)]], threadgroup ulong* tg_sums [[threadgroup(0)]], \
      threadgroup uint* tg_hist [[threadgroup(1)]], threadgroup ulong* tg_state [[threadgroup(2)]], \
      uint2 group [[threadgroup_position_in_grid]], uint2 local_id [[thread_position_in_threadgroup]], \
      uint2 tg_size [[threads_per_threadgroup]]

template <typename DT, uint Op>
[[kernel]] void mtk_sampling_rows(MTK_SAMPLING_KERNEL_PARAMS(DT)) {
  const uint row = group.y, tid = local_id.x, threads = tg_size.x;
  const uint n = uint(p.n);
  const long k = row_top_k(p, top_k, row);
  // Without a top-k filter the radix select keeps all n words.
  const uint kept = mtk::top_k_filters(k, long(n)) ? uint(k) : n;
  LogitWords<DT> logits;
  logits.input = input;
  logits.base = p.input_base + long(row) * p.input_row_stride;
  logits.stride = p.input_stride;

  if (Op == MTK_METAL_SAMPLING_MASK_LOGITS) {
    const ulong cutoff = top_k_cutoff(logits, n, kept, tid, threads, tg_hist, tg_state);
    device typename DT::Storage* out = (device typename DT::Storage*)output;
    const long out_base = p.output_base + long(row) * p.output_row_stride;
    for (uint i = tid; i < n; i += threads) {
      out[out_base + long(i) * p.output_stride] =
          logits.word(i) >= cutoff ? input[logits.base + long(i) * logits.stride]
                                   : typename DT::Storage(DT::negative_infinity);
    }
    return;
  }

  // mtk_renorm_probs keeps the masses in its output, which the last pass overwrites in place.
  RowMasses masses;
  if (Op == MTK_METAL_SAMPLING_RENORM_PROBS) {
    masses.data = (device float*)output;
    masses.base = p.output_base + long(row) * p.output_row_stride;
    masses.stride = p.output_stride;
  } else {
    masses.data = workspace;
    masses.base = long(row) * p.n;
    masses.stride = 1;
  }

  // A row without mass takes its first token in the contract's order: the top-1 of its logits,
  // or (probabilities) index 0.
  uint first_token = 0;
  if (Op == MTK_METAL_SAMPLING_SAMPLE_FROM_LOGITS) {
    first_token = top1_logit(logits, n, tid, threads, tg_sums);
    const float t = row_float(p.temperature, temperature, row);
    const bool greedy = !mtk::temperature_samples(t);
    const ulong cutoff = top_k_cutoff(logits, n, kept, tid, threads, tg_hist, tg_state);
    softmax_masses(logits, masses, n, cutoff, greedy, greedy ? 0.0f : mtk::reciprocal_temperature(t), tid, threads,
                   tg_sums);
  } else {
    for (uint i = tid; i < n; i += threads) masses.set(i, mtk::probability_mass(mtk::float_from_bits(logits.bits(i))));
    keep_at_or_above(masses, n, top_k_cutoff(masses, n, kept, tid, threads, tg_hist, tg_state), tid, threads);
  }
  filter_masses(masses, n, row_float(p.top_p, top_p, row), row_float(p.min_p, min_p, row), tid, threads, tg_sums);

  const mtk::ExactSum total = mass_at_or_above(masses, n, 0, tid, threads, tg_sums);
  if (Op == MTK_METAL_SAMPLING_RENORM_PROBS) {
    const float sum = mtk::exact_to_f32(total);
    for (uint i = tid; i < n; i += threads) {
      const float m = masses.get(i);
      masses.set(i, mtk::bits_from_float(m) != 0u ? mtk::divide_f32(m, sum) : 0.0f);
    }
    return;
  }
  const uint drawn = draw_token(masses, n, total, row_float(p.uniforms, uniforms, row), tid, threads, tg_sums, tg_state);
  if (tid == 0) store_token(output, p, row, mtk::exact_is_zero(total) ? first_token : drawn);
}
