// The fused MoE router kernel as a template over the logits' element type (instantiated per
// dtype in moe_route.metal). It follows lib/core/router_semantics.md step by step, in float32.
//
// One threadgroup routes one token (grid: 1 x tokens). The token's logits are read from device
// memory once, into threadgroup memory as float32 with their ordered keys beside them; every
// later step works there:
//   softmax: the largest logit m (a threadgroup arg-max over the keys), then u = exp(x - m);
//   biased or grouped: u and the selection score c = u / S + bias for every expert, the keys
//     replaced by c's keys, and (grouped) the keys of dropped groups cleared;
//   selection: k rounds of a threadgroup arg-max over the keys, each winner's key cleared;
//   weights: the winners' u, renormalised (summed left to right) or divided by S, scaled.
// A cleared key (0) ranks below every real one: ordered keys of float32 are never 0 (the
// smallest, -inf's, is 0x007fffff), and the core guarantees k <= the experts of kept groups.
//
// Unlike the top-k kernels this one computes in floating point (exp, division); the library is
// compiled with safe math, so NaN and infinities propagate as IEEE says (the semantics rely on
// it: a NaN or +inf logit makes its token's softmax scores NaN).
#pragma once

#include "mtk_dialect.h"
#include "router_params.h"
#include "topk_kernels.h"

// ---- Logits to float32 (exact for every value; lib/core/float_formats.hpp) ----------------

inline float logit_value(DtF32, uint bits) { return as_type<float>(bits); }
inline float logit_value(DtBF16, ushort bits) { return mtk::bf16_to_f32(bits); }
inline float logit_value(DtF16, ushort bits) { return mtk::f16_to_f32(bits); }

inline uint score_key(float value) { return mtk::key_from_f32(value); }

// The float a key came from, up to what keys forget (the sign of zero, NaN payloads), as the
// CPU backend computes group scores.
inline float score_from_key(uint key) { return mtk::float_from_key(key); }

// ---- Threadgroup arg-max and sum ---------------------------------------------------------

// An expert (or group) and its key. Higher keys rank first, equal keys the lower index.
struct RankedEntry {
  uint key;
  uint index;
};

inline bool outranks(RankedEntry a, RankedEntry b) {
  return a.key > b.key || (a.key == b.key && a.index < b.index);
}

// Ranks below every real entry (real indices are below 2^32 - 1).
inline RankedEntry no_entry() {
  RankedEntry none = {0u, 0xffffffffu};
  return none;
}

// The best entry of the calling thread's SIMD-group, returned to all of its threads. Must be
// called by every thread of the threadgroup (the emulation synchronises the threadgroup);
// `lane_keys` and `lane_indices` are this SIMD-group's kSimdWidth words each, unused natively.
inline RankedEntry simd_best(RankedEntry mine, uint lane, threadgroup uint* lane_keys,
                             threadgroup uint* lane_indices) {
#if defined(MTK_METAL_EMULATION) || defined(MTK_SIMD_VIA_THREADGROUP)
  lane_keys[lane] = mine.key;
  lane_indices[lane] = mine.index;
  tg_barrier();
  RankedEntry best = no_entry();
  for (uint i = 0; i < kSimdWidth; ++i) {
    const RankedEntry other = {lane_keys[i], lane_indices[i]};
    if (outranks(other, best)) best = other;
  }
  tg_barrier();
  return best;
#else
  (void)lane;
  (void)lane_keys;
  (void)lane_indices;
  RankedEntry best;
  best.key = simd_max(mine.key);
  best.index = simd_min(mine.key == best.key ? mine.index : 0xffffffffu);
  return best;
#endif
}

// Words of threadgroup memory threadgroup_best and threadgroup_sum need for `threads` threads
// (the host plan mirrors this in router_reduce_words, lib/metal/metal_router_plan.cpp).
inline uint router_reduce_words(uint threads) { return 2 * kSimdWidth + 2 * threads; }

