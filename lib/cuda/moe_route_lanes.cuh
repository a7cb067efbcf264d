// The CUDA router's scalar helpers and group collectives (the per-token routines are in
// moe_route_warp.cuh, which says how a group of lanes routes a token).
//
// The routines are __host__ __device__ templates over `Lanes`, the group's collective operations:
// on the GPU they are shuffles and redux (GroupLanes, below); the host tests run the very
// same code with 32 fibers playing the lanes (tests/router/warp_emulation.cpp), so the selection
// logic is checked on machines without a GPU.
//
// Lanes provides `static constexpr int kSize` (lanes per token: 1, 2, ..., 32) and five
// primitives over the aligned group of kSize lanes that routes this lane's token, called by all
// 32 lanes of the warp together (every group of a warp runs the same steps): int lane() (0 ..
// kSize - 1); uint32_t shuffle_xor(uint32_t value, int lane_mask) (lane_mask < kSize);
// uint32_t shuffle(uint32_t value, int source_lane); uint32_t reduce_max(uint32_t value);
// uint32_t ballot(bool predicate) (bit l: lane l's predicate). Every reduction below gives all
// lanes of the group bit-identical results.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/float_formats.hpp"

// Unrolling keeps per-lane arrays in registers on the device; host compilers need no hint (and
// GCC, nvcc's host compiler, warns about the pragma).
#if defined(__CUDA_ARCH__)
#define MTK_ROUTER_UNROLL _Pragma("unroll")
#define MTK_ROUTER_NO_UNROLL _Pragma("unroll 1")
#else
#define MTK_ROUTER_UNROLL
#define MTK_ROUTER_NO_UNROLL
#endif

