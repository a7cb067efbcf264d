// The CUDA router's per-token routines (lib/core/router_semantics.md gives the semantics): one
// warp routes one token. Up to 512 experts every score lives in registers, lane l holding experts
// [l * kItems, (l + 1) * kItems), so a contiguous row is one coalesced, vectorised read; past
// that, route_streaming re-reads the row for each step.
//
// The routines are __host__ __device__ templates over `Lanes`, the warp's collective operations:
// on the GPU they are shuffles (WarpLanes in moe_route.cu); the host tests run the very same code
// with 32 fibers playing the lanes (tests/router/warp_emulation.cpp), so the selection logic is
// checked on machines without a GPU.
//
// Lanes provides three primitives, called by all 32 lanes together: int lane();
// uint32_t shuffle_xor(uint32_t value, int lane_mask) (the value of lane ^ lane_mask);
// uint32_t shuffle(uint32_t value, int source_lane). Every reduction below is a butterfly built
// on them, whose result all lanes receive bit-identical.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/ordered_key.hpp"
#include "core/problem.hpp"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define MTK_ROUTER_HD __host__ __device__ __forceinline__
#else
#define MTK_ROUTER_HD inline
#endif

// Unrolling keeps per-lane arrays in registers on the device; host compilers need no hint (and
// GCC, nvcc's host compiler, warns about the pragma).
#if defined(__CUDA_ARCH__)
#define MTK_ROUTER_UNROLL _Pragma("unroll")
#else
#define MTK_ROUTER_UNROLL
#endif

namespace mtk::cuda_router {

constexpr int kWarpSize = 32;
// Experts per lane for the widest token the register routine takes (E <= 512).
constexpr int kMaxItems = 16;

MTK_ROUTER_HD float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

MTK_ROUTER_HD uint32_t bits_from_float(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

MTK_ROUTER_HD uint32_t key_of(float value) { return key_from_f32_bits(bits_from_float(value)); }

// The float a key came from, up to what keys forget (the sign of zero, NaN payloads), which no
// later step can observe.
MTK_ROUTER_HD float float_from_key(uint32_t key) {
  return float_from_bits((key & 0x80000000u) ? (key ^ 0x80000000u) : ~key);
}

// Logit element types, by storage.
struct F32 { using Storage = float; };
struct F16 { using Storage = uint16_t; };
struct BF16 { using Storage = uint16_t; };

MTK_ROUTER_HD float to_float(float v, F32) { return v; }
MTK_ROUTER_HD float to_float(uint16_t bits, BF16) { return float_from_bits(uint32_t{bits} << 16); }
MTK_ROUTER_HD float to_float(uint16_t bits, F16) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  const uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return float_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return float_from_bits(sign);
  int shift = 0;  // subnormal half: normalise
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    ++shift;
  }
  return float_from_bits(sign | uint32_t(113 - shift) << 23 | ((mantissa & 0x3ffu) << 13));
#endif
}

