// The fused MoE router on the CPU: one token at a time per worker, following
// lib/core/router_semantics.md step by step. Tokens are independent, so the thread pool splits
// them; each worker reuses its own scratch across the tokens it gets. The softmax denominator S
// is accumulated in double: a loop of float adds over 512 experts would drift by more than the
// warp's tree sum on the GPU does.
#include "cpu/moe_route.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "core/ordered_key.hpp"

namespace mtk::cpu {
namespace {

float f32_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

float bf16_to_f32(uint16_t bits) { return f32_from_bits(uint32_t{bits} << 16); }

// IEEE half to float, exact for every value including subnormals, infinities and NaN payloads.
float f16_to_f32(uint16_t bits) {
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return f32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return f32_from_bits(sign);
  // Subnormal half: normalise it (the value is mantissa * 2^-24).
  int shift = 0;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  return f32_from_bits(sign | uint32_t(113 - shift) << 23 | ((mantissa & 0x3ffu) << 13));
}

uint32_t key_of(float value) { return KeyTraits<float>::key(value); }

// An expert (or group) and its rank key in one integer: a larger rank is better, and equal keys
// rank the lower index higher, so plain integer order is the router's order.
uint64_t rank_of(uint32_t key, int64_t index) {
  return uint64_t{key} << 32 | uint32_t(~uint32_t(index));
}
int64_t index_of(uint64_t rank) { return int64_t(uint32_t(~uint32_t(rank))); }

// Fills best[0, k) with the k highest of ranks[0, n), highest first. ranks is reordered.
void select_highest(uint64_t* ranks, int64_t n, int64_t k, uint64_t* best) {
  if (k <= 32) {
    // Few winners: an insertion list rejects most candidates with one comparison.
    int64_t filled = 0;
    for (int64_t i = 0; i < n; ++i) {
      const uint64_t r = ranks[i];
      if (filled == k && r <= best[k - 1]) continue;
      int64_t at = filled < k ? filled++ : k - 1;
      while (at > 0 && best[at - 1] < r) {
        best[at] = best[at - 1];
        --at;
      }
      best[at] = r;
    }
    return;
  }
  std::partial_sort(ranks, ranks + k, ranks + n, std::greater<uint64_t>());
  std::copy(ranks, ranks + k, best);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Per-worker buffers, sized once per call.
struct Scratch {
  std::vector<float> x, u, c;
  std::vector<uint64_t> ranks, best, group_ranks;
};

class TokenRouter {
 public:
  explicit TokenRouter(const RouterProblem& p) : p_(p) {}

  void prepare(Scratch& s) const {
    const size_t e = static_cast<size_t>(p_.experts);
    s.x.resize(e);
    s.u.resize(e);
    s.c.resize(e);
    s.ranks.resize(e);
    s.best.resize(static_cast<size_t>(std::max(p_.k, p_.topk_group)));
    s.group_ranks.resize(static_cast<size_t>(p_.n_group));
  }

  void route(int64_t token, Scratch& s) const {
    load_logits(token, s.x.data());
    const bool plain = p_.bias == nullptr && p_.n_group == 1;
    float softmax_total = 1.0f;  // S; stays 1 where s == u
    if (plain) {
      for (int64_t i = 0; i < p_.experts; ++i) s.ranks[i] = rank_of(key_of(s.x[i]), i);
      select_highest(s.ranks.data(), p_.experts, p_.k, s.best.data());
      // Only the selected experts' scores are needed, plus S for unnormalised softmax.
      if (p_.scoring == MTK_SCORING_SOFTMAX && !p_.renormalize) {
        const float m = s.x[index_of(s.best[0])];
        double total = 0.0;
        for (int64_t i = 0; i < p_.experts; ++i) total += std::exp(s.x[i] - m);
        softmax_total = static_cast<float>(total);
      }
      write_outputs(token, s, /*first_is_max=*/true, softmax_total);
      return;
    }
    softmax_total = score_all(s);
    for (int64_t i = 0; i < p_.experts; ++i) {
      s.c[i] = p_.bias != nullptr ? s.u[i] / softmax_total + p_.bias[i * p_.bias_stride]
                                  : s.u[i] / softmax_total;
    }
    int64_t candidates = 0;
    if (p_.n_group > 1) {
      const uint64_t kept_threshold = group_threshold(s);
      const int64_t size = p_.experts / p_.n_group;
      for (int64_t i = 0; i < p_.experts; ++i) {
        if (s.group_ranks[i / size] >= kept_threshold) {
          s.ranks[candidates++] = rank_of(key_of(s.c[i]), i);
        }
      }
    } else {
      for (int64_t i = 0; i < p_.experts; ++i) s.ranks[candidates++] = rank_of(key_of(s.c[i]), i);
    }
    if (candidates < p_.k) {
      fail(MTK_ERROR_INTERNAL, "moe_route: ", candidates, " candidate experts for k = ", p_.k);
    }
    select_highest(s.ranks.data(), candidates, p_.k, s.best.data());
    write_outputs(token, s, /*first_is_max=*/false, softmax_total);
  }

 private:
  void load_logits(int64_t token, float* x) const {
    const int64_t base = token * p_.logits_token_stride, step = p_.logits_expert_stride;
    switch (p_.dtype) {
      case MTK_FLOAT32: {
        const float* in = static_cast<const float*>(p_.logits) + base;
        for (int64_t i = 0; i < p_.experts; ++i) x[i] = in[i * step];
        return;
      }
      case MTK_FLOAT16: {
        const uint16_t* in = static_cast<const uint16_t*>(p_.logits) + base;
        for (int64_t i = 0; i < p_.experts; ++i) x[i] = f16_to_f32(in[i * step]);
        return;
      }
      case MTK_BFLOAT16: {
        const uint16_t* in = static_cast<const uint16_t*>(p_.logits) + base;
        for (int64_t i = 0; i < p_.experts; ++i) x[i] = bf16_to_f32(in[i * step]);
        return;
      }
      default:
        fail(MTK_ERROR_INTERNAL, "moe_route: logits dtype ", int(p_.dtype), " reached the CPU");
    }
  }

  // u for every expert; returns S for softmax (1 otherwise, so that s = u / S holds for all).
  float score_all(Scratch& s) const {
    const int64_t e = p_.experts;
    switch (p_.scoring) {
      case MTK_SCORING_SOFTMAX: {
        uint32_t max_key = 0;
        float m = 0.0f;
        for (int64_t i = 0; i < e; ++i) {
          const uint32_t key = key_of(s.x[i]);
          if (key > max_key) max_key = key, m = s.x[i];
        }
        double total = 0.0;
        for (int64_t i = 0; i < e; ++i) total += s.u[i] = std::exp(s.x[i] - m);
        return static_cast<float>(total);
      }
      case MTK_SCORING_SIGMOID:
        for (int64_t i = 0; i < e; ++i) s.u[i] = sigmoid(s.x[i]);
        return 1.0f;
      default:
        std::copy(s.x.begin(), s.x.end(), s.u.begin());
        return 1.0f;
    }
  }

  // Ranks every group by the sum of its two best c into s.group_ranks and returns the rank of
  // the last group kept: a group is kept exactly when its rank is at least that.
  uint64_t group_threshold(Scratch& s) const {
    const int64_t size = p_.experts / p_.n_group;
    for (int64_t g = 0; g < p_.n_group; ++g) {
      const float* c = s.c.data() + g * size;
      int64_t first = 0, second = -1;
      for (int64_t i = 1; i < size; ++i) {
        if (key_of(c[i]) > key_of(c[first])) {
          second = first;
          first = i;
        } else if (second < 0 || key_of(c[i]) > key_of(c[second])) {
          second = i;
        }
      }
      const float score = second < 0 ? c[first] : c[first] + c[second];
      s.group_ranks[g] = rank_of(key_of(score), g);
    }
    std::vector<uint64_t>& ranks = s.ranks;  // free until experts are ranked
    std::copy(s.group_ranks.begin(), s.group_ranks.end(), ranks.begin());
    select_highest(ranks.data(), p_.n_group, p_.topk_group, s.best.data());
    return s.best[p_.topk_group - 1];
  }

  // Weights and ids of the selected experts (s.best). On the plain path u is computed here,
  // from x; `first_is_max` says the first selected logit is the softmax max m.
  void write_outputs(int64_t token, Scratch& s, bool first_is_max, float softmax_total) const {
    float* u = s.u.data();  // u of the r-th selected expert, packed at u[r]
    if (first_is_max) {
      const float m = s.x[index_of(s.best[0])];
      for (int64_t r = 0; r < p_.k; ++r) {
        const float x = s.x[index_of(s.best[r])];
        u[r] = p_.scoring == MTK_SCORING_SOFTMAX   ? std::exp(x - m)
               : p_.scoring == MTK_SCORING_SIGMOID ? sigmoid(x)
                                                   : x;
      }
    } else {
      for (int64_t r = 0; r < p_.k; ++r) s.c[r] = u[index_of(s.best[r])];
      std::copy(s.c.begin(), s.c.begin() + p_.k, u);
    }
    float* weights = p_.weights + token * p_.weights_token_stride;
    if (p_.renormalize) {
      float total = 0.0f;
      for (int64_t r = 0; r < p_.k; ++r) total += u[r];
      for (int64_t r = 0; r < p_.k; ++r) weights[r * p_.weights_k_stride] = u[r] / total * p_.scale;
    } else {
      for (int64_t r = 0; r < p_.k; ++r) {
        weights[r * p_.weights_k_stride] = u[r] / softmax_total * p_.scale;
      }
    }
    if (p_.index_dtype == MTK_INT32) {
      int32_t* ids = static_cast<int32_t*>(p_.ids) + token * p_.ids_token_stride;
      for (int64_t r = 0; r < p_.k; ++r) ids[r * p_.ids_k_stride] = int32_t(index_of(s.best[r]));
    } else {
      int64_t* ids = static_cast<int64_t*>(p_.ids) + token * p_.ids_token_stride;
      for (int64_t r = 0; r < p_.k; ++r) ids[r * p_.ids_k_stride] = index_of(s.best[r]);
    }
  }

  const RouterProblem& p_;
};

}  // namespace

void cpu_moe_route(const RouterProblem& problem, ThreadPool& pool) {
  const TokenRouter router(problem);
  std::vector<Scratch> scratch(static_cast<size_t>(pool.num_threads()));
  for (Scratch& s : scratch) router.prepare(s);
  pool.parallel_for_worker(problem.tokens, [&](int worker, int64_t begin, int64_t end) {
    Scratch& s = scratch[static_cast<size_t>(worker)];
    for (int64_t token = begin; token < end; ++token) router.route(token, s);
  });
}

}  // namespace mtk::cpu
