// What a backend implements. The core validates, canonicalises and owns policy; a backend
// receives only valid canonical problems and adds kernels. Backends report failures by throwing
// mtk::Error; the core catches at the ABI.
#pragma once

#include <cstddef>
#include <memory>

#include "cache.hpp"
#include "metaltopk.h"
#include "problem.hpp"

namespace mtk {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual mtk_backend kind() const = 0;
  virtual bool supports_dtype(mtk_dtype dtype) const = 0;

  // Device memory. allocate throws MTK_ERROR_OUT_OF_MEMORY; deallocate never throws.
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) noexcept = 0;
  virtual void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind kind,
                    void* stream) = 0;
  virtual void synchronize(void* stream) = 0;

  // Scratch bytes `topk` needs for this problem; rows, n and k are > 0 here.
  virtual size_t workspace_size(const TopkProblem& problem) = 0;
  // `workspace` is caller-provided (at least workspace_size(problem) bytes) or empty, in which
  // case the backend takes scratch from its own stream-safe cache. Called only with rows, k > 0.
  virtual void topk(const TopkProblem& problem, Workspace workspace, void* stream) = 0;

  // Called only with tokens > 0.
  virtual void moe_route(const RouterProblem& problem, void* stream) = 0;

  // Plan / pipeline cache counters and scratch held, for mtk_context_cache_stats.
  virtual CacheCounters cache_counters() const = 0;
  virtual size_t scratch_bytes() const = 0;

  virtual void set_num_threads(int num_threads) = 0;
};

// Factories, one per backend folder. Each throws MTK_ERROR_BACKEND_UNAVAILABLE when its device
// or driver is missing. Backends not compiled in are never called (see backend_registry.cpp).
std::unique_ptr<Backend> make_cpu_backend(int device_index);
std::unique_ptr<Backend> make_cuda_backend(int device_index);
std::unique_ptr<Backend> make_metal_backend(int device_index);
std::unique_ptr<Backend> make_mpsgraph_backend(int device_index);

// Whether the backend's device can be used now (compiled in and a device present).
bool cuda_backend_available();
bool metal_backend_available();

}  // namespace mtk
