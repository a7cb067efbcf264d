// The CUDA router's per-token routines (lib/core/router_semantics.md gives the semantics).
//
// Up to 512 experts a token's scores live in registers. A group of lanes routes one token: a
// whole warp for E > 128, a power-of-two part of one below that, so that short rows share a warp
// and the k selection rounds are paid once per warp, not once per token. Lane l of a group holds
// experts [l * kItems, (l + 1) * kItems), so a contiguous row is one coalesced, vectorised read.
// Each lane packs (key, expert) into one unsigned rank and sorts its ranks once. A whole warp then
// takes k rounds of one group-wide maximum, after which only the winner's lane drops its best; a
// narrower group merges its lanes' sorted lists in one butterfly instead (select_best says why).
// Weights are derived at the end from the selected logits, re-read from the row (L1-resident by
// then), except on the biased or grouped path of small launches, which has every numerator
// already and fetches each selection's from the lane that holds it (RegisterPlan says why).
// Past 512 experts, route_streaming re-reads the row for each step, one warp per token.
//
// moe_route_lanes.cuh holds the scalar helpers and the group collectives (`Lanes`, which the
// host tests emulate with fibers), moe_route_select.cuh the selection rounds and merges; this
// file the register plan and the routines themselves.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/problem.hpp"
#include "cuda/moe_route_lanes.cuh"
#include "cuda/moe_route_select.cuh"

namespace mtk::cuda_router {

// The widest token the register routines take.
constexpr int64_t kMaxRegisterExperts = 512;

// ---- Register layout, chosen on the host for the launch and the emulation alike -------------

// kItems experts per lane, kLanes lanes per token.
template <int kItemsValue, int kLanesValue>
struct Layout {
  static constexpr int kItems = kItemsValue;
  static constexpr int kLanes = kLanesValue;
};

// Eight experts per lane (sixteen past 256 experts) and as few lanes as hold the row: the
// sorting network and the per-round shift stay short, and rows of up to 128 experts share a
// warp. Calls `visit(Layout<...>{})`; returns false for rows that need route_streaming.
template <class Visit>
bool visit_register_layout(int64_t experts, Visit&& visit) {
  if (experts > kMaxRegisterExperts) return false;
  if (experts > 256) {
    visit(Layout<16, 32>{});
  } else if (experts > 128) {
    visit(Layout<8, 32>{});
  } else if (experts > 64) {
    visit(Layout<8, 16>{});
  } else if (experts > 32) {
    visit(Layout<8, 8>{});
  } else if (experts > 16) {
    visit(Layout<8, 4>{});
  } else if (experts > 8) {
    visit(Layout<8, 2>{});
  } else {
    visit(Layout<8, 1>{});
  }
  return true;
}

// What the register routines learn from the whole problem once, on the host.
struct RegisterPlan {
  bool logit_vectors;  // every lane's chunk of every row may be read as whole aligned words
  bool bias_vectors;   // and of the bias
  // Groups that cover whole lanes (a power of two of them, up to a token's lanes): log2 of lanes
  // per group, so a group's top two is a short butterfly. -1: groups straddle lanes or share
  // one, and take the general per-group loop.
  int group_lane_shift;
  int group_size;  // experts per group (E / n_group, at most 512)
  // The biased or grouped path takes each selection's numerator from the lane that holds it,
  // during the rounds: the shorter path while the launch's warps leave schedulers idle (its
  // latency is the call's). With more warps than schedulers the instructions decide, and the
  // selections are re-read and re-scored after the rounds instead, which issues fewer. Chosen
  // at compile time (visit_register_path).
  bool numerators_in_rounds;
};

constexpr int64_t kSchedulersPerSm = 4;

// Vector loads are 16-byte words: every layout's chunk (8 or 16 items of 2 or 4 bytes) is a
// whole number of them.
constexpr int64_t kVectorBytes = 16;

inline RegisterPlan plan_registers(const RouterProblem& p, int items, int lanes,
                                   size_t logit_bytes, int sm_count) {
  RegisterPlan plan{};
  const int64_t warps = (p.tokens * lanes + kWarpSize - 1) / kWarpSize;
  plan.numerators_in_rounds = warps <= int64_t(sm_count) * kSchedulersPerSm;
  const int64_t row_bytes = p.logits_token_stride * int64_t(logit_bytes);
  plan.logit_vectors = p.logits_expert_stride == 1 &&
                       reinterpret_cast<uintptr_t>(p.logits) % kVectorBytes == 0 &&
                       row_bytes % kVectorBytes == 0;
  plan.bias_vectors = p.bias != nullptr && p.bias_stride == 1 &&
                      reinterpret_cast<uintptr_t>(p.bias) % kVectorBytes == 0;
  plan.group_size = int(p.experts / p.n_group);
  plan.group_lane_shift = -1;
  if (p.n_group > 1 && plan.group_size % items == 0) {
    const int lanes_per_group = plan.group_size / items;
    for (int shift = 0; (1 << shift) <= lanes; ++shift) {
      if ((1 << shift) == lanes_per_group) plan.group_lane_shift = shift;
    }
  }
  return plan;
}

MTK_HOST_DEVICE bool is_plain(const RouterProblem& p) { return p.bias == nullptr && p.n_group == 1; }

// ---- Per-lane building blocks ---------------------------------------------------------------
// On the register path E <= 512, so experts, k and positions are plain ints.

// Where a lane's chunk of a token lies: experts [first, first + valid) of the row.
struct Chunk {
  int first;  // lane * kItems
  int valid;  // how many of the lane's kItems items are experts (0 past the last one)
};

template <int kItems, class Lanes>
MTK_HOST_DEVICE Chunk chunk_of(const RouterProblem& p, Lanes& lanes) {
  const int first = lanes.lane() * kItems;
  const int experts = int(p.experts);
  return {first, first >= experts ? 0 : experts - first < kItems ? experts - first : kItems};
}

// out[i] = row[(first + i) * stride] for the chunk's experts; the other items keep their value.
// With `vectors` (stride 1, row aligned to kVectorBytes) a full chunk is read as 16-byte words.
// `out` must be 16-byte aligned.
template <int kItems, class T>
MTK_HOST_DEVICE void load_chunk(const T* row, Chunk chunk, int64_t stride, bool vectors,
                              T (&out)[kItems]) {
  constexpr int kBytes = kItems * int(sizeof(T));
  static_assert(kBytes % kVectorBytes == 0, "a chunk is whole 16-byte words");
  if (vectors && chunk.valid == kItems) {
#if defined(__CUDA_ARCH__)
    const uint4* src = reinterpret_cast<const uint4*>(row + chunk.first);
MTK_ROUTER_UNROLL
    for (int w = 0; w < kBytes / 16; ++w) reinterpret_cast<uint4*>(out)[w] = src[w];
#else
    std::memcpy(out, row + chunk.first, sizeof out);
#endif
    return;
  }
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    if (i < chunk.valid) out[i] = row[(chunk.first + i) * stride];
  }
}

