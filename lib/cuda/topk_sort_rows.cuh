// The kernel that sorts and writes each row's winners when k is past the finish kernel's sort:
// a block per row, the winners in dynamic shared memory (plan.row_sort_bytes). Kept apart from
// topk_multi_finish.cuh because the host emulation of the kernels cannot declare dynamic
// shared memory; it runs sort_row_winners on a buffer of its own.
#pragma once

#include "cuda/topk_multi_finish.cuh"

namespace mtk {
namespace cuda {

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

}  // namespace cuda
}  // namespace mtk