MTK_ROUTER_HD float exp_f32(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// Expert and rank key in one word: integer order is the router's order (key descending, then
// expert ascending). Both ends stay free as sentinels: 0 ranks below every real expert (no float
// has key 0) and ~0 above all (the low word of a real rank is at most 0xfffffffe, even for a NaN
// at index 0), so "below ~0" means "any".
constexpr uint32_t kIndexComplement = 0xfffffffeu;
MTK_ROUTER_HD uint64_t rank_of(uint32_t key, int64_t index) {
  return uint64_t{key} << 32 | (kIndexComplement - uint32_t(index));
}
MTK_ROUTER_HD int64_t index_of(uint64_t rank) {
  return int64_t(kIndexComplement - uint32_t(rank));
}

template <class Logit, int kItems>
MTK_ROUTER_HD void load_items(const RouterProblem& p, int64_t token, int lane, bool vector_loads,
                              float (&x)[kItems]) {
  using Storage = typename Logit::Storage;
  const Storage* row = static_cast<const Storage*>(p.logits) + token * p.logits_token_stride;
  const int64_t first = int64_t{lane} * kItems;
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) x[i] = 0.0f;  // lanes past the last expert keep zeros
  if (vector_loads) {
    if (first >= p.experts) return;
    alignas(16) Storage chunk[kItems];
#if defined(__CUDA_ARCH__)
    // Whole 16-, 8- or 4-byte words; the caller checked the alignment.
    constexpr int kBytes = kItems * int(sizeof(Storage));
    if constexpr (kBytes % 16 == 0) {
      const uint4* src = reinterpret_cast<const uint4*>(row + first);
MTK_ROUTER_UNROLL
      for (int w = 0; w < kBytes / 16; ++w) reinterpret_cast<uint4*>(chunk)[w] = src[w];
    } else if constexpr (kBytes % 8 == 0) {
      const uint2* src = reinterpret_cast<const uint2*>(row + first);
MTK_ROUTER_UNROLL
      for (int w = 0; w < kBytes / 8; ++w) reinterpret_cast<uint2*>(chunk)[w] = src[w];
    } else if constexpr (kBytes % 4 == 0) {
      const uint32_t* src = reinterpret_cast<const uint32_t*>(row + first);
MTK_ROUTER_UNROLL
      for (int w = 0; w < kBytes / 4; ++w) reinterpret_cast<uint32_t*>(chunk)[w] = src[w];
    } else {
MTK_ROUTER_UNROLL
      for (int i = 0; i < kItems; ++i) chunk[i] = row[first + i];
    }
#else
    std::memcpy(chunk, row + first, sizeof chunk);
#endif
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) x[i] = to_float(chunk[i], Logit{});
    return;
  }
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    if (first + i < p.experts) x[i] = to_float(row[(first + i) * p.logits_expert_stride], Logit{});
  }
}

// Butterfly all-reductions over the warp.
template <class Lanes>
MTK_ROUTER_HD uint32_t warp_max(Lanes& lanes, uint32_t value) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) {
    const uint32_t other = lanes.shuffle_xor(value, mask);
    value = other > value ? other : value;
  }
  return value;
}

template <class Lanes>
MTK_ROUTER_HD uint64_t warp_max(Lanes& lanes, uint64_t value) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) {
    const uint64_t other = uint64_t{lanes.shuffle_xor(uint32_t(value >> 32), mask)} << 32 |
                           lanes.shuffle_xor(uint32_t(value), mask);
    value = other > value ? other : value;
  }
  return value;
}

// Partners add each other's partial sums; a + b == b + a, so every lane ends with the same bits.
template <class Lanes>
MTK_ROUTER_HD float warp_sum(Lanes& lanes, float value) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) {
    value += float_from_bits(lanes.shuffle_xor(bits_from_float(value), mask));
  }
  return value;
}

template <class Lanes>
MTK_ROUTER_HD float warp_broadcast(Lanes& lanes, float value, int source_lane) {
  return float_from_bits(lanes.shuffle(bits_from_float(value), source_lane));
}

// The two highest keys of a multiset (first >= second); 0 where there are fewer.
struct TopTwo {
  uint32_t first = 0, second = 0;
  MTK_ROUTER_HD void add(uint32_t key) {
    if (key > first) {
      second = first;
      first = key;
    } else if (key > second) {
      second = key;
    }
  }
  // Merges a disjoint set's top two: the runner-up is the lower first or the higher second.
  MTK_ROUTER_HD void merge(uint32_t other_first, uint32_t other_second) {
    const uint32_t low_first = other_first < first ? other_first : first;
    const uint32_t high_second = other_second > second ? other_second : second;
    first = other_first > first ? other_first : first;
    second = low_first > high_second ? low_first : high_second;
  }
};

template <class Lanes>
MTK_ROUTER_HD TopTwo warp_top_two(Lanes& lanes, TopTwo top) {
  for (int mask = kWarpSize / 2; mask > 0; mask >>= 1) {
    const uint32_t other_first = lanes.shuffle_xor(top.first, mask);
    const uint32_t other_second = lanes.shuffle_xor(top.second, mask);
    top.merge(other_first, other_second);
  }
  return top;
}

