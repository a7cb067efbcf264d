// The kernels of k past the finish kernel's sort that keep a row's winners in dynamic shared
// memory: the finish that ranks them within key bins (finish_placing_kernel), and those that
// sort and write each row's winners, a block per row. Kept apart from topk_multi_finish.cuh
// because the host emulation of the kernels cannot declare dynamic shared memory; it runs
// finish_row and sort_row_winners on buffers of its own.
#pragma once

#include <cub/block/block_radix_sort.cuh>

#include "cuda/topk_multi_finish.cuh"
#include "cuda/topk_packed_winners.hpp"

namespace mtk {
namespace cuda {

// finish_kernel for k up to kRowRadixSortMaxK (plan.finish_placement_bytes): the key-bin ranking
// that writes k <= kSortCapacity rows without a sort, in k composites of dynamic shared memory.
// Rows it cannot rank that way (crowded bins, a missed threshold) go on to
// radix_sort_rows_kernel, which skips the others.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    finish_placing_kernel(RowGeometry g, const T* input, void* values, void* indices,
                          bool index64, bool largest, MultiLayout layout,
                          RowState<Composite<typename KeyTraits<T>::Key>>* states,
                          Composite<typename KeyTraits<T>::Key>* winners,
                          const Composite<typename KeyTraits<T>::Key>* candidates,
                          const Composite<typename KeyTraits<T>::Key>* first_output,
                          RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  extern __shared__ __align__(16) unsigned char placement_storage[];
  finish_row<T>(g, input, values, indices, index64, largest, layout, states, winners, candidates,
                first_output, false, ragged,
                reinterpret_cast<Composite<typename KeyTraits<T>::Key>*>(placement_storage));
}

template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    sort_rows_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                     bool largest, const Composite<typename KeyTraits<T>::Key>* winners,
                     RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  extern __shared__ __align__(16) unsigned char row_sort_storage[];
  sort_row_winners<T>(reinterpret_cast<Composite<typename KeyTraits<T>::Key>*>(row_sort_storage),
                      g, input, values, indices, index64, largest, winners, ragged, blockIdx.x);
}

// The same for k up to kRowRadixSortItems a thread and 64-bit composites, by a radix sort of
// the bits in which the row's winners differ (PackedWinners) instead of a bitonic sort of all
// 64: the top 4096 of 262144 uniform floats share their top 14 key bits, and their indices
// fill 19, so 37 bits remain, ten passes of CUB's 4-bit digits against the bitonic sort's 78
// compare-exchange stages of 4096 composites (55 us for 256 such rows on the H200).
//
// Two blocks an SM (64 registers a thread), so 256 rows sort in one wave of 132 SMs. Rows that
// finish_placing_kernel wrote are skipped.
template <class T>
__global__ void __launch_bounds__(kBlockThreads, 2)
    radix_sort_rows_kernel(RowGeometry g, const T* input, void* values, void* indices,
                           bool index64, bool largest,
                           const RowState<Composite<typename KeyTraits<T>::Key>>* states,
                           const Composite<typename KeyTraits<T>::Key>* winners,
                           RaggedRows ragged) {
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  static_assert(sizeof(Comp) == sizeof(uint64_t), "keys of up to 32 bits");
  using RowSort = cub::BlockRadixSort<uint64_t, kBlockThreads, kRowRadixSortItems>;
  __shared__ typename RowSort::TempStorage sort_storage;
  __shared__ uint32_t key_range[2];  // the winners' lowest and highest keys
  wait_for_previous_kernel();
  allow_next_kernel();
  const int64_t row = blockIdx.x;
  if (states[row].output_written) return;
  const RowTarget o = device_row_target(g, ragged, row);
  if (threadIdx.x == 0) {
    key_range[0] = ~0u;
    key_range[1] = 0;
  }
  // A row's winners fill its first o.count slots; the order they are read in is free (they are
  // unique), so the loads are striped, whole warps on adjacent slots.
  const Comp* row_winners = winners + row * g.k;
  uint64_t items[kRowRadixSortItems];
  uint32_t lowest = ~0u, highest = 0;
#pragma unroll
  for (int j = 0; j < kRowRadixSortItems; ++j) {
    const int64_t slot = int64_t(j) * kBlockThreads + threadIdx.x;
    items[j] = slot < o.count ? uint64_t(row_winners[slot]) : 0;
    if (slot < o.count) {
      lowest = min(lowest, uint32_t(items[j] >> 32));
      highest = max(highest, uint32_t(items[j] >> 32));
    }
  }
  lowest = __reduce_min_sync(0xffffffffu, lowest);
  highest = __reduce_max_sync(0xffffffffu, highest);
  __syncthreads();  // key_range is set
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&key_range[0], lowest);
    atomicMax(&key_range[1], highest);
  }
  __syncthreads();
  if (o.count > 0) {
    const PackedWinners packing = PackedWinners::for_row(key_range[0], g.n);
#pragma unroll
    for (int j = 0; j < kRowRadixSortItems; ++j) {
      if (items[j] != 0) items[j] = packing.pack(items[j]);  // padding stays 0, below all
    }
    RowSort(sort_storage).SortDescendingBlockedToStriped(items, 0,
                                                         int(packing.end_bit(key_range[1])));
#pragma unroll
    for (int j = 0; j < kRowRadixSortItems; ++j) {
      const int64_t rank = int64_t(j) * kBlockThreads + threadIdx.x;
      if (rank < o.count) {
        write_winner(g, input, values, indices, index64, largest, o, rank,
                     Comp(packing.unpack(items[j])));
      }
    }
  }
  write_padding<T>(g, values, indices, index64, o, o.count, g.k);
}

}  // namespace cuda
}  // namespace mtk
