// The CUDA router's selection: sorting a lane's ranks in registers, then k rounds of a group
// maximum (select_sorted) or one butterfly merge of the lanes' sorted lists (select_merged);
// select_best picks between them. Ranks are moe_route_lanes.cuh's (key, expert) words.
#pragma once

#include <cstdint>

#include "cuda/moe_route_lanes.cuh"

namespace mtk::cuda_router {

// The compare-exchange of both sorting networks below: the larger value first.
template <class T>
MTK_HOST_DEVICE void order_descending(T& first, T& second) {
  const T high = first > second ? first : second;
  const T low = first > second ? second : first;
  first = high;
  second = low;
}

// Sorts a lane's ranks into descending order in registers: Batcher's odd-even merge sort (19
// compare-exchanges for 8 items, 63 for 16). Unrolled by templates rather than pragmas, so every
// index is a compile-time constant whatever the unroller decides and nothing goes to local memory.
// Pass (P, K) compares item A with A + K where A lies in an even K-block counted from K % P and
// both lie in one 2P-block.
template <int N, int P, int K, int A, class T>
MTK_HOST_DEVICE void merge_pass_from(T (&v)[N]) {
  if constexpr (A + K < N) {
    constexpr int kOffset = A - K % P;
    if constexpr (kOffset >= 0 && kOffset / K % 2 == 0 && A / (2 * P) == (A + K) / (2 * P)) {
      order_descending(v[A], v[A + K]);
    }
    merge_pass_from<N, P, K, A + 1>(v);
  }
}

template <int N, int P, int K, class T>
MTK_HOST_DEVICE void merge_passes(T (&v)[N]) {
  merge_pass_from<N, P, K, 0>(v);
  if constexpr (K > 1) merge_passes<N, P, K / 2>(v);
}

template <int N, int P = 1, class T>
MTK_HOST_DEVICE void sort_descending(T (&v)[N]) {
  if constexpr (P < N) {
    merge_passes<N, P, P>(v);
    sort_descending<N, 2 * P>(v);
  }
}

// k rounds of a group maximum over the lanes' best ranks, each lane's ranks sorted descending
// and laid out in lane order (lane_ordered_max); rank 0 never wins: k never exceeds the real
// candidates. Selection r = slot * kSize + owner is handed to take(slot, owner, rank) on every
// lane, in order; the winner's lane shifts its ranks down by one. The owner loop stays rolled:
// unrolled, the shifts become register renaming that costs more moves than the shifts.
template <int kItems, class Rank, class Lanes, class Take>
MTK_HOST_DEVICE void select_sorted(Lanes& lanes, int k, Rank (&rank)[kItems], Take&& take) {
  constexpr int kLanes = Lanes::kSize;
MTK_ROUTER_UNROLL
  for (int slot = 0; slot < kItems; ++slot) {
    if (slot * kLanes >= k) break;
MTK_ROUTER_NO_UNROLL
    for (int owner = 0; owner < kLanes && slot * kLanes + owner < k; ++owner) {
      bool won;
      const Rank winner = lane_ordered_max(lanes, rank[0], won);
      take(slot, owner, winner);
      if (won) {
MTK_ROUTER_UNROLL
        for (int i = 0; i + 1 < kItems; ++i) rank[i] = rank[i + 1];
        rank[kItems - 1] = 0;
      }
    }
  }
}

template <class Lanes>
MTK_HOST_DEVICE uint32_t shuffle_xor_rank(Lanes& lanes, uint32_t rank, int lane_mask) {
  return lanes.shuffle_xor(rank, lane_mask);
}
template <class Lanes>
MTK_HOST_DEVICE uint64_t shuffle_xor_rank(Lanes& lanes, uint64_t rank, int lane_mask) {
  return uint64_t{lanes.shuffle_xor(uint32_t(rank >> 32), lane_mask)} << 32 |
         lanes.shuffle_xor(uint32_t(rank), lane_mask);
}

// Sorts a bitonic sequence into descending order: half-cleaners of span N/2, N/4, ..., 1.
template <int N, int J, int A, class T>
MTK_HOST_DEVICE void half_clean_from(T (&v)[N]) {
  if constexpr (A < N) {
    if constexpr ((A & J) == 0) order_descending(v[A], v[A + J]);
    half_clean_from<N, J, A + 1>(v);
  }
}

template <int N, int J = N / 2, class T>
MTK_HOST_DEVICE void sort_bitonic_descending(T (&v)[N]) {
  if constexpr (J > 0) {
    half_clean_from<N, J, 0>(v);
    sort_bitonic_descending<N, J / 2>(v);
  }
}

// Leaves the group's kItems best ranks, sorted descending, on every lane; each lane's ranks must
// be sorted descending. At each butterfly step partners merge their lists: the larger of a[i]
// and b[kItems - 1 - i], for every i, is a bitonic sequence holding the best kItems of both, which
// half-cleaners sort. Ranks are distinct (each carries its expert), so all lanes agree. Its
// log2(kSize) steps are independent shuffles and compare-exchanges, where select_sorted pays one
// dependent group maximum per selection.
template <int kLaneMask, int kItems, class Rank, class Lanes>
MTK_HOST_DEVICE void merge_best_from(Lanes& lanes, Rank (&rank)[kItems]) {
  if constexpr (kLaneMask < Lanes::kSize) {
    Rank other[kItems];
    for_each_index<kItems>([&](auto i) {
      other[i] = shuffle_xor_rank(lanes, rank[i], kLaneMask);
    });
    for_each_index<kItems>([&](auto i) {
      constexpr int kMirror = kItems - 1 - decltype(i)::value;
      rank[i] = rank[i] > other[kMirror] ? rank[i] : other[kMirror];
    });
    sort_bitonic_descending(rank);
    merge_best_from<2 * kLaneMask>(lanes, rank);
  }
}

// select_sorted's hand-over for k <= kItems, from the merged list: selection r is its rank r.
template <int kItems, class Rank, class Lanes, class Take>
MTK_HOST_DEVICE void select_merged(Lanes& lanes, int k, Rank (&rank)[kItems], Take&& take) {
  constexpr int kLanes = Lanes::kSize;
  merge_best_from<1>(lanes, rank);
  for_each_index<kItems>([&](auto r) {
    if (r < k) take(r / kLanes, r % kLanes, rank[r]);
  });
}

// The take that keeps only the experts: selection r's lands in lane r % kSize, slot r / kSize.
template <int kItems, class Lanes>
MTK_HOST_DEVICE auto keep_experts(Lanes& lanes, int (&chosen)[kItems]) {
  return [&lanes, &chosen](int slot, int owner, auto winner) {
    if (lanes.lane() == owner) chosen[slot] = int(rank_index(winner));
  };
}

// Selections in select_sorted's layout. A group narrower than a warp takes each maximum by a
// butterfly of shuffles, and the merge's one butterfly is shorter from kMergeFromK selections on.
// A whole warp takes a maximum with redux.sync and keeps the rounds: shorter for 64-bit ranks at
// every k <= 8; for 32-bit ranks the merge is shorter from 6 selections but issues more
// instructions, untried in a kernel. bench/gpu/warp_collectives.cu times both ways.
template <class Rank>
constexpr int kMergeFromK = sizeof(Rank) == 4 ? 3 : 7;

template <int kItems, class Rank, class Lanes, class Take>
MTK_HOST_DEVICE void select_best(Lanes& lanes, int k, Rank (&rank)[kItems], Take&& take) {
  if (Lanes::kSize < kWarpSize && k >= kMergeFromK<Rank> && k <= kItems) {
    select_merged(lanes, k, rank, take);
  } else {
    select_sorted(lanes, k, rank, take);
  }
}

}  // namespace mtk::cuda_router