// A lane's best rank below a threshold, among its items, with the value carried along.
template <int kItems>
MTK_ROUTER_HD void best_below(const uint64_t (&rank)[kItems], const float (&value)[kItems],
                              uint64_t threshold, uint64_t& best, float& best_value) {
  best = 0;
  best_value = 0.0f;
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    if (rank[i] < threshold && rank[i] > best) {
      best = rank[i];
      best_value = value[i];
    }
  }
}

// Selects the k best ranks of the warp (rank 0 never wins: k never exceeds the real candidates).
// Selection r lands in lane r % 32, slot r / 32, as (id, value); `on_select(value)` runs on every
// lane, in selection order, and returns what to store (so weights can be derived as they come).
template <int kItems, class Lanes, class OnSelect>
MTK_ROUTER_HD void select_top_k(Lanes& lanes, int64_t k, const uint64_t (&rank)[kItems],
                                const float (&value)[kItems], int32_t (&id_slot)[kItems],
                                float (&value_slot)[kItems], OnSelect&& on_select) {
  const int lane = lanes.lane();
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {  // slots past k stay unused, but defined
    id_slot[slot] = 0;
    value_slot[slot] = 0.0f;
  }
  uint64_t local;
  float local_value;
  best_below(rank, value, ~uint64_t{0}, local, local_value);
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {
    if (int64_t{slot} * kWarpSize >= k) break;
    for (int owner_lane = 0; owner_lane < kWarpSize; ++owner_lane) {
      if (int64_t{slot} * kWarpSize + owner_lane >= k) break;
      const uint64_t winner = warp_max(lanes, local);
      const int64_t expert = index_of(winner);
      const int source = int(expert / kItems);
      const float chosen = on_select(warp_broadcast(lanes, local_value, source));
      if (lane == owner_lane) {
        id_slot[slot] = int32_t(expert);
        value_slot[slot] = chosen;
      }
      // Only the winner's lane loses its best; everyone else's is still below the winner.
      if (lane == source) best_below(rank, value, winner, local, local_value);
    }
  }
}

// Writes the k selections held in the lanes' slots, weights derived by `weight_of`.
template <int kItems, class WeightOf>
MTK_ROUTER_HD void write_slots(const RouterProblem& p, int64_t token, int lane,
                               const int32_t (&id_slot)[kItems],
                               const float (&value_slot)[kItems], WeightOf&& weight_of) {
  float* weights = p.weights + token * p.weights_token_stride;
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {
    const int64_t r = int64_t{slot} * kWarpSize + lane;
    if (r >= p.k) break;
    weights[r * p.weights_k_stride] = weight_of(value_slot[slot]);
    if (p.index_dtype == MTK_INT32) {
      static_cast<int32_t*>(p.ids)[token * p.ids_token_stride + r * p.ids_k_stride] = id_slot[slot];
    } else {
      static_cast<int64_t*>(p.ids)[token * p.ids_token_stride + r * p.ids_k_stride] = id_slot[slot];
    }
  }
}

MTK_ROUTER_HD float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

