// The block path's kernel for rows whose keys fit a shared-memory cache (plan.block_key_cache_bytes
// of dynamic shared memory, see block_select_row). Kept apart from topk_block_select.cuh
// because the host emulation of the kernels cannot declare dynamic shared memory; it runs
// block_select_row on a buffer of its own.
#pragma once

#include "cuda/topk_block_select.cuh"

namespace mtk {
namespace cuda {

template <class T>
__global__ void __launch_bounds__(kBlockThreads, kBlockPathMinBlocksPerSm<T>)
    block_select_cached_kernel(RowGeometry g, const T* input, void* values, void* indices,
                               bool index64, bool largest, bool sorted, RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  extern __shared__ __align__(16) unsigned char block_key_cache[];
  block_select_row<T>(g, input, values, indices, index64, largest, sorted, ragged, blockIdx.x,
                      reinterpret_cast<typename KeyTraits<T>::Key*>(block_key_cache));
}

}  // namespace cuda
}  // namespace mtk
