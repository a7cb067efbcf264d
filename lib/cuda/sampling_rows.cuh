// The CUDA sampling filters and samplers (docs/CONTRACT.md, "Sampling filters"), one block per
// row, the same steps as the CPU backend (lib/cpu/sampling.cpp) with the same arithmetic
// (core/sampling_math.hpp), so that every result is the CPU's bit for bit.
//
// A row's top-k filter is a threshold search over the contract's keys (8 bits a pass, ties at
// the threshold broken by a search over their indices), never a sort. When it keeps at most
// kCandidateCapacity tokens, they are gathered into shared memory and everything after (softmax,
// top-p, min-p, renormalisation or the draw) runs on them alone: the row is read once per
// search pass and once to gather. Otherwise the row's masses go to the workspace and the same
// steps run over all of them. top-p is a threshold search over the masses' bits with exact
// per-bin sums; the draw scans exact chunk sums in vocabulary order.
#pragma once

#include <cstdint>

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
  mtk_sampling_op op;
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
  __device__ float value(int64_t i) const { return float_from_bits(Format::widen(raw(i))); }
  // The top-k contract's key; widening is exact, so the float32 key orders f16 and bf16 too.
  __device__ uint32_t logit_key(int64_t i) const { return key_from_f32_bits(Format::widen(raw(i))); }
  // A probability ranks by its mass (whose float bits order as its value does).
  __device__ uint32_t mass_key(int64_t i) const {
    return bits_from_float(probability_mass(value(i)));
  }
};

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

// The cutoff that keeps exactly the k (0 < k < n) largest keys.
template <class KeyOf>
__device__ TopkCutoff top_k_cutoff(SharedState& s, int64_t n, int64_t k, KeyOf key_of) {
  const CountSelection kth = select_by_count(
      s, n,
      [&](int64_t i, uint32_t& v) {
        v = key_of(i);
        return true;
      },
      32, uint32_t(k), true);
  const uint32_t ties = uint32_t(k) - kth.before;
  uint32_t last_index = 0xffffffffu;
  if (ties < kth.equal) {
    last_index = select_by_count(
                     s, n,
                     [&](int64_t i, uint32_t& v) {
                       if (key_of(i) != kth.value) return false;
                       v = uint32_t(i);
                       return true;
                     },
                     index_bits(n), ties, false)
                     .value;
  }
  return {kth.value, last_index};
}

// The row's first token in the top-k order of its logits (argmax, NaN first).
template <class Format>
__device__ uint32_t top1_logit(SharedState& s, const InputRow<Format>& row, int64_t n) {
  unsigned long long best = 0u;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const unsigned long long word =
        (uint64_t(row.logit_key(i)) << 32) | (0xffffffffu - uint32_t(i));
    best = word > best ? word : best;
  }
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

template <class Format>
__device__ void mask_logits(SharedState& s, const SamplingArgs& a, const InputRow<Format>& row,
                            int64_t r) {
  const int64_t k = a.top_k.at(r);
  const TopkCutoff cut = top_k_filters(k, a.n)
                             ? top_k_cutoff(s, a.n, k, [&](int64_t i) { return row.logit_key(i); })
                             : keep_all();
  auto* out = static_cast<typename Format::Raw*>(a.output) + r * a.output_row_stride;
  for (int64_t i = threadIdx.x; i < a.n; i += kThreads) {
    out[i * a.output_stride] =
        cut.keeps(row.logit_key(i), i) ? row.raw(i) : Format::kNegativeInfinity;
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

// Gathers the tokens `cut` keeps (their input values) into the candidates; `dropped(i)` is
// called for every other token.
template <class Format, class KeyOf, class Dropped>
__device__ void gather_candidates(SharedState& s, const InputRow<Format>& row, int64_t n,
                                  TopkCutoff cut, KeyOf key_of, Dropped dropped) {
  if (threadIdx.x == 0) s.candidate_count = 0u;
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    if (cut.keeps(key_of(i), i)) {
      const uint32_t slot = atomicAdd(&s.candidate_count, 1u);
      s.candidate_index[slot] = uint32_t(i);
      s.candidate_mass[slot] = row.value(i);
    } else {
      dropped(i);
    }
  }
  __syncthreads();
}

// The candidates' values become their masses.
__device__ __forceinline__ void candidate_masses(SharedState& s, bool logits, float reciprocal) {
  const int count = int(s.candidate_count);
  if (!logits) {
    for (int j = threadIdx.x; j < count; j += kThreads) {
      s.candidate_mass[j] = probability_mass(s.candidate_mass[j]);
    }
    __syncthreads();
    return;
  }
  unsigned long long most = 0u;
  for (int j = threadIdx.x; j < count; j += kThreads) {
    const unsigned long long word = scaled_logit_word(scaled_logit(s.candidate_mass[j], reciprocal));
    most = word > most ? word : most;
  }
  most = block_max_word(s, most);
  for (int j = threadIdx.x; j < count; j += kThreads) {
    s.candidate_mass[j] = softmax_mass(scaled_logit(s.candidate_mass[j], reciprocal), most);
  }
  __syncthreads();
}

// Every token's mass (0 where `cut` drops it) into the workspace row.
template <class Format>
__device__ void row_masses(SharedState& s, const InputRow<Format>& row, int64_t n,
                           TopkCutoff cut, bool logits, float reciprocal, float* masses) {
  if (!logits) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = row.mass_key(i);
      masses[i] = cut.keeps(key, i) ? float_from_bits(key) : 0.0f;
    }
    __syncthreads();
    return;
  }
  unsigned long long most = 0u;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    if (!cut.keeps(row.logit_key(i), i)) continue;
    const unsigned long long word = scaled_logit_word(scaled_logit(row.value(i), reciprocal));
    most = word > most ? word : most;
  }
  most = block_max_word(s, most);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    masses[i] = cut.keeps(row.logit_key(i), i)
                    ? softmax_mass(scaled_logit(row.value(i), reciprocal), most)
                    : 0.0f;
  }
  __syncthreads();
}

