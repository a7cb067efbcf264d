// How every kernel of the library is launched.
#pragma once

#include <cuda.h>  // the driver's types only: libcuda is reached through the runtime, not linked
#include <cuda_runtime.h>

#include <utility>

#include "cuda/cuda_check.hpp"

namespace mtk {
namespace cuda {

using DriverLaunch = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);

// The driver's cuLaunchKernelEx, looked up once through the runtime so that a machine without a
// driver still loads the library; null where the driver predates it. The runtime's own launch
// goes through it too, after finding the kernel by its host address on every call: calling it
// directly with a kernel handle found once takes that search (0.15-0.36 us of host time a launch
// on the H200's host, bench/CUDA_NOTES.md v16) off every call.
inline DriverLaunch driver_launch() {
  static const DriverLaunch launch = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return DriverLaunch{nullptr};
    }
    return reinterpret_cast<DriverLaunch>(entry);
  }();
  return launch;
}

// A context-independent handle of `kernel` (launched in whatever context is current), or null
// where this runtime cannot give one.
inline cudaKernel_t kernel_handle(const void* kernel) {
  cudaKernel_t handle = nullptr;
  if (cudaGetKernel(&handle, kernel) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return handle;
}

// Each argument converted to its parameter's type, as the runtime's typed launch does: the driver
// reads every parameter through a pointer to exactly that type.
template <class... Params, class... Args>
CUresult launch_on_driver(DriverLaunch driver, void (*)(Params...), cudaKernel_t handle,
                          const CUlaunchConfig& config, Args&... args) {
  return [&](Params... converted) {
    void* pointers[] = {static_cast<void*>(&converted)..., nullptr};
    return driver(&config, reinterpret_cast<CUfunction>(handle), pointers, nullptr);
  }(args...);
}

// Launches Kernel with programmatic stream serialization: the GPU may schedule it while the
// kernel before it on the stream (the caller's or the library's own) still runs, so its launch
// latency hides behind that kernel's tail, and the host's enqueue is also cheaper than a plain
// launch's (bench/CUDA_NOTES.md, v15). It is correct because every kernel of the library calls
// wait_for_previous_kernel (device_utils.cuh) before it touches global memory. After anything
// that is not a kernel (a copy, a memset, an event wait) the launch is ordered as usual.
//
// The driver launches Kernel's handle directly. Where that fails, the runtime's launch does the
// same work and reports the error: it also binds the device's context to a thread that has
// none yet (the driver's launch needs a current context; the runtime makes one current on first
// use), after which the driver's launch succeeds on that thread.
template <auto Kernel, class... Args>
void launch_overlapped(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                       const char* what, Args&&... args) {
  static const cudaKernel_t handle = kernel_handle(reinterpret_cast<const void*>(Kernel));
  const DriverLaunch driver = driver_launch();
  if (driver != nullptr && handle != nullptr) {
    CUlaunchAttribute overlap{};
    overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = grid.x;
    config.gridDimY = grid.y;
    config.gridDimZ = grid.z;
    config.blockDimX = block.x;
    config.blockDimY = block.y;
    config.blockDimZ = block.z;
    config.sharedMemBytes = static_cast<unsigned>(shared_bytes);
    config.hStream = stream;
    config.attrs = &overlap;
    config.numAttrs = 1;
    if (launch_on_driver(driver, Kernel, handle, config, args...) == CUDA_SUCCESS) return;
  }
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
  check_cuda(cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...), what);
}

}  // namespace cuda
}  // namespace mtk