// u of a logit: the weight numerator (m: softmax's largest logit).
MTK_HOST_DEVICE float numerator(mtk_scoring scoring, float x, float m) {
  return scoring == MTK_SCORING_SOFTMAX   ? exp_f32(x - m)
         : scoring == MTK_SCORING_SIGMOID ? sigmoid(x)
                                          : x;
}

template <class Logit>
MTK_HOST_DEVICE const typename Logit::Storage* logits_row(const RouterProblem& p, int64_t token) {
  return static_cast<const typename Logit::Storage*>(p.logits) + token * p.logits_token_stride;
}

// The selections this lane holds: slot s is selection s * kSize + lane, for those below k.
template <class Lanes>
MTK_HOST_DEVICE bool selections_held(Lanes& lanes, int slot, int k) {
  return slot * Lanes::kSize + lanes.lane() < k;
}

// The logits of the selections this lane holds (0 in the other slots), re-read from the row.
template <class Logit, int kItems, class Lanes>
MTK_HOST_DEVICE void chosen_logits(const RouterProblem& p, const typename Logit::Storage* row,
                                 Lanes& lanes, int k, const int (&chosen)[kItems],
                                 float (&x)[kItems]) {
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) x[slot] = 0.0f;
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems && selections_held(lanes, slot, k); ++slot) {
    x[slot] = to_float(row[chosen[slot] * p.logits_expert_stride], Logit{});
  }
}

