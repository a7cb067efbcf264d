// How every kernel of the library is launched.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_check.hpp"

namespace mtk {
namespace cuda {

// Launches `kernel` with programmatic stream serialization: the GPU may schedule it while the
// kernel before it on the stream (the caller's or the library's own) still runs, so its launch
// latency hides behind that kernel's tail, and the host's enqueue is also cheaper than a plain
// launch's (bench/CUDA_NOTES.md, v15). It is correct because every kernel of the library calls
// wait_for_previous_kernel (device_utils.cuh) before it touches global memory. After anything
// that is not a kernel (a copy, a memset, an event wait) the launch is ordered as usual.
template <class... Params, class... Args>
void launch_overlapped(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                       cudaStream_t stream, const char* what, Args&&... args) {
  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = 1;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

}  // namespace cuda
}  // namespace mtk
