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

  // Whether `topk` accepts problems without values (indices only; values == nullptr).
  virtual bool supports_indices_only() const { return false; }

  // Ragged rows (mtk_topk_ragged), as `workspace_size` and `topk` above; rows and k are > 0.
  // A backend without kernels for them keeps these defaults, which refuse with
  // MTK_ERROR_BACKEND_UNAVAILABLE and a message naming the backend.
  virtual size_t ragged_workspace_size(const RaggedProblem& problem);
  virtual void topk_ragged(const RaggedProblem& problem, Workspace workspace, void* stream);

  // Called only with tokens > 0.
  virtual void moe_route(const RouterProblem& problem, void* stream) = 0;

  // Plan / pipeline cache counters and scratch held, for mtk_context_cache_stats.
  virtual CacheCounters cache_counters() const = 0;
  virtual size_t scratch_bytes() const = 0;

  virtual void set_num_threads(int num_threads) = 0;
};

// How the core finds backends: each backend folder registers itself while the library loads,
// with a BackendRegistration at namespace scope in one of its own files, so the core names
// none of them. `make` throws MTK_ERROR_BACKEND_UNAVAILABLE when the device or driver is
// missing; `available` says whether one is present now. MTK_BACKEND_DEFAULT resolves to the
// available backend of the highest `default_rank` (0: never chosen by default).
struct BackendRegistration {
  using Factory = std::unique_ptr<Backend> (*)(int device_index);
  using Availability = bool (*)();
  BackendRegistration(mtk_backend kind, int default_rank, Factory make, Availability available);
};

}  // namespace mtk