namespace mtk::cuda_router {

constexpr int kWarpSize = 32;

// Logit element types, by storage. The plain path ranks experts by the keys of the stored bits
// (a 16-bit float's key orders exactly as the key of its float32 value), packed with the expert
// into `PlainRank`: 32 bits for 16-bit logits, so a selection round reduces one word.
struct F32 {
  using Storage = float;
  using PlainRank = uint64_t;
};
struct F16 {
  using Storage = uint16_t;
  using PlainRank = uint32_t;
};
struct BF16 {
  using Storage = uint16_t;
  using PlainRank = uint32_t;
};

MTK_HOST_DEVICE float to_float(float v, F32) { return v; }
MTK_HOST_DEVICE float to_float(uint16_t bits, BF16) { return bf16_to_f32(bits); }
MTK_HOST_DEVICE float to_float(uint16_t bits, F16) { return f16_to_f32(bits); }

// The stored bits' keys, in 32-bit words (16-bit arithmetic would only add conversions).
MTK_HOST_DEVICE uint32_t storage_key(float v, F32) { return key_from_f32(v); }
MTK_HOST_DEVICE uint32_t storage_key(uint16_t bits, F16) {
  return float_bits_to_key<uint32_t>(bits, kF16Sign, kF16Exponent);
}
MTK_HOST_DEVICE uint32_t storage_key(uint16_t bits, BF16) {
  return float_bits_to_key<uint32_t>(bits, kF16Sign, kBF16Exponent);
}

MTK_HOST_DEVICE float exp_f32(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

MTK_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

// Key and index in one unsigned word, the key in the high half: integer order is the router's
// order (key descending, then index ascending). One index field value is reserved, so no real
// rank is ~0, and none is 0 (no key is 0 either): that leaves 0 for "nothing" and ~0 for "above
// everything".
template <class Rank>
using RankPacking = KeyIndexPacking<Rank, int(sizeof(Rank)) * 4, 1>;

template <class Rank>
MTK_HOST_DEVICE Rank make_rank(uint32_t key, int64_t index) {
  return RankPacking<Rank>::pack(key, uint32_t(index));
}
template <class Rank>
MTK_HOST_DEVICE int64_t rank_index(Rank rank) {
  return int64_t(RankPacking<Rank>::index(rank));
}
MTK_HOST_DEVICE uint64_t rank_of(uint32_t key, int64_t index) {
  return make_rank<uint64_t>(key, index);
}
MTK_HOST_DEVICE uint32_t rank_key(uint64_t rank) { return uint32_t(RankPacking<uint64_t>::key(rank)); }

// ---- Group collectives ---------------------------------------------------------------------

template <class Lanes>
MTK_HOST_DEVICE uint32_t group_max(Lanes& lanes, uint32_t value) {
  return lanes.reduce_max(value);
}

// The high words first, then the low words of the lanes that hold the highest high word.
template <class Lanes>
MTK_HOST_DEVICE uint64_t group_max(Lanes& lanes, uint64_t value) {
  const uint32_t high = lanes.reduce_max(uint32_t(value >> 32));
  const uint32_t low = lanes.reduce_max(uint32_t(value >> 32) == high ? uint32_t(value) : 0u);
  return uint64_t{high} << 32 | low;
}

// Partners add each other's partial sums; a + b == b + a, so every lane ends with the same bits.
template <class Lanes>
MTK_HOST_DEVICE float group_sum(Lanes& lanes, float value) {
  for (int mask = Lanes::kSize / 2; mask > 0; mask >>= 1) {
    value += float_from_bits(lanes.shuffle_xor(bits_from_float(value), mask));
  }
  return value;
}

MTK_HOST_DEVICE int lowest_set_bit(uint32_t mask) {
#if defined(__CUDA_ARCH__)
  return __ffs(mask) - 1;
#else
  return __builtin_ctz(mask);
#endif
}

// The group maximum of ranks laid out in lane order (wherever two lanes hold ranks of one key,
// the lower lane holds the higher rank, as when lane l holds experts [l * kItems, (l + 1) *
// kItems)), and whether this lane holds it. For 64-bit ranks in a group narrower than a warp,
// where each maximum is a butterfly, the lowest lane holding the highest key holds the maximum:
// a vote finds it instead of a second butterfly over the low words, and the low word comes by
// one shuffle that the holder's `holds` does not wait for (bench/gpu/warp_collectives: 16
// lanes, 4 selections 1138 cycles against 1292). A whole warp's redux.sync makes the second
// maximum cheaper than the vote (710 cycles against 818).
template <class Lanes>
MTK_HOST_DEVICE uint32_t lane_ordered_max(Lanes& lanes, uint32_t rank, bool& holds) {
  const uint32_t best = lanes.reduce_max(rank);
  holds = rank == best;
  return best;
}

template <class Lanes>
MTK_HOST_DEVICE uint64_t lane_ordered_max(Lanes& lanes, uint64_t rank, bool& holds) {
  if constexpr (Lanes::kSize == kWarpSize) {
    const uint64_t best = group_max(lanes, rank);
    holds = rank == best;
    return best;
  } else {
    const uint32_t high = lanes.reduce_max(uint32_t(rank >> 32));
    const int holder = lowest_set_bit(lanes.ballot(uint32_t(rank >> 32) == high));
    holds = lanes.lane() == holder;
    return uint64_t{high} << 32 | lanes.shuffle(uint32_t(rank), holder);
  }
}

template <class Lanes>
MTK_HOST_DEVICE float group_broadcast(Lanes& lanes, float value, int source_lane) {
  return float_from_bits(lanes.shuffle(bits_from_float(value), source_lane));
}

// A compile-time index that converts to int on host and device.
template <int I>
struct Index {
  static constexpr int value = I;
  MTK_HOST_DEVICE constexpr operator int() const { return I; }
};

// Calls f(Index<i>{}) for i = 0 .. N - 1: indices stay compile-time constants whatever the
// unroller decides, so arrays stay in registers.
template <int N, int I = 0, class F>
MTK_HOST_DEVICE void for_each_index(F&& f) {
  if constexpr (I < N) {
    f(Index<I>{});
    for_each_index<N, I + 1>(f);
  }
}

// v[i], or 0 for i outside the array: a lane's item picked by a run-time index without sending
// the array to local memory.
template <int N>
MTK_HOST_DEVICE float item_at(const float (&v)[N], int i) {
  float picked = 0.0f;
  for_each_index<N>([&](auto j) {
    if (j == i) picked = v[j];
  });
  return picked;
}

MTK_HOST_DEVICE uint32_t max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }
MTK_HOST_DEVICE uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

// The two highest keys of a multiset (first >= second); 0 where there are fewer.
struct TopTwo {
  uint32_t first = 0, second = 0;
  // Branch-free: a new first pushes the old one down, anything else competes for second.
  MTK_HOST_DEVICE void add(uint32_t key) {
    second = max_u32(second, min_u32(first, key));
    first = max_u32(first, key);
  }
  // Merges a disjoint set's top two: the runner-up is the lower first or the higher second.
  MTK_HOST_DEVICE void merge(uint32_t other_first, uint32_t other_second) {
    second = max_u32(min_u32(first, other_first), max_u32(second, other_second));
    first = max_u32(first, other_first);
  }
};

// Merges the top twos of the aligned runs of `span` lanes (a power of two up to kSize).
template <class Lanes>
MTK_HOST_DEVICE TopTwo top_two_over(Lanes& lanes, TopTwo top, int span) {
  for (int mask = span / 2; mask > 0; mask >>= 1) {
    const uint32_t other_first = lanes.shuffle_xor(top.first, mask);
    const uint32_t other_second = lanes.shuffle_xor(top.second, mask);
    top.merge(other_first, other_second);
  }
  return top;
}

// A group's score from its top two selection keys: c_first + c_second (c_first alone for
// single-expert groups).
MTK_HOST_DEVICE uint32_t group_score_key(const TopTwo& top, int64_t group_size) {
  const float best = float_from_key(top.first);
  return key_from_f32(group_size == 1 ? best : best + float_from_key(top.second));
}

#if defined(__CUDACC__)
// The GPU's Lanes: the collectives over the aligned group of kLanes lanes that routes this
// thread's token. Every lane of a warp runs every collective (route_token keeps groups past the
// last token in step), so the full mask is always right; it is also what keeps them cheap: a
// redux.sync whose mask differs between the groups of a warp is serialised per distinct mask, so
// groups narrower than a warp take their maximum by a butterfly, which never leaves the group.
template <int kLanes>
struct GroupLanes {
  static constexpr int kSize = kLanes;
  static constexpr unsigned kWholeWarp = 0xffffffffu;

