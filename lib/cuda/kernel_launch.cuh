// How every kernel of the library is launched.
#pragma once

#include <cuda.h>  // the driver's types only: libcuda is reached through the runtime, not linked
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace mtk {
namespace cuda {

// The driver's cuLaunchKernelEx and cuCtxGetCurrent, looked up once through the runtime so that
// a machine without a driver still loads the library; null where the driver predates them. The
// runtime's launch maps the kernel's host address to the driver's function on every call; the
// driver's launch with a handle found once skips that (a median 0.09 us less host time a launch
// on the H200).
struct DriverEntryPoints {
  CUresult (*launch)(const CUlaunchConfig*, CUfunction, void**, void**) = nullptr;
  CUresult (*current_context)(CUcontext*) = nullptr;
};

template <class Function>
Function driver_entry_point(const char* name) {
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &entry, 12000, cudaEnableDefault, &found) !=
          cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Function>(entry);
}

inline const DriverEntryPoints& driver() {
  static const DriverEntryPoints entry_points = [] {
    DriverEntryPoints found;
    found.launch = driver_entry_point<decltype(found.launch)>("cuLaunchKernelEx");
    found.current_context = driver_entry_point<decltype(found.current_context)>("cuCtxGetCurrent");
    return found;
  }();
  return entry_points;
}

// Whether the calling thread has a context current, which the driver's launch needs. A thread
// that has made no CUDA call yet has none; the runtime's launch binds the device's context to it.
inline bool thread_has_context(const DriverEntryPoints& entry_points) {
  CUcontext current = nullptr;
  return entry_points.current_context(&current) == CUDA_SUCCESS && current != nullptr;
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
CUresult launch_on_driver(const DriverEntryPoints& entry_points, void (*)(Params...),
                          cudaKernel_t handle, const CUlaunchConfig& config, Args&... args) {
  return [&](Params... converted) {
    void* pointers[] = {static_cast<void*>(&converted)..., nullptr};
    return entry_points.launch(&config, reinterpret_cast<CUfunction>(handle), pointers, nullptr);
  }(args...);
}

// The launch attribute that groups a grid's blocks into clusters of `blocks` along x.
inline cudaLaunchAttribute cluster_dimension(unsigned blocks) {
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = blocks;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  return cluster;
}

// Sets Kernel's function attribute kAttribute to `value`, once per device (the runtime keeps
// function attributes per device); each caller passes one value.
template <auto Kernel, cudaFuncAttribute kAttribute>
void set_kernel_attribute(int value, const char* what) {
  static std::atomic<uint64_t> devices_done{0};
  int device = 0;
  check_cuda(cudaGetDevice(&device), "reading the current device");
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit != 0 && (devices_done.load(std::memory_order_relaxed) & bit) != 0) return;
  check_cuda(cudaFuncSetAttribute(Kernel, kAttribute, value), what);
  devices_done.fetch_or(bit, std::memory_order_relaxed);
}

// Allows Kernel clusters over the portable size.
template <auto Kernel>
void allow_non_portable_clusters() {
  set_kernel_attribute<Kernel, cudaFuncAttributeNonPortableClusterSizeAllowed>(
      1, "allowing non-portable cluster sizes");
}

// Allows Kernel `bytes` of dynamic shared memory.
template <auto Kernel>
void allow_dynamic_shared_bytes(size_t bytes) {
  set_kernel_attribute<Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize>(
      int(bytes), "allowing the kernel's dynamic shared memory");
}

// Launches Kernel with programmatic stream serialization: the GPU may schedule it while the
// kernel before it on the stream (the caller's or the library's own) still runs, so its launch
// latency hides behind that kernel's tail, and the host's enqueue is also cheaper than a plain
// launch's. It is correct because every kernel of the library calls wait_for_previous_kernel
// (device_utils.cuh) before it touches global memory. After anything that is not a kernel (a
// copy, a memset, an event wait) the launch is ordered as usual.
//
// The driver launches Kernel's handle directly where the thread has a context current. The
// runtime's launch serves a thread that has none yet (and binds the device's context to it, so
// its later calls take the driver's launch), and reports the error of a driver launch that
// failed.
template <auto Kernel, class... Args>
void launch_overlapped(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                       const char* what, Args&&... args) {
  static const cudaKernel_t handle = kernel_handle(reinterpret_cast<const void*>(Kernel));
  const DriverEntryPoints& entry_points = driver();
  if (handle != nullptr && entry_points.launch != nullptr &&
      entry_points.current_context != nullptr && thread_has_context(entry_points)) {
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
    if (launch_on_driver(entry_points, Kernel, handle, config, args...) == CUDA_SUCCESS) return;
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

// launch_overlapped for a kernel whose blocks run in clusters of cluster_blocks (grid.x a
// multiple of it). Through the runtime only, which the non-portable attribute was set through.
template <auto Kernel, class... Args>
void launch_overlapped_in_clusters(unsigned cluster_blocks, dim3 grid, dim3 block,
                                   size_t shared_bytes, cudaStream_t stream, const char* what,
                                   Args&&... args) {
  if (cluster_blocks > 8) allow_non_portable_clusters<Kernel>();
  cudaLaunchAttribute attributes[2] = {{}, cluster_dimension(cluster_blocks)};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = 2;
  check_cuda(cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...), what);
}

}  // namespace cuda
}  // namespace mtk
