// What a backend implements. The core validates, canonicalises and owns policy; a backend
// receives only valid canonical problems and adds kernels. Backends report failures by throwing
// mtk::Error; the core catches at the ABI.
#pragma once

#include <cstddef>
#include <memory>

#include "cache.hpp"
#include "metaltopk.h"
#include "problem.hpp"
#include "sampling_problem.hpp"

namespace mtk {

// What one backend decided for one top-k problem (kernels, split, scratch layout), made once by
// Backend::plan_topk. The core reads the scratch it needs and hands the plan back to
// Backend::run_topk with the same problem; only the backend that made it reads the rest (its
// own type, derived from this one).
struct PlannedTopk {
  virtual ~PlannedTopk() = default;
  size_t workspace_bytes = 0;  // scratch run_topk needs in a caller's workspace
};

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
  // Another runtime's buffer (mtk_register_buffer), a native handle, made a device pointer until
  // unregister_buffer; the defaults refuse (a backend whose device pointers need no handle).
  virtual void* register_buffer(void* native_buffer);
  virtual void unregister_buffer(void* data);

  // Plans a problem with rows, n and k > 0 (a backend may return a plan it cached per shape).
  virtual std::shared_ptr<const PlannedTopk> plan_topk(const TopkProblem& problem) = 0;
  // Runs `plan`, which this backend's plan_topk made for `problem`. `workspace` is the caller's
  // (at least plan.workspace_bytes, checked by the core) or empty, in which case the backend
  // takes scratch from its own stream-safe cache.
  virtual void run_topk(const PlannedTopk& plan, const TopkProblem& problem, Workspace workspace,
                        void* stream) = 0;

  // Whether run_topk accepts problems without values (indices only; values == nullptr).
  virtual bool supports_indices_only() const { return false; }

  // Ragged rows (mtk_topk_ragged), planned and run as plan_topk and run_topk above; rows and k
  // are > 0. A backend without kernels for them keeps these defaults, which refuse with
  // MTK_ERROR_BACKEND_UNAVAILABLE and a message naming the backend.
  virtual std::shared_ptr<const PlannedTopk> plan_topk_ragged(const RaggedProblem& problem);
  virtual void run_topk_ragged(const PlannedTopk& plan, const RaggedProblem& problem,
                               Workspace workspace, void* stream);

  // The sampling filters and samplers (mtk_top_k_mask_logits, mtk_renorm_probs, mtk_sample,
  // mtk_sample_from_logits), planned and run as plan_topk and run_topk; rows and n are > 0.
  // The defaults refuse with MTK_ERROR_BACKEND_UNAVAILABLE and a message naming the backend.
  virtual std::shared_ptr<const PlannedTopk> plan_sampling(const SamplingProblem& problem);
  virtual void run_sampling(const PlannedTopk& plan, const SamplingProblem& problem,
                            Workspace workspace, void* stream);

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