  __device__ __forceinline__ int lane() const { return int(threadIdx.x) % kLanes; }
  __device__ __forceinline__ uint32_t shuffle_xor(uint32_t value, int lane_mask) const {
    return __shfl_xor_sync(kWholeWarp, value, lane_mask, kLanes);
  }
  __device__ __forceinline__ uint32_t shuffle(uint32_t value, int source_lane) const {
    return __shfl_sync(kWholeWarp, value, source_lane, kLanes);
  }
  __device__ __forceinline__ uint32_t ballot(bool predicate) const {
    const uint32_t votes = __ballot_sync(kWholeWarp, predicate);
    if constexpr (kLanes == kWarpSize) {
      return votes;
    } else {
      return (votes >> (int(threadIdx.x) % kWarpSize / kLanes * kLanes)) & ((1u << kLanes) - 1u);
    }
  }
  __device__ __forceinline__ uint32_t reduce_max(uint32_t value) const {
    if constexpr (kLanes == kWarpSize) {
      return __reduce_max_sync(kWholeWarp, value);
    } else {
#pragma unroll
      for (int mask = kLanes / 2; mask > 0; mask >>= 1) {
        value = max(value, shuffle_xor(value, mask));
      }
      return value;
    }
  }
};
#endif

}  // namespace mtk::cuda_router