// u of the selections this lane holds (0 in the other slots).
template <int kItems, class Lanes>
MTK_HOST_DEVICE void chosen_numerators(mtk_scoring scoring, Lanes& lanes, int k,
                                     const float (&x)[kItems], float m, float (&u)[kItems]) {
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) u[slot] = 0.0f;
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems && selections_held(lanes, slot, k); ++slot) {
    u[slot] = numerator(scoring, x[slot], m);
  }
}

// U = u_0 + u_1 + ... + u_{k-1}, left to right, on every lane of the group.
template <int kItems, class Lanes>
MTK_HOST_DEVICE float sum_in_selection_order(Lanes& lanes, int k, const float (&u)[kItems]) {
  constexpr int kLanes = Lanes::kSize;
  float total = 0.0f;
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {
    if (slot * kLanes >= k) break;
    for (int owner = 0; owner < kLanes && slot * kLanes + owner < k; ++owner) {
      total += group_broadcast(lanes, u[slot], owner);
    }
  }
  return total;
}

template <int kItems, class Lanes>
MTK_HOST_DEVICE void write_selections(const RouterProblem& p, int64_t token, Lanes& lanes, int k,
                                    const int (&chosen)[kItems], const float (&u)[kItems],
                                    float denominator) {
  float* weights = p.weights + token * p.weights_token_stride;
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems && selections_held(lanes, slot, k); ++slot) {
    const int r = slot * Lanes::kSize + lanes.lane();
    weights[r * p.weights_k_stride] = u[slot] / denominator * p.scale;
    const int64_t at = token * p.ids_token_stride + r * p.ids_k_stride;
    if (p.index_dtype == MTK_INT32) {
      static_cast<int32_t*>(p.ids)[at] = chosen[slot];
    } else {
      static_cast<int64_t*>(p.ids)[at] = chosen[slot];
    }
  }
}

// ---- The register routines ----------------------------------------------------------------

// The plain path: no bias, no groups. Experts are ranked by the logits' own keys (every scoring
// is monotone), so only the k selected numerators (and S for unnormalised softmax) are computed.
template <class Logit, int kItems, class Lanes>
MTK_HOST_DEVICE void route_plain(const RouterProblem& p, int64_t token, bool owns_token,
                               const RegisterPlan& plan, Lanes& lanes) {
  using Storage = typename Logit::Storage;
  using Rank = typename Logit::PlainRank;
  const int k = int(p.k);
  const Chunk chunk = chunk_of<kItems>(p, lanes);
  const Storage* row = logits_row<Logit>(p, token);
  alignas(16) Storage raw[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) raw[i] = Storage{0};
  load_chunk(row, chunk, p.logits_expert_stride, plan.logit_vectors, raw);
  // Items past the row's last expert rank 0, below every expert.
  Rank rank[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    rank[i] = i < chunk.valid ? make_rank<Rank>(storage_key(raw[i], Logit{}), chunk.first + i)
                              : Rank(0);
  }
  sort_descending(rank);
  int chosen[kItems];
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) chosen[slot] = 0;
  select_best(lanes, k, rank, keep_experts(lanes, chosen));

  float x[kItems];
  chosen_logits<Logit>(p, row, lanes, k, chosen, x);
  // Selection 0, in lane 0, is the largest logit (or a NaN): softmax's m.
  const float m = p.scoring == MTK_SCORING_SOFTMAX ? group_broadcast(lanes, x[0], 0) : 0.0f;
  float u[kItems];
  chosen_numerators(p.scoring, lanes, k, x, m, u);
  float denominator = 1.0f;  // S where s = u / S
  if (p.renormalize) {
    denominator = sum_in_selection_order(lanes, k, u);
  } else if (p.scoring == MTK_SCORING_SOFTMAX) {
    // S needs every logit: read the chunk again (from L1) rather than hold it through the rounds.
    load_chunk(row, chunk, p.logits_expert_stride, plan.logit_vectors, raw);
    float local = 0.0f;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (i < chunk.valid) local += exp_f32(to_float(raw[i], Logit{}) - m);
    }
    denominator = group_sum(lanes, local);
  }
  if (owns_token) write_selections(p, token, lanes, k, chosen, u, denominator);
}

