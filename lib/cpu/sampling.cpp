#include "cpu/sampling.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/dtype.hpp"
#include "core/sampling_math.hpp"

namespace mtk::cpu {
namespace {

constexpr size_t kAlign = 64;

size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// One row of the input: its elements as float32 and as contract keys.
class InputRow {
 public:
  InputRow(const SamplingProblem& p, int64_t row)
      : dtype_(p.dtype), stride_(p.input_stride), n_(p.n) {
    const auto element = static_cast<int64_t>(dtype_info(p.dtype)->size);
    data_ = static_cast<const std::byte*>(p.input) + row * p.input_row_stride * element;
  }

  uint32_t bits(int64_t i) const {
    const std::byte* at = data_ + i * stride_ * static_cast<int64_t>(element_size());
    if (dtype_ == MTK_FLOAT32) {
      uint32_t b;
      std::memcpy(&b, at, sizeof b);
      return b;
    }
    uint16_t h;
    std::memcpy(&h, at, sizeof h);
    return dtype_ == MTK_FLOAT16 ? f16_to_f32_bits(h) : bf16_to_f32_bits(h);
  }
  float value(int64_t i) const { return float_from_bits(bits(i)); }
  // The top-k contract's key (NaN above +inf, -0.0 == +0.0); widening is exact, so the key of
  // the float32 value orders f16 and bf16 as their own keys do.
  uint32_t key(int64_t i) const { return key_from_f32_bits(bits(i)); }
  int64_t size() const { return n_; }

 private:
  size_t element_size() const { return dtype_ == MTK_FLOAT32 ? 4 : 2; }

  mtk_dtype dtype_;
  int64_t stride_, n_;
  const std::byte* data_;
};

// A key and an index packed so that the larger word comes first in the contract's order:
// the larger key, then the lower index. Rows are shorter than 2^31.
uint64_t ranked(uint32_t key, int64_t index) {
  return (uint64_t{key} << 32) | (0xffffffffu - static_cast<uint32_t>(index));
}
int64_t index_of(uint64_t word) { return 0xffffffffu - static_cast<uint32_t>(word); }

// The ranked word of the k-th of `count` words (k >= 1): the words ranked at least as high are
// exactly the top k.
uint64_t kth_word(uint64_t* words, int64_t count, int64_t k) {
  std::nth_element(words, words + (k - 1), words + count, std::greater<uint64_t>());
  return words[k - 1];
}

// The row's first token in the top-k order of its logits.
int64_t top1_logit(const InputRow& row) {
  uint64_t best = ranked(row.key(0), 0);
  for (int64_t i = 1; i < row.size(); ++i) best = std::max(best, ranked(row.key(i), i));
  return index_of(best);
}

ExactSum exact_total(const float* mass, int64_t n) {
  ExactSum total = exact_zero();
  for (int64_t i = 0; i < n; ++i) total = exact_add_mass(total, mass[i]);
  return total;
}

class RowSampler {
 public:
  RowSampler(const SamplingProblem& p, std::byte* scratch)
      : p_(p),
        mass_(reinterpret_cast<float*>(scratch)),
        words_(reinterpret_cast<uint64_t*>(scratch + round_up(sizeof(float) * p.n))) {}

  void run(int64_t row) {
    const InputRow input(p_, row);
    switch (p_.op) {
      case MTK_SAMPLING_TOP_K_MASK_LOGITS:
        mask_logits(input, row);
        return;
      case MTK_SAMPLING_RENORM_PROBS:
        probability_masses(input, row);
        filter_masses(row);
        write_renormalised(row);
        return;
      case MTK_SAMPLING_SAMPLE:
        probability_masses(input, row);
        filter_masses(row);
        write_sample(row, nullptr);
        return;
      case MTK_SAMPLING_SAMPLE_FROM_LOGITS: {
        const float temperature = p_.temperature.at(row);
        if (!temperature_samples(temperature)) {
          write_token(row, top1_logit(input));
          return;
        }
        softmax_masses(input, row, reciprocal_temperature(temperature));
        filter_masses(row);
        write_sample(row, &input);
        return;
      }
    }
  }

 private:
  // The ranked word of the k-th logit, or 0 (every word is at least that) without a top-k filter.
  uint64_t logit_cutoff(const InputRow& input, int64_t row) {
    const int64_t k = p_.top_k.at(row), n = p_.n;
    if (!top_k_filters(k, n)) return 0;
    for (int64_t i = 0; i < n; ++i) words_[i] = ranked(input.key(i), i);
    return kth_word(words_, n, k);
  }

