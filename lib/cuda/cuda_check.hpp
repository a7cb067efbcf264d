// CUDA runtime errors as mtk::Error, and the device switch every backend call makes.
#pragma once

#include <cuda_runtime.h>

#include "core/error.hpp"

namespace mtk {
namespace cuda {

// Throws for anything but cudaSuccess: MTK_ERROR_OUT_OF_MEMORY for allocation failures,
// MTK_ERROR_DEVICE otherwise, naming what was being done and CUDA's own message.
inline void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  // Non-sticky errors stay pending until read; clear them so the next call starts clean.
  cudaGetLastError();
  const mtk_status code =
      status == cudaErrorMemoryAllocation ? MTK_ERROR_OUT_OF_MEMORY : MTK_ERROR_DEVICE;
  fail(code, "CUDA error while ", what, ": ", cudaGetErrorName(status), " (",
       cudaGetErrorString(status), ")");
}

// Makes `device` current for the guard's lifetime and restores the caller's device after, so
// the library never changes the calling thread's CUDA state.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check_cuda(cudaGetDevice(&previous_), "reading the current device");
    if (previous_ != device) check_cuda(cudaSetDevice(device), "selecting the context's device");
  }
  ~DeviceGuard() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace cuda
}  // namespace mtk