// Clears `eligible` for lanes whose group is not among the topk_group best, where each group
// covers 2^shift whole lanes: a group's top two is a butterfly over its lanes. Every lane then
// reads each group's score from the group's first lane and counts the groups ranked above its
// own (score descending, then group ascending): n_group independent shuffles, where topk_group
// rounds of a 64-bit group maximum each waited for the last (DeepSeek-V3 routing of one token:
// 2.79 against 2.97 us in `peers_bench`). Lanes past the last expert form whole groups of their
// own, which no count includes and which hold no eligible item.
template <int kItems, class Lanes>
MTK_HOST_DEVICE void keep_lane_aligned_groups(const RouterProblem& p, const RegisterPlan& plan,
                                            Lanes& lanes, Chunk chunk,
                                            const uint32_t (&c_key)[kItems],
                                            uint32_t& eligible) {
  TopTwo top;
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    if (i < chunk.valid) top.add(c_key[i]);
  }
  top = top_two_over(lanes, top, 1 << plan.group_lane_shift);
  const int group = lanes.lane() >> plan.group_lane_shift;
  const uint32_t score = chunk.valid > 0 ? group_score_key(top, plan.group_size) : 0u;
  int above = 0;
  const int n_group = int(p.n_group);
#if defined(__CUDA_ARCH__)
#pragma unroll 8
#endif
  for (int g = 0; g < n_group; ++g) {
    const uint32_t other = lanes.shuffle(score, g << plan.group_lane_shift);
    above += (other > score || (other == score && g < group)) ? 1 : 0;
  }
  if (above >= int(p.topk_group)) eligible = 0;
}

// The same for any grouping: groups one at a time, each one's top two reduced over the token's
// lanes. Group g's rank lands in lane g % kSize, slot g / kSize (n_group <= E <= kSize * kItems).
template <int kItems, class Lanes>
MTK_HOST_DEVICE void keep_any_groups(const RouterProblem& p, const RegisterPlan& plan,
                                   Lanes& lanes, Chunk chunk, const uint32_t (&c_key)[kItems],
                                   uint32_t& eligible) {
  constexpr int kLanes = Lanes::kSize;
  const int lane = lanes.lane();
  const int n_group = int(p.n_group);
  int item_group[kItems];
  uint64_t group_rank[kItems];
  uint32_t item_group_key[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    item_group[i] = (chunk.first + i) / plan.group_size;
    group_rank[i] = 0;
    item_group_key[i] = 0;
  }
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {
    if (slot * kLanes >= n_group) break;
    for (int owner = 0; owner < kLanes && slot * kLanes + owner < n_group; ++owner) {
      const int g = slot * kLanes + owner;
      TopTwo top;
MTK_ROUTER_UNROLL
      for (int i = 0; i < kItems; ++i) {
        if (i < chunk.valid && item_group[i] == g) top.add(c_key[i]);
      }
      top = top_two_over(lanes, top, kLanes);
      const uint32_t key = group_score_key(top, plan.group_size);
      if (lane == owner) group_rank[slot] = rank_of(key, g);
MTK_ROUTER_UNROLL
      for (int i = 0; i < kItems; ++i) {
        if (item_group[i] == g) item_group_key[i] = key;
      }
    }
  }
  // The last kept group's rank: topk_group rounds of "best below the previous winner".
  uint64_t threshold = ~uint64_t{0};
  for (int round = 0; round < int(p.topk_group); ++round) {
    uint64_t local = 0;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (group_rank[i] < threshold && group_rank[i] > local) local = group_rank[i];
    }
    threshold = group_max(lanes, local);
  }
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    if (i < chunk.valid && rank_of(item_group_key[i], item_group[i]) < threshold) {
      eligible &= ~(1u << i);
    }
  }
}

