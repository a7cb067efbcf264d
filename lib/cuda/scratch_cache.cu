// ScratchCache (scratch_cache.hpp): the CUDA backend's per-stream scratch for calls that bring no
// workspace.
#include "cuda/scratch_cache.hpp"

#include <algorithm>
#include <utility>

#include "core/error.hpp"
#include "core/fault_injection.hpp"
#include "cuda/cuda_check.hpp"

namespace mtk {
namespace cuda {

ScratchCache::~ScratchCache() {
  if (blocks_.empty()) return;
  // The blocks' streams may be gone already: wait for the device, then free directly.
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                        cudaSetDevice(device_) == cudaSuccess;
  cudaDeviceSynchronize();
  for (auto& entry : blocks_) {
    if (entry.second.data == nullptr) continue;
    cudaFree(entry.second.data);
    track_release();
  }
  cudaGetLastError();
  if (switched) cudaSetDevice(previous);
}

ScratchCache::Lease ScratchCache::acquire(cudaStream_t stream, size_t bytes) {
  std::unique_lock<std::mutex> lock(mutex_);
  Block& block = blocks_[stream];
  if (block.bytes >= bytes) return Lease(std::move(lock), block.data);

  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &capture), "checking the stream for capture");
  if (capture != cudaStreamCaptureStatusNone) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "this top-k needs ", bytes,
         " bytes of scratch but the stream's scratch holds ", block.bytes,
         " and the stream is being captured, where it cannot grow: run the same call once "
         "before capture, or pass a workspace (mtk_topk_with_workspace)");
  }
  // Grow by at least half again so that slowly increasing sizes reallocate rarely.
  const size_t grown = std::max(bytes, block.bytes + block.bytes / 2);
  void* fresh = nullptr;
  fault_point(FaultSite::DeviceAllocation);
  check_cuda(cudaMallocAsync(&fresh, grown, stream), "allocating top-k scratch");
  track_allocation();
  if (block.data != nullptr) {
    const cudaError_t freed = cudaFreeAsync(block.data, stream);
    if (freed != cudaSuccess) {
      cudaFreeAsync(fresh, stream);
      track_release();
      check_cuda(freed, "releasing the previous top-k scratch");
    }
    track_release();
  }
  block.data = fresh;
  block.bytes = grown;
  return Lease(std::move(lock), block.data);
}

size_t ScratchCache::bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = 0;
  for (const auto& entry : blocks_) total += entry.second.bytes;
  return total;
}

}  // namespace cuda
}  // namespace mtk
