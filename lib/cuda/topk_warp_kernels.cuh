// Top-k of short rows: one warp per row (n <= 1024, k <= 32). The row sits in registers, each
// lane's share sorted; k rounds of a warp-wide max pick the winners already in rank order. One
// launch, no scratch: the MoE routing shapes.
#pragma once

#include <cstdint>

#include "cuda/device_utils.cuh"

namespace mtk {
namespace cuda {

constexpr int kWarpRowThreads = 128;     // 4 rows per block
constexpr int kWarpMaxK = 32;            // lane r holds rank r
constexpr int kWarpMaxItems = 32;        // per lane: rows up to 1024

// A row position packed under its key so that one unsigned max picks the better element: the
// key in the high bits, the complemented position below it (n <= 1024, so 16 bits are enough
// and the packed word is never 0 for a real element; 0 marks "absent or already taken").
template <class Key> struct PackedOf { using type = uint32_t; };             // 8/16-bit keys
template <> struct PackedOf<uint32_t> { using type = uint64_t; };
template <> struct PackedOf<uint64_t> { using type = unsigned __int128; };
template <class Key> constexpr int kPackedIndexBits = sizeof(Key) <= 2 ? 16 : 32;

template <class Packed>
__device__ __forceinline__ Packed warp_max(Packed mine) {
  constexpr unsigned kAll = 0xffffffffu;
  if constexpr (sizeof(Packed) == 4) {
    return __reduce_max_sync(kAll, mine);
  } else if constexpr (sizeof(Packed) == 8) {
    const uint32_t high = __reduce_max_sync(kAll, uint32_t(mine >> 32));
    const uint32_t low = __reduce_max_sync(kAll, uint32_t(mine >> 32) == high ? uint32_t(mine) : 0u);
    return (Packed(high) << 32) | low;
  } else {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const uint64_t high = __shfl_xor_sync(kAll, uint64_t(mine >> 64), offset);
      const uint64_t low = __shfl_xor_sync(kAll, uint64_t(mine), offset);
      const Packed other = (Packed(high) << 64) | low;
      mine = other > mine ? other : mine;
    }
    return mine;
  }
}

// Sorts a lane's slots into descending order in registers (a bitonic network: every index is a
// compile-time constant once unrolled, so nothing spills to local memory).
template <int N, class P>
__device__ __forceinline__ void sort_slots_descending(P (&slots)[N]) {
#pragma unroll
  for (int span = 2; span <= N; span <<= 1) {
#pragma unroll
    for (int stride = span >> 1; stride > 0; stride >>= 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int j = i ^ stride;
        if (j > i) {
          const P high = slots[i] > slots[j] ? slots[i] : slots[j];
          const P low = slots[i] > slots[j] ? slots[j] : slots[i];
          const bool descending = (i & span) == 0;
          slots[i] = descending ? high : low;
          slots[j] = descending ? low : high;
        }
      }
    }
  }
}

// Element j*32 + lane of the row lives in lane `lane`, packed with its position; each lane sorts
// its slots once, so its best is always slot 0. Each of k rounds takes the warp-wide maximum of
// the lanes' bests; lane r keeps the position of rank r, and the lane that owned the winner
// shifts its slots down by one. Values are copied from the input at the end (the row is still
// in L1/L2), which keeps the rounds free of memory traffic.
template <class T, int Items>
__global__ void __launch_bounds__(kWarpRowThreads)
    warp_topk_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                     bool largest) {
  using Key = typename KeyTraits<T>::Key;
  using Packed = typename PackedOf<Key>::type;
  constexpr int kIndexBits = kPackedIndexBits<Key>;
  constexpr uint32_t kIndexMask = uint32_t((uint64_t(1) << kIndexBits) - 1);
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (kWarpRowThreads / 32) + (threadIdx.x >> 5);
  if (row >= g.rows) return;
  const RowOffsets o = device_row_offsets(g, row);
  const T* in = input + o.input;
  const int n = int(g.n), k = int(g.k);

  Packed slots[Items];
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    const int i = j * 32 + lane;
    slots[j] = i < n ? (Packed(selection_key(in[int64_t(i) * g.input_stride], largest))
                        << kIndexBits) |
                           Packed(~uint32_t(i) & kIndexMask)
                     : Packed(0);
  }
  sort_slots_descending(slots);

  uint32_t my_rank_index = 0;  // lane r: the position of rank r
  for (int r = 0; r < k; ++r) {
    const Packed winner = warp_max(slots[0]);
    if (lane == r) my_rank_index = ~uint32_t(winner) & kIndexMask;
    if (slots[0] == winner) {
#pragma unroll
      for (int j = 0; j + 1 < Items; ++j) slots[j] = slots[j + 1];
      slots[Items - 1] = Packed(0);
    }
  }
  if (lane < k) write_result(g, input, values, indices, index64, o, lane, my_rank_index);
}

}  // namespace cuda
}  // namespace mtk