// The general path: bias and/or groups. Selection runs on c = s + bias, inside the kept groups.
template <class Logit, int kItems, bool kNumeratorsInRounds, class Lanes>
MTK_HOST_DEVICE void route_general(const RouterProblem& p, int64_t token, bool owns_token,
                                 const RegisterPlan& plan, Lanes& lanes) {
  using Storage = typename Logit::Storage;
  const int k = int(p.k);
  const Chunk chunk = chunk_of<kItems>(p, lanes);
  const Storage* row = logits_row<Logit>(p, token);
  float s[kItems];  // the scores s of router_semantics.md, then c = s + bias
  float u[kItems];  // the weight numerators u
  // The bias is read together with the logits, before any score needs them: read after the
  // scores, its load would wait for the logits' load and the scoring to finish.
  alignas(16) float bias[kItems];
  {
    alignas(16) Storage raw[kItems];
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) raw[i] = Storage{0};
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) bias[i] = 0.0f;
    load_chunk(row, chunk, p.logits_expert_stride, plan.logit_vectors, raw);
    if (p.bias != nullptr) load_chunk(p.bias, chunk, p.bias_stride, plan.bias_vectors, bias);
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) s[i] = to_float(raw[i], Logit{});
  }
  float m = 0.0f, total = 1.0f;  // softmax's largest logit and S
  if (p.scoring == MTK_SCORING_SOFTMAX) {
    uint32_t max_key = 0;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      if (i < chunk.valid && key_from_f32(s[i]) > max_key) max_key = key_from_f32(s[i]);
    }
    m = float_from_key(group_max(lanes, max_key));
    float local = 0.0f;
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      u[i] = i < chunk.valid ? exp_f32(s[i] - m) : 0.0f;
      local += u[i];
    }
    total = group_sum(lanes, local);
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) s[i] = u[i] / total;
  } else if (p.scoring == MTK_SCORING_SIGMOID) {
    // sigmoid() item by item, but every exponential first: a division ends in a branch to its
    // slow path, which the compiler does not schedule across, so in one loop each item's
    // exponential waited for the previous item's division (DeepSeek-V3 routing of one token:
    // 2.97 against 3.11 us in `peers_bench`).
    float e[kItems];
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) e[i] = 1.0f + exp_f32(-s[i]);
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) {
      s[i] = 1.0f / e[i];
      u[i] = s[i];
    }
  } else {
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) u[i] = s[i];
  }
  if (p.bias != nullptr) {
MTK_ROUTER_UNROLL
    for (int i = 0; i < kItems; ++i) s[i] += bias[i];
  }
  uint32_t c_key[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) c_key[i] = key_from_f32(s[i]);
  uint32_t eligible = (1u << chunk.valid) - 1u;  // bit i: item i may be selected
  if (p.n_group > 1) {
    if (plan.group_lane_shift >= 0) {
      keep_lane_aligned_groups(p, plan, lanes, chunk, c_key, eligible);
    } else {
      keep_any_groups(p, plan, lanes, chunk, c_key, eligible);
    }
  }
  uint64_t rank[kItems];
MTK_ROUTER_UNROLL
  for (int i = 0; i < kItems; ++i) {
    rank[i] = (eligible >> i) & 1u ? rank_of(c_key[i], chunk.first + i) : 0;
  }
  sort_descending(rank);
  int chosen[kItems];
  float chosen_u[kItems];
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {
    chosen[slot] = 0;
    chosen_u[slot] = 0.0f;
  }
  float denominator = total;
  if constexpr (kNumeratorsInRounds) {
    // Each selection's numerator comes from the lane that holds its expert, a shuffle that runs
    // beside the next round, and U is summed in selection order as the selections come.
    float selected_total = 0.0f;
    const int lane = lanes.lane();
    select_best(lanes, k, rank, [&](int slot, int owner, uint64_t winner) {
      const int expert = int(rank_index(winner));
      const float numerator = group_broadcast(lanes, item_at(u, expert - chunk.first),
                                              expert / kItems);
      selected_total += numerator;
      if (lane == owner) {
        chosen[slot] = expert;
        chosen_u[slot] = numerator;
      }
    });
    if (p.renormalize) denominator = selected_total;
  } else {
    select_best(lanes, k, rank, keep_experts(lanes, chosen));
    float x[kItems];
    chosen_logits<Logit>(p, row, lanes, k, chosen, x);
    chosen_numerators(p.scoring, lanes, k, x, m, chosen_u);
    if (p.renormalize) denominator = sum_in_selection_order(lanes, k, chosen_u);
  }
  if (owns_token) write_selections(p, token, lanes, k, chosen, chosen_u, denominator);
}

// The register routine a kernel runs: the plain path, or the general one with its numerators
// re-read after the rounds or fetched during them (RegisterPlan::numerators_in_rounds). A
// compile-time choice: one kernel holding both general ways needs more registers, and the lower
// occupancy cost DeepSeek-V3 routing of 4096 and 16384 tokens 4-5% (bench/peers/run.sh).
enum class RegisterPath { kPlain, kRescored, kNumeratorsInRounds };

template <RegisterPath kPath>
struct PathConstant {
  static constexpr RegisterPath value = kPath;
};