// The best of one entry per thread over the whole threadgroup, returned to every thread.
// `threads` is a multiple of kSimdWidth, at most kSimdWidth * kSimdWidth. Every thread must
// call it; `scratch` is reusable on return.
inline RankedEntry threadgroup_best(RankedEntry mine, uint tid, uint threads,
                                    threadgroup uint* scratch) {
  const uint lane = tid % kSimdWidth;
  const uint group = tid / kSimdWidth;
  threadgroup uint* group_keys = scratch;
  threadgroup uint* group_indices = scratch + kSimdWidth;
  threadgroup uint* lane_keys = scratch + 2 * kSimdWidth + group * kSimdWidth;
  threadgroup uint* lane_indices = scratch + 2 * kSimdWidth + threads + group * kSimdWidth;

  const RankedEntry group_best = simd_best(mine, lane, lane_keys, lane_indices);
  if (lane == 0u) {
    group_keys[group] = group_best.key;
    group_indices[group] = group_best.index;
  }
  tg_barrier();
  // Every SIMD-group reduces the per-group winners, so all threads end with the same answer.
  RankedEntry candidate = no_entry();
  if (lane < threads / kSimdWidth) {
    candidate.key = group_keys[lane];
    candidate.index = group_indices[lane];
  }
  const RankedEntry best = simd_best(candidate, lane, lane_keys, lane_indices);
  tg_barrier();
  return best;
}

// The sum of one float per thread, returned to every thread. A fixed tree in threadgroup
// memory, the same on every GPU, so the association never depends on the SIMD width.
inline float threadgroup_sum(float mine, uint tid, uint threads, threadgroup uint* scratch) {
  scratch[tid] = as_type<uint>(mine);
  tg_barrier();
  for (uint active = threads; active > 1u;) {
    const uint half_count = (active + 1u) / 2u;
    if (tid < active - half_count) {
      scratch[tid] = as_type<uint>(as_type<float>(scratch[tid]) + as_type<float>(scratch[tid + half_count]));
    }
    tg_barrier();
    active = half_count;
  }
  const float total = as_type<float>(scratch[0]);
  tg_barrier();
  return total;
}

// ---- Scoring -----------------------------------------------------------------------------

// The weight numerator u of logit x (m: the token's largest logit, used by softmax only).
inline float score_numerator(float x, float m, uint scoring) {
  if (scoring == MTK_ROUTER_SOFTMAX) return exp(x - m);
  if (scoring == MTK_ROUTER_SIGMOID) return 1.0f / (1.0f + exp(-x));
  return x;
}

// Ranks the groups by the sum of their two best selection keys' scores and clears the keys of
// the experts in groups that are not among the topk_group best. `group_keys` and `group_ranks`
// hold n_group words each.
inline void exclude_dropped_groups(constant MtkRouterParams& p, threadgroup uint* keys,
                                   threadgroup uint* group_keys, threadgroup uint* group_ranks,
                                   uint tid, uint threads) {
  const uint groups = p.n_group;
  const uint size = p.experts / groups;
  for (uint g = tid; g < groups; g += threads) {
    threadgroup const uint* members = keys + g * size;
    uint first = members[0];
    uint second = 0u;
    for (uint i = 1; i < size; ++i) {
      if (members[i] > first) {
        second = first;
        first = members[i];
      } else if (members[i] > second) {
        second = members[i];
      }
    }
    const float score = size == 1u ? score_from_key(first) : score_from_key(first) + score_from_key(second);
    group_keys[g] = score_key(score);
  }
  tg_barrier();
  for (uint g = tid; g < groups; g += threads) {
    const RankedEntry mine = {group_keys[g], g};
    uint better = 0;
    for (uint h = 0; h < groups; ++h) {
      const RankedEntry other = {group_keys[h], h};
      if (outranks(other, mine)) ++better;
    }
    group_ranks[g] = better;
  }
  tg_barrier();
  for (uint i = tid; i < p.experts; i += threads) {
    if (group_ranks[i / size] >= p.topk_group) keys[i] = 0u;
  }
  tg_barrier();
}

// ---- The kernel --------------------------------------------------------------------------
// Threadgroup buffers (sized by lib/metal/metal_router_plan.cpp, make_metal_router_plan):
//   0 scores:  E floats: the logits, then (biased or grouped) u
//   1 keys:    E words: selection keys; 0 once taken or excluded
//   2 reduce:  router_reduce_words(threads) words for the arg-max and sum
//   3 route:   2 * n_group words (group keys, group ranks), then k chosen ids and k chosen u