  void mask_logits(const InputRow& input, int64_t row) {
    const uint64_t cutoff = logit_cutoff(input, row);
    const size_t element = p_.dtype == MTK_FLOAT32 ? 4 : 2;
    auto* out = static_cast<std::byte*>(p_.output) +
                row * p_.output_row_stride * static_cast<int64_t>(element);
    const uint32_t negative_infinity = p_.dtype == MTK_FLOAT32    ? 0xff800000u
                                       : p_.dtype == MTK_FLOAT16 ? 0xfc00u
                                                                 : 0xff80u;
    const auto* in = static_cast<const std::byte*>(p_.input) +
                     row * p_.input_row_stride * static_cast<int64_t>(element);
    for (int64_t i = 0; i < p_.n; ++i) {
      std::byte* to = out + i * p_.output_stride * static_cast<int64_t>(element);
      if (ranked(input.key(i), i) >= cutoff) {
        std::memcpy(to, in + i * p_.input_stride * static_cast<int64_t>(element), element);
      } else if (element == 4) {
        std::memcpy(to, &negative_infinity, 4);
      } else {
        const auto half = static_cast<uint16_t>(negative_infinity);
        std::memcpy(to, &half, 2);
      }
    }
  }

  // Each probability's mass; the top-k filter keeps the k largest masses.
  void probability_masses(const InputRow& input, int64_t row) {
    const int64_t n = p_.n, k = p_.top_k.at(row);
    for (int64_t i = 0; i < n; ++i) mass_[i] = probability_mass(input.value(i));
    if (!top_k_filters(k, n)) return;
    for (int64_t i = 0; i < n; ++i) words_[i] = ranked(bits_from_float(mass_[i]), i);
    const uint64_t cutoff = kth_word(words_, n, k);
    for (int64_t i = 0; i < n; ++i) {
      if (ranked(bits_from_float(mass_[i]), i) < cutoff) mass_[i] = 0.0f;
    }
  }

  // exp(z - M) of each scaled logit z kept by the top-k filter (on the logits), M the largest
  // non-NaN one kept; NaN logits and the tokens the filter drops have no mass. With M = +inf
  // the +inf logits share the mass (the softmax's limit); with M = -inf, or no M, none has any.
  void softmax_masses(const InputRow& input, int64_t row, float reciprocal) {
    const int64_t n = p_.n;
    const uint64_t cutoff = logit_cutoff(input, row);
    float* scaled = mass_;  // overwritten in place by the masses below
    bool any = false;
    float most = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const bool kept = ranked(input.key(i), i) >= cutoff;
      const float z = kept ? scaled_logit(input.value(i), reciprocal) : float_from_bits(0x7fc00000u);
      scaled[i] = z;
      if (!is_nan_f32(z) && (!any || z > most)) {
        most = z;
        any = true;
      }
    }
    const uint32_t most_bits = bits_from_float(most);
    const bool none = !any || most_bits == 0xff800000u;
    const bool infinite = most_bits == kF32Exponent;
    for (int64_t i = 0; i < n; ++i) {
      const float z = scaled[i];
      if (none || is_nan_f32(z)) {
        mass_[i] = 0.0f;
      } else if (infinite) {
        mass_[i] = bits_from_float(z) == kF32Exponent ? 1.0f : 0.0f;
      } else {
        mass_[i] = exp_of_negative_gap(gap_below(most, z));
      }
    }
  }

  // top-p (on what top-k kept), then min-p (on what top-p kept), by dropping masses.
  void filter_masses(int64_t row) {
    const int64_t n = p_.n;
    const float top_p = p_.top_p.at(row);
    if (top_p_filters(top_p)) {
      const ExactSum total = exact_total(mass_, n);
      if (!exact_is_zero(total)) keep_top_p(exact_ceil_scaled(total, top_p_fraction(top_p)));
    }
    const float min_p = p_.min_p.at(row);
    if (min_p_filters(min_p)) {
      float most = 0.0f;
      for (int64_t i = 0; i < n; ++i) most = std::max(most, mass_[i]);
      const ExactSum least = exact_ceil_scaled(exact_of_mass(most), min_p_fraction(min_p));
      for (int64_t i = 0; i < n; ++i) {
        if (mass_[i] > 0.0f && exact_compare(exact_of_mass(mass_[i]), least) < 0) mass_[i] = 0.0f;
      }
    }
  }