// The plain path: no bias, no groups. Experts are ranked by the logits' own keys, so only the
// k selected scores (and S for unnormalised softmax) are ever computed.
template <class Logit, int kItems, class Lanes>
MTK_ROUTER_HD void route_plain(const RouterProblem& p, int64_t token, bool vector_loads,
                               Lanes& lanes) {
  const int lane = lanes.lane();
  float x[kItems];
  load_items<Logit, kItems>(p, token, lane, vector_loads, x);
  uint64_t rank[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    const int64_t e = int64_t{lane} * kItems + i;
    rank[i] = e < p.experts ? rank_of(key_of(x[i]), e) : 0;
  }
  // u of each selection, and their running sum in selection order (the same on every lane).
  float m = 0.0f, u_total = 0.0f;
  bool first = true;
  int32_t id_slot[kItems];
  float u_slot[kItems];
  select_top_k(lanes, p.k, rank, x, id_slot, u_slot, [&](float chosen_x) {
    if (first) m = chosen_x, first = false;  // the first selection is the largest logit
    const float u = p.scoring == MTK_SCORING_SOFTMAX   ? exp_f32(chosen_x - m)
                    : p.scoring == MTK_SCORING_SIGMOID ? sigmoid(chosen_x)
                                                       : chosen_x;
    u_total += u;
    return u;
  });
  float denominator = 1.0f;  // S where s = u / S
  if (p.renormalize) {
    denominator = u_total;
  } else if (p.scoring == MTK_SCORING_SOFTMAX) {
    float local = 0.0f;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (rank[i] != 0) local += exp_f32(x[i] - m);
    }
    denominator = warp_sum(lanes, local);
  }
  write_slots(p, token, lane, id_slot, u_slot,
              [&](float u) { return u / denominator * p.scale; });
}

// The general path: bias and/or groups. Selection runs on c = s + bias, inside the kept groups.
template <class Logit, int kItems, class Lanes>
MTK_ROUTER_HD void route_general(const RouterProblem& p, int64_t token, bool vector_loads,
                                 Lanes& lanes) {
  const int lane = lanes.lane();
  float u[kItems];  // logits first, then the weight numerators
  load_items<Logit, kItems>(p, token, lane, vector_loads, u);
  int valid = 0;  // items of this lane that are experts
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    if (int64_t{lane} * kItems + i < p.experts) valid = i + 1;
  }
  float total = 1.0f;  // S for softmax, so that s = u / total for every scoring
  if (p.scoring == MTK_SCORING_SOFTMAX) {
    uint32_t max_key = 0;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (i < valid && key_of(u[i]) > max_key) max_key = key_of(u[i]);
    }
    const float m = float_from_key(warp_max(lanes, max_key));
    float local = 0.0f;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (i < valid) local += u[i] = exp_f32(u[i] - m);
    }
    total = warp_sum(lanes, local);
  } else if (p.scoring == MTK_SCORING_SIGMOID) {
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) u[i] = sigmoid(u[i]);
  }
  uint32_t c_key[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    const int64_t e = int64_t{lane} * kItems + i;
    float c = u[i] / total;
    if (p.bias != nullptr && i < valid) c += p.bias[e * p.bias_stride];
    c_key[i] = i < valid ? key_of(c) : 0;
  }
  uint32_t eligible = (1u << valid) - 1u;  // bit i: item i may be selected
  if (p.n_group > 1) {
    const int64_t group_size = p.experts / p.n_group;
    // 32-bit division (E <= 512 here): 64-bit division is a long software routine on GPUs.
    int item_group[kItems];
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) item_group[i] = (lane * kItems + i) / int(group_size);
    // Group g's rank lands in lane g % 32, slot g / 32 (n_group <= E <= 32 * kItems), and its
    // score key in item_group_key of the items of group g.
    uint64_t group_rank[kItems];
    float no_value[kItems];
    uint32_t item_group_key[kItems];
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      group_rank[i] = 0;
      no_value[i] = 0.0f;
      item_group_key[i] = 0;
    }