template <typename DT>
[[kernel]] void mtk_moe_route(device const typename DT::Storage* logits [[buffer(0)]],
                              device const float* bias [[buffer(1)]],
                              device float* weights [[buffer(2)]],
                              device uchar* ids [[buffer(3)]],
                              constant MtkRouterParams& p [[buffer(4)]],
                              threadgroup float* tg_scores [[threadgroup(0)]],
                              threadgroup uint* tg_keys [[threadgroup(1)]],
                              threadgroup uint* tg_reduce [[threadgroup(2)]],
                              threadgroup uint* tg_route [[threadgroup(3)]],
                              uint2 group [[threadgroup_position_in_grid]],
                              uint2 local_id [[thread_position_in_threadgroup]],
                              uint2 tg_size [[threads_per_threadgroup]]) {
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const long token = long(group.y);
  const uint experts = p.experts;
  const uint k = p.k;
  const bool softmax = p.scoring == MTK_ROUTER_SOFTMAX;
  const bool plain = p.has_bias == 0u && p.n_group <= 1u;
  threadgroup uint* chosen_ids = tg_route + 2 * p.n_group;
  threadgroup float* chosen_u = (threadgroup float*)(chosen_ids + k);

  device const typename DT::Storage* row = logits + p.logits_base + token * p.logits_token_stride;
  for (uint i = tid; i < experts; i += threads) {
    const float x = logit_value(DT(), row[long(i) * p.logits_expert_stride]);
    tg_scores[i] = x;
    tg_keys[i] = score_key(x);
  }
  tg_barrier();

  // The largest logit (NaN ranks highest; among equal keys the lowest id, as on the CPU).
  float m = 0.0f;
  if (softmax) {
    RankedEntry mine = no_entry();
    for (uint i = tid; i < experts; i += threads) {
      const RankedEntry entry = {tg_keys[i], i};
      if (outranks(entry, mine)) mine = entry;
    }
    m = tg_scores[threadgroup_best(mine, tid, threads, tg_reduce).index];
  }

  // Plain routing ranks the logits' own keys (every scoring is monotone); S is needed only for
  // unnormalised softmax. Otherwise every expert's u and selection score are computed.
  float total = 1.0f;
  if (!plain) {
    float partial = 0.0f;
    for (uint i = tid; i < experts; i += threads) {
      const float u = score_numerator(tg_scores[i], m, p.scoring);
      tg_scores[i] = u;
      partial += u;
    }
    if (softmax) total = threadgroup_sum(partial, tid, threads, tg_reduce);
    for (uint i = tid; i < experts; i += threads) {
      const float s = tg_scores[i] / total;
      tg_keys[i] = score_key(p.has_bias != 0u ? s + bias[p.bias_base + long(i) * p.bias_stride] : s);
    }
    tg_barrier();
    if (p.n_group > 1u) exclude_dropped_groups(p, tg_keys, tg_route, tg_route + p.n_group, tid, threads);
  } else if (softmax && p.renormalize == 0u) {
    float partial = 0.0f;
    for (uint i = tid; i < experts; i += threads) partial += exp(tg_scores[i] - m);
    total = threadgroup_sum(partial, tid, threads, tg_reduce);
  }

  // k rounds of arg-max: the winners come out in ranking order.
  for (uint r = 0; r < k; ++r) {
    RankedEntry mine = no_entry();
    for (uint i = tid; i < experts; i += threads) {
      const RankedEntry entry = {tg_keys[i], i};
      if (outranks(entry, mine)) mine = entry;
    }
    const RankedEntry winner = threadgroup_best(mine, tid, threads, tg_reduce);
    if (tid == 0u) {
      chosen_ids[r] = winner.index;
      tg_keys[winner.index] = 0u;
    }
    tg_barrier();
  }

  for (uint r = tid; r < k; r += threads) {
    const float stored = tg_scores[chosen_ids[r]];
    chosen_u[r] = plain ? score_numerator(stored, m, p.scoring) : stored;
  }
  tg_barrier();

  float chosen_total = 0.0f;
  if (p.renormalize != 0u) {
    for (uint r = 0; r < k; ++r) chosen_total += chosen_u[r];  // left to right, as specified
  }
  device float* token_weights = weights + p.weights_base + token * p.weights_token_stride;
  for (uint r = tid; r < k; r += threads) {
    const float u = chosen_u[r];
    token_weights[long(r) * p.weights_k_stride] =
        (p.renormalize != 0u ? u / chosen_total : u / total) * p.scale;
    const long at = p.ids_base + token * p.ids_token_stride + long(r) * p.ids_k_stride;
    if (p.index_is_64 != 0u) {
      ((device long*)ids)[at] = long(chosen_ids[r]);
    } else {
      ((device int*)ids)[at] = int(chosen_ids[r]);
    }
  }
}