// ---- the end of a row: filters, then renormalisation or the draw ------------------------------

template <class View>
__device__ void write_renormalised(SharedState& s, const View& view, float* out,
                                   int64_t stride) {
  const float sum = exact_to_f32(view_total(s, view));
  for (int64_t j = threadIdx.x; j < view.count(); j += kThreads) {
    const float m = view.mass(j);
    out[int64_t(view.index(j)) * stride] = m > 0.0f ? divide_f32(m, sum) : 0.0f;
  }
}

template <class Format, class View>
__device__ void finish_row(SharedState& s, const SamplingArgs& a, int64_t r,
                           const InputRow<Format>& row, View& view, float* renormalised,
                           bool candidates) {
  filter_masses(s, view, a.top_p.at(r), a.min_p.at(r), a.n);
  if (renormalised != nullptr) {
    write_renormalised(s, view, renormalised, a.output_stride);
    return;
  }
  const ExactSum total = view_total(s, view);
  if (exact_is_zero(total)) {  // no mass: the first token in the contract's order
    const bool logits = a.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    write_token(a, r, logits ? top1_logit(s, row, a.n) : 0u);
    return;
  }
  if (candidates) sort_candidates_by_index(s);
  const ExactSum threshold = exact_scaled(total, clamped_uniform(a.uniforms.at(r))).floor;
  write_token(a, r, first_exceeding(s, view, threshold));
}

// One row of any sampling operation; every thread of the block calls it.
template <class Format>
__device__ void sampling_row(SharedState& s, const SamplingArgs& a, int64_t r) {
  const InputRow<Format> row{
      static_cast<const typename Format::Raw*>(a.input) + r * a.input_row_stride,
      a.input_stride};
  if (a.op == MTK_SAMPLING_TOP_K_MASK_LOGITS) {
    mask_logits(s, a, row, r);
    return;
  }
  const bool logits = a.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  float reciprocal = 1.0f;
  if (logits) {
    const float temperature = a.temperature.at(r);
    if (!temperature_samples(temperature)) {  // greedy
      write_token(a, r, top1_logit(s, row, a.n));
      return;
    }
    reciprocal = reciprocal_temperature(temperature);
  }
  const auto key_of = [&](int64_t i) { return logits ? row.logit_key(i) : row.mass_key(i); };
  const int64_t k = a.top_k.at(r);
  const bool top_k = top_k_filters(k, a.n);
  const TopkCutoff cut = top_k ? top_k_cutoff(s, a.n, k, key_of) : keep_all();
  float* renormalised = a.op == MTK_SAMPLING_RENORM_PROBS
                            ? static_cast<float*>(a.output) + r * a.output_row_stride
                            : nullptr;
  if (top_k && k <= kCandidateCapacity) {
    gather_candidates(s, row, a.n, cut, key_of, [&](int64_t i) {
      if (renormalised != nullptr) renormalised[i * a.output_stride] = 0.0f;
    });
    candidate_masses(s, logits, reciprocal);
    Candidates view{&s};
    finish_row(s, a, r, row, view, renormalised, true);
    return;
  }
  RowMasses view{a.masses + r * a.masses_row_stride, a.n};
  row_masses(s, row, a.n, cut, logits, reciprocal, view.masses);
  finish_row(s, a, r, row, view, renormalised, false);
}

}  // namespace sampling
}  // namespace cuda
}  // namespace mtk
