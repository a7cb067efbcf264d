// The fused MoE router on the CPU: one token at a time per worker, following
// lib/core/router_semantics.md step by step. Tokens are independent, so the thread pool splits
// them; each worker reuses its own scratch across the tokens it gets. The softmax denominator S
// is accumulated in double: a loop of float adds over 512 experts would drift by more than the
// warp's tree sum on the GPU does.
#include "cpu/moe_route.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "core/fault_injection.hpp"
#include "core/float_formats.hpp"

namespace mtk::cpu {
namespace {

// An expert (or group) and its rank key in one integer: a larger rank is better, and equal keys
// rank the lower index higher, so plain integer order is the router's order.
using RankPacking = KeyIndexPacking<uint64_t, 32>;
uint64_t rank_of(uint32_t key, int64_t index) { return RankPacking::pack(key, uint32_t(index)); }
int64_t index_of(uint64_t rank) { return int64_t(RankPacking::index(rank)); }
uint32_t key_of_rank(uint64_t rank) { return uint32_t(RankPacking::key(rank)); }

// Fills best[0, k) with the ranks of the k highest keys[0, n), highest first; key 0 marks an
// excluded entry (never selected while k real ones exist). `ranks` is n words of scratch.
void select_highest(const uint32_t* keys, int64_t n, int64_t k, uint64_t* best,
                    uint64_t* ranks) {
  if (k > 32) {
    for (int64_t i = 0; i < n; ++i) ranks[i] = rank_of(keys[i], i);
    std::partial_sort(ranks, ranks + k, ranks + n, std::greater<uint64_t>());
    std::copy(ranks, ranks + k, best);
    return;
  }
  // Few winners: a sorted insertion list. Entries arrive in index order, so one whose key only
  // equals the k-th best's loses the tie: a single key comparison rejects almost everything.
  for (int64_t i = 0; i < k; ++i) {
    const uint64_t r = rank_of(keys[i], i);
    int64_t at = i;
    for (; at > 0 && best[at - 1] < r; --at) best[at] = best[at - 1];
    best[at] = r;
  }
  uint32_t floor_key = key_of_rank(best[k - 1]);
  for (int64_t i = k; i < n; ++i) {
    if (keys[i] <= floor_key) continue;
    const uint64_t r = rank_of(keys[i], i);
    int64_t at = k - 1;
    for (; at > 0 && best[at - 1] < r; --at) best[at] = best[at - 1];
    best[at] = r;
    floor_key = key_of_rank(best[k - 1]);
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Per-worker buffers, sized once per call.
struct Scratch {
  std::vector<float> x, u, chosen;  // chosen: u of the r-th selection
  std::vector<uint32_t> keys, group_keys;
  std::vector<uint64_t> ranks, best;
};

class TokenRouter {
 public:
  explicit TokenRouter(const RouterProblem& p) : p_(p) {}

  void prepare(Scratch& s) const {
    const size_t e = static_cast<size_t>(p_.experts);
    s.x.resize(e);
    s.u.resize(e);
    s.chosen.resize(static_cast<size_t>(p_.k));
    s.keys.resize(e);
    s.ranks.resize(e);
    s.best.resize(static_cast<size_t>(std::max(p_.k, p_.topk_group)));
    s.group_keys.resize(static_cast<size_t>(p_.n_group));
  }

  void route(int64_t token, Scratch& s) const {
    const int64_t e = p_.experts;
    load_logits(token, s.x.data());
    if (p_.bias == nullptr && p_.n_group == 1) {
      // Plain: rank the logits themselves; only the selected scores (and S for unnormalised
      // softmax) are computed afterwards.
      for (int64_t i = 0; i < e; ++i) s.keys[i] = key_from_f32(s.x[i]);
      select_highest(s.keys.data(), e, p_.k, s.best.data(), s.ranks.data());
      const float m = s.x[index_of(s.best[0])];  // the largest logit
      for (int64_t r = 0; r < p_.k; ++r) {
        const float x = s.x[index_of(s.best[r])];
        s.chosen[r] = p_.scoring == MTK_SCORING_SOFTMAX   ? std::exp(x - m)
               : p_.scoring == MTK_SCORING_SIGMOID ? sigmoid(x)
                                                   : x;
      }
      float total = 1.0f;
      if (p_.scoring == MTK_SCORING_SOFTMAX && !p_.renormalize) {
        double sum = 0.0;
        for (int64_t i = 0; i < e; ++i) sum += std::exp(s.x[i] - m);
        total = static_cast<float>(sum);
      }
      write_outputs(token, s, total);
      return;
    }
    const float total = score_all(s);
    for (int64_t i = 0; i < e; ++i) {
      const float c = p_.bias != nullptr ? s.u[i] / total + p_.bias[i * p_.bias_stride]
                                         : s.u[i] / total;
      s.keys[i] = key_from_f32(c);
    }
    if (p_.n_group > 1) exclude_dropped_groups(s);
    select_highest(s.keys.data(), e, p_.k, s.best.data(), s.ranks.data());
    for (int64_t r = 0; r < p_.k; ++r) s.chosen[r] = s.u[index_of(s.best[r])];
    write_outputs(token, s, total);
  }

 private:
  void load_logits(int64_t token, float* x) const {
    const int64_t base = token * p_.logits_token_stride;
    switch (p_.dtype) {
      case MTK_FLOAT32:
        return convert_row(static_cast<const float*>(p_.logits) + base, x,
                           [](float v) { return v; });
      case MTK_FLOAT16:
        return convert_row(static_cast<const uint16_t*>(p_.logits) + base, x, f16_to_f32);
      case MTK_BFLOAT16:
        return convert_row(static_cast<const uint16_t*>(p_.logits) + base, x, bf16_to_f32);
      default:
        fail(MTK_ERROR_INTERNAL, "moe_route: logits dtype ", int(p_.dtype), " reached the CPU");
    }
  }

  template <class Storage, class Convert>
  void convert_row(const Storage* in, float* x, Convert convert) const {
    const int64_t step = p_.logits_expert_stride;
    if (step == 1) {  // the usual layout, as its own loop so that it vectorises
      for (int64_t i = 0; i < p_.experts; ++i) x[i] = convert(in[i]);
    } else {
      for (int64_t i = 0; i < p_.experts; ++i) x[i] = convert(in[i * step]);
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
          const uint32_t key = key_from_f32(s.x[i]);
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

  // Ranks the groups by the sum of their two best selection scores and zeroes the keys of the
  // experts in groups that are not kept.
  void exclude_dropped_groups(Scratch& s) const {
    const int64_t size = p_.experts / p_.n_group;
    for (int64_t g = 0; g < p_.n_group; ++g) {
      const uint32_t* keys = s.keys.data() + g * size;
      uint32_t first = keys[0], second = 0;
      for (int64_t i = 1; i < size; ++i) {
        if (keys[i] > first) {
          second = first;
          first = keys[i];
        } else if (keys[i] > second) {
          second = keys[i];
        }
      }
      const float score = size == 1 ? float_from_key(first)
                                    : float_from_key(first) + float_from_key(second);
      s.group_keys[g] = key_from_f32(score);
    }
    select_highest(s.group_keys.data(), p_.n_group, p_.topk_group, s.best.data(),
                   s.ranks.data());
    const uint64_t last_kept = s.best[p_.topk_group - 1];
    for (int64_t g = 0; g < p_.n_group; ++g) {
      if (rank_of(s.group_keys[g], g) < last_kept) {
        std::fill_n(s.keys.data() + g * size, size, 0u);
      }
    }
  }

  // Weights and ids of the selections in s.best, whose u values are in s.chosen.
  void write_outputs(int64_t token, const Scratch& s, float softmax_total) const {
    const float* u = s.chosen.data();
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
  fault_point(FaultSite::HostAllocation);  // the per-worker scratch below
  std::vector<Scratch> scratch(static_cast<size_t>(pool.num_threads()));
  for (Scratch& s : scratch) router.prepare(s);
  pool.parallel_for_worker(problem.tokens, [&](int worker, int64_t begin, int64_t end) {
    Scratch& s = scratch[static_cast<size_t>(worker)];
    for (int64_t token = begin; token < end; ++token) router.route(token, s);
  });
}

}  // namespace mtk::cpu