  // Keeps the shortest prefix of the masses in the contract's order (descending, ties to the
  // lower index) whose exact sum reaches `target`, at least one token. The prefix's end is
  // found by selection rather than a sort: the range [low, high) that holds it halves each
  // step around a median found by nth_element, and only the last few words are sorted. Exact
  // sums make the answer the sort's, whatever order the selection leaves the words in.
  void keep_top_p(ExactSum target) {
    int64_t count = 0;
    for (int64_t i = 0; i < p_.n; ++i) {
      if (mass_[i] > 0.0f) words_[count++] = ranked(bits_from_float(mass_[i]), i);
    }
    // Invariant: the words before `low` rank above all others and sum to `before` < target
    // (or low == 0), and the prefix ends in [low, high).
    int64_t low = 0, high = count;
    ExactSum before = exact_zero();
    constexpr int64_t kSortBelow = 64;
    while (high - low > kSortBelow) {
      const int64_t middle = low + (high - low) / 2;
      std::nth_element(words_ + low, words_ + middle, words_ + high, std::greater<uint64_t>());
      ExactSum upper = before;  // through words_[middle]
      for (int64_t j = low; j <= middle; ++j) {
        upper = exact_add_mass(upper, mass_[index_of(words_[j])]);
      }
      if (exact_compare(upper, target) >= 0) {
        high = middle + 1;
      } else {
        before = upper;
        low = middle + 1;
      }
    }
    std::sort(words_ + low, words_ + high, std::greater<uint64_t>());
    int64_t kept = low;
    while (kept < high) {
      before = exact_add_mass(before, mass_[index_of(words_[kept])]);
      ++kept;
      if (exact_compare(before, target) >= 0) break;
    }
    for (int64_t j = kept; j < count; ++j) mass_[index_of(words_[j])] = 0.0f;
  }

  void write_renormalised(int64_t row) {
    const ExactSum total = exact_total(mass_, p_.n);
    const float sum = exact_to_f32(total);
    float* out = static_cast<float*>(p_.output) + row * p_.output_row_stride;
    for (int64_t i = 0; i < p_.n; ++i) {
      const float m = mass_[i];
      out[i * p_.output_stride] = m > 0.0f ? divide_f32(m, sum) : 0.0f;
    }
  }

  // The first token whose cumulative mass exceeds uniform * total. A row without mass takes
  // its first token in the contract's order: the top-1 of its logits, or (probabilities, all
  // masses 0) index 0.
  void write_sample(int64_t row, const InputRow* logits) {
    const ExactSum total = exact_total(mass_, p_.n);
    if (exact_is_zero(total)) {
      write_token(row, logits != nullptr ? top1_logit(*logits) : 0);
      return;
    }
    const ExactSum threshold = exact_scaled(total, clamped_uniform(p_.uniforms.at(row))).floor;
    ExactSum cumulative = exact_zero();
    int64_t token = 0;
    for (int64_t i = 0; i < p_.n; ++i) {
      if (mass_[i] == 0.0f) continue;
      cumulative = exact_add_mass(cumulative, mass_[i]);
      if (exact_compare(cumulative, threshold) > 0) {
        token = i;
        break;
      }
    }
    write_token(row, token);
  }

  void write_token(int64_t row, int64_t token) {
    const int64_t at = row * p_.output_row_stride;
    if (p_.output_dtype == MTK_INT64) {
      static_cast<int64_t*>(p_.output)[at] = token;
    } else {
      static_cast<int32_t*>(p_.output)[at] = static_cast<int32_t>(token);
    }
  }

  const SamplingProblem& p_;
  float* mass_;      // [n]
  uint64_t* words_;  // [n]
};

}  // namespace

size_t sampling_worker_bytes(const SamplingProblem& problem) {
  const auto n = static_cast<size_t>(problem.n);
  return round_up(sizeof(float) * n) + round_up(sizeof(uint64_t) * n);
}

void run_sampling(const SamplingProblem& problem, ThreadPool& pool,
                  std::byte* const* worker_scratch) {
  pool.parallel_for_worker(problem.rows, [&](int worker, int64_t begin, int64_t end) {
    RowSampler sampler(problem, worker_scratch[worker]);
    for (int64_t row = begin; row < end; ++row) sampler.run(row);
  });
}

}  // namespace mtk::cpu
