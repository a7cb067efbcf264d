// Backend-owned scratch for mtk_topk calls that bring no workspace: one block per stream,
// reused call after call, grown rarely and only outside stream capture.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <mutex>
#include <unordered_map>

namespace mtk {
namespace cuda {

class ScratchCache {
 public:
  // A block of at least the asked size, usable by work enqueued on its stream while the lease
  // lives. The lease holds the cache's lock so that no other thread can grow (and free) the
  // block between handing it out and the caller enqueueing the work that uses it.
  class Lease {
   public:
    void* data() const { return data_; }

   private:
    friend class ScratchCache;
    Lease(std::unique_lock<std::mutex> lock, void* data) : lock_(std::move(lock)), data_(data) {}
    std::unique_lock<std::mutex> lock_;
    void* data_;
  };

  explicit ScratchCache(int device) : device_(device) {}
  ~ScratchCache();
  ScratchCache(const ScratchCache&) = delete;
  ScratchCache& operator=(const ScratchCache&) = delete;

  // Grows the stream's block (stream-ordered: cudaMallocAsync, then cudaFreeAsync of the old
  // one behind the work already queued) when it is too small. Growing while `stream` is being
  // captured into a CUDA graph fails with MTK_ERROR_INVALID_ARGUMENT: warm up before capture
  // or pass a workspace.
  Lease acquire(cudaStream_t stream, size_t bytes);
  size_t bytes_held() const;

 private:
  struct Block {
    void* data = nullptr;
    size_t bytes = 0;
  };
  int device_;
  mutable std::mutex mutex_;
  std::unordered_map<cudaStream_t, Block> blocks_;
};

}  // namespace cuda
}  // namespace mtk