MTK_ROUTER_UNROLL
    for (int slot = 0; slot < kItems; ++slot) {
      if (int64_t{slot} * kWarpSize >= p.n_group) break;
      for (int owner_lane = 0; owner_lane < kWarpSize; ++owner_lane) {
        const int64_t g = int64_t{slot} * kWarpSize + owner_lane;
        if (g >= p.n_group) break;
        TopTwo top;
MTK_ROUTER_UNROLL
        for (int i = 0; i < kItems; ++i) {
          if (i < valid && item_group[i] == g) top.add(c_key[i]);
        }
        top = warp_top_two(lanes, top);
        const float best = float_from_key(top.first);
        const float score = group_size == 1 ? best : best + float_from_key(top.second);
        const uint32_t key = key_of(score);
        if (lane == owner_lane) group_rank[slot] = rank_of(key, g);
MTK_ROUTER_UNROLL
        for (int i = 0; i < kItems; ++i) {
          if (item_group[i] == g) item_group_key[i] = key;
        }
      }
    }
    // The last kept group's rank: topk_group rounds of "best below the previous winner".
    uint64_t threshold = ~uint64_t{0};
    for (int64_t round = 0; round < p.topk_group; ++round) {
      uint64_t local;
      float unused;
      best_below(group_rank, no_value, threshold, local, unused);
      threshold = warp_max(lanes, local);
    }
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (i < valid && rank_of(item_group_key[i], item_group[i]) < threshold) {
        eligible &= ~(1u << i);
      }
    }
  }
  uint64_t rank[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    rank[i] = (eligible >> i) & 1u ? rank_of(c_key[i], int64_t{lane} * kItems + i) : 0;
  }
  float u_total = 0.0f;
  int32_t id_slot[kItems];
  float u_slot[kItems];
  select_top_k(lanes, p.k, rank, u, id_slot, u_slot, [&](float chosen_u) {
    u_total += chosen_u;
    return chosen_u;
  });
  const float denominator = p.renormalize ? u_total : total;
  write_slots(p, token, lane, id_slot, u_slot,
              [&](float chosen_u) { return chosen_u / denominator * p.scale; });
}

template <class Logit, int kItems, class Lanes>
MTK_ROUTER_HD void route_token(const RouterProblem& p, int64_t token, bool vector_loads,
                               Lanes& lanes) {
  if (p.bias == nullptr && p.n_group == 1) {
    route_plain<Logit, kItems>(p, token, vector_loads, lanes);
  } else {
    route_general<Logit, kItems>(p, token, vector_loads, lanes);
  }
}

// ---- Any number of experts ---------------------------------------------------------------
// Past 512 experts the scores do not fit in registers. The warp then re-reads the token's row
// (from L1/L2 after the first pass) in every step, lanes striding over the experts: the same
// semantics at the cost of about k + topk_group passes instead of one. Selection r is written at
// once (its id, and u into its weight), since k may exceed what registers hold; at the end each
// lane rescales the weights it wrote itself.

template <class Logit>
struct RowReader {
  const typename Logit::Storage* row;
  int64_t stride;
  MTK_ROUTER_HD float operator()(int64_t e) const { return to_float(row[e * stride], Logit{}); }
};