// Calls visit(PathConstant<path>{}) with the path for this problem and plan.
template <class Visit>
void visit_register_path(const RouterProblem& p, const RegisterPlan& plan, Visit&& visit) {
  if (is_plain(p)) {
    visit(PathConstant<RegisterPath::kPlain>{});
  } else if (plan.numerators_in_rounds) {
    visit(PathConstant<RegisterPath::kNumeratorsInRounds>{});
  } else {
    visit(PathConstant<RegisterPath::kRescored>{});
  }
}

// Routes `token` with the group of lanes that `lanes` describes. Groups past the last token (in
// the last warp) run the steps on the last token, for the collectives, and write nothing.
template <class Logit, int kItems, RegisterPath kPath, class Lanes>
MTK_HOST_DEVICE void route_token(const RouterProblem& p, int64_t token, const RegisterPlan& plan,
                               Lanes& lanes) {
  const bool owns_token = token < p.tokens;
  if (!owns_token) token = p.tokens - 1;
  if constexpr (kPath == RegisterPath::kPlain) {
    route_plain<Logit, kItems>(p, token, owns_token, plan, lanes);
  } else {
    route_general<Logit, kItems, kPath == RegisterPath::kNumeratorsInRounds>(
        p, token, owns_token, plan, lanes);
  }
}

// ---- Any number of experts ---------------------------------------------------------------
// Past 512 experts the scores do not fit in registers. A warp then re-reads the token's row
// (from L1/L2 after the first pass) in every step, lanes striding over the experts: the same
// semantics at the cost of about k + topk_group passes instead of one. Selection r is written at
// once (its id, and u into its weight), since k may exceed what registers hold; at the end each
// lane rescales the weights it wrote itself.

template <class Logit>
struct RowReader {
  const typename Logit::Storage* row;
  int64_t stride;
  MTK_HOST_DEVICE float operator()(int64_t e) const { return to_float(row[e * stride], Logit{}); }
};

template <class Logit, class Lanes>
MTK_HOST_DEVICE void route_streaming(const RouterProblem& p, int64_t token, Lanes& lanes) {
  static_assert(Lanes::kSize == kWarpSize, "one warp per token");
  const int lane = lanes.lane();
  const RowReader<Logit> x{logits_row<Logit>(p, token), p.logits_expert_stride};
  const bool plain = is_plain(p);
  // m and S of softmax; on the plain path m is the first selection's logit.
  float m = 0.0f, total = 1.0f;
  if (!plain && p.scoring == MTK_SCORING_SOFTMAX) {
    uint32_t max_key = 0;
    for (int64_t e = lane; e < p.experts; e += kWarpSize) {
      const uint32_t key = key_from_f32(x(e));
      max_key = key > max_key ? key : max_key;
    }
    m = float_from_key(group_max(lanes, max_key));
    float local = 0.0f;
    for (int64_t e = lane; e < p.experts; e += kWarpSize) local += exp_f32(x(e) - m);
    total = group_sum(lanes, local);
  }
  auto rank_at = [&](int64_t e) {
    const float xe = x(e);
    if (plain) return rank_of(key_from_f32(xe), e);
    float c = numerator(p.scoring, xe, m) / total;
    if (p.bias != nullptr) c += p.bias[e * p.bias_stride];
    return rank_of(key_from_f32(c), e);
  };
  const int64_t group_size = p.experts / p.n_group;
  auto group_rank = [&](int64_t g) {
    TopTwo top;
    for (int64_t e = g * group_size + lane; e < (g + 1) * group_size; e += kWarpSize) {
      top.add(rank_key(rank_at(e)));
    }
    top = top_two_over(lanes, top, kWarpSize);
    return rank_of(group_score_key(top, group_size), g);
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
    threshold = group_max(lanes, local);
    const int64_t expert = rank_index(threshold);
    const float chosen_x =
        group_broadcast(lanes, local_x, int(expert % group_size % kWarpSize));
    if (plain && r == 0) m = chosen_x;  // the largest logit
    const float u = numerator(p.scoring, chosen_x, m);
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
    denominator = group_sum(lanes, local);
  }
  for (int64_t r = lane; r < p.k; r += kWarpSize) {
    float& w = weights[r * p.weights_k_stride];
    w = w / denominator * p.scale;
  }
}

}  // namespace mtk::cuda_router