template <class Logit, class Lanes>
MTK_ROUTER_HD void route_streaming(const RouterProblem& p, int64_t token, Lanes& lanes) {
  const int lane = lanes.lane();
  const RowReader<Logit> x{
      static_cast<const typename Logit::Storage*>(p.logits) + token * p.logits_token_stride,
      p.logits_expert_stride};
  const bool plain = p.bias == nullptr && p.n_group == 1;
  // m and S of softmax; on the plain path m is the first selection's logit.
  float m = 0.0f, total = 1.0f;
  if (!plain && p.scoring == MTK_SCORING_SOFTMAX) {
    uint32_t max_key = 0;
    for (int64_t e = lane; e < p.experts; e += kWarpSize) {
      const uint32_t key = key_of(x(e));
      max_key = key > max_key ? key : max_key;
    }
    m = float_from_key(warp_max(lanes, max_key));
    float local = 0.0f;
    for (int64_t e = lane; e < p.experts; e += kWarpSize) local += exp_f32(x(e) - m);
    total = warp_sum(lanes, local);
  }
  auto u_of = [&](float xe) {
    return p.scoring == MTK_SCORING_SOFTMAX   ? exp_f32(xe - m)
           : p.scoring == MTK_SCORING_SIGMOID ? sigmoid(xe)
                                              : xe;
  };
  auto rank_at = [&](int64_t e) {
    const float xe = x(e);
    if (plain) return rank_of(key_of(xe), e);
    float c = u_of(xe) / total;
    if (p.bias != nullptr) c += p.bias[e * p.bias_stride];
    return rank_of(key_of(c), e);
  };
  const int64_t group_size = p.experts / p.n_group;
  auto group_rank = [&](int64_t g) {
    TopTwo top;
    for (int64_t e = g * group_size + lane; e < (g + 1) * group_size; e += kWarpSize) {
      top.add(uint32_t(rank_at(e) >> 32));
    }
    top = warp_top_two(lanes, top);
    const float score = group_size == 1 ? float_from_key(top.first)
                                        : float_from_key(top.first) + float_from_key(top.second);
    return rank_of(key_of(score), g);
  };
  uint64_t kept_floor = 0;  // groups ranked at least this are kept
  if (p.n_group > 1) {
    uint64_t threshold = ~uint64_t{0};
    for (int64_t round = 0; round < p.topk_group; ++round) {
      uint64_t best = 0;
      for (int64_t g = 0; g < p.n_group; ++g) {
        const uint64_t rank = group_rank(g);  // the same on every lane
        if (rank < threshold && rank > best) best = rank;
      }
      threshold = best;
    }
    kept_floor = threshold;
  }
  float* weights = p.weights + token * p.weights_token_stride;
  float u_total = 0.0f;
  uint64_t threshold = ~uint64_t{0};
  for (int64_t r = 0; r < p.k; ++r) {
    uint64_t local = 0;
    float local_x = 0.0f;
    for (int64_t g = 0; g < p.n_group; ++g) {
      if (p.n_group > 1 && group_rank(g) < kept_floor) continue;
      for (int64_t e = g * group_size + lane; e < (g + 1) * group_size; e += kWarpSize) {
        const uint64_t rank = rank_at(e);
        if (rank < threshold && rank > local) {
          local = rank;
          local_x = x(e);
        }
      }
    }
    threshold = warp_max(lanes, local);
    const int64_t expert = index_of(threshold);
    const float chosen_x =
        warp_broadcast(lanes, local_x, int(expert % group_size % kWarpSize));
    if (plain && r == 0) m = chosen_x;  // the largest logit
    const float u = u_of(chosen_x);
    u_total += u;
    if (lane == r % kWarpSize) {
      weights[r * p.weights_k_stride] = u;
      if (p.index_dtype == MTK_INT32) {
        static_cast<int32_t*>(p.ids)[token * p.ids_token_stride + r * p.ids_k_stride] =
            int32_t(expert);
      } else {
        static_cast<int64_t*>(p.ids)[token * p.ids_token_stride + r * p.ids_k_stride] = expert;
      }
    }
  }
  float denominator = total;
  if (p.renormalize) {
    denominator = u_total;
  } else if (plain && p.scoring == MTK_SCORING_SOFTMAX) {
    float local = 0.0f;
    for (int64_t e = lane; e < p.experts; e += kWarpSize) local += exp_f32(x(e) - m);
    denominator = warp_sum(lanes, local);
  }
  for (int64_t r = lane; r < p.k; r += kWarpSize) {
    float& w = weights[r * p.weights_k_stride];
    w = w / denominator * p.scale;
  }
}

// ---- Dispatch shared by the kernel launch and the host emulation ---------------------------

// Experts per lane of the register routine for E experts; 0 where E needs the streaming one.
inline int items_per_lane(int64_t experts) {
  for (int items = 1; items <= kMaxItems; items *= 2) {
    if (experts <= int64_t{kWarpSize} * items) return items;
  }
  return 0;
}

// Whether every lane's chunk of every row can be read as whole aligned words of `vector_bytes`.
inline bool can_load_vectors(const RouterProblem& p, int items, size_t element_bytes) {
  const size_t chunk = size_t(items) * element_bytes;
  size_t word = 16;
  while (word > 1 && chunk % word != 0) word /= 2;
  const int64_t row_bytes = p.logits_token_stride * int64_t(element_bytes);
  return p.logits_expert_stride == 1 && p.experts % items == 0 &&
         reinterpret_cast<uintptr_t>(p.logits) % word == 0 && row_bytes % int64_t(word) == 0;
}

}  // namespace mtk::cuda_router
