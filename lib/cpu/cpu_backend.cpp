// The CPU backend: host memory, a thread pool, per-worker scratch kept across calls, and the
// top-k kernels of the best instruction set this CPU has.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/fault_injection.hpp"
#include "cpu/cpu_backend.hpp"
#include "cpu/moe_route.hpp"
#include "cpu/ragged.hpp"
#include "cpu/sampling.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/topk_kernels.hpp"
#include "cpu/topk_plan.hpp"

namespace mtk {
namespace {

using cpu::kScratchAlign;

size_t round_up(size_t bytes, size_t align) { return (bytes + align - 1) / align * align; }

std::byte* align_up(std::byte* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  return p + (round_up(address, kScratchAlign) - address);
}

// Frees scratch and tells the reliability tests' live-allocation count.
struct FreeDeleter {
  void operator()(void* p) const noexcept {
    std::free(p);
    track_release();
  }
};

// A 64-byte aligned host buffer; null when empty.
void* aligned_host_alloc(size_t bytes) {
  fault_point(FaultSite::HostAllocation);
  // aligned_alloc wants a multiple of the alignment.
  void* p = std::aligned_alloc(kScratchAlign, round_up(std::max<size_t>(bytes, 1), kScratchAlign));
  if (p == nullptr) fail(MTK_ERROR_OUT_OF_MEMORY, "cpu: allocating ", bytes, " bytes failed");
  return p;
}

// Scratch that only grows, reused by every later call.
class ScratchBuffer {
 public:
  std::byte* reserve(size_t bytes) {
    if (bytes > bytes_) {
      data_.reset();
      bytes_ = 0;
      data_.reset(static_cast<std::byte*>(aligned_host_alloc(bytes)));
      track_allocation();
      bytes_ = bytes;
    }
    return data_.get();
  }
  size_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<std::byte, FreeDeleter> data_;
  size_t bytes_ = 0;
};

using cpu::TopkKernel;

TopkKernel best_topk_kernel() {
#if defined(MTK_CPU_HAVE_AVX2_KERNELS)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") &&
      __builtin_cpu_supports("fma")) {
    return &cpu::avx2::run_topk;
  }
#endif
  return &cpu::generic::run_topk;
}

// A plan for the pool it was made for: its workers index their scratch, so the plan runs on
// that pool.
struct CpuPlannedTopk final : PlannedTopk {
  cpu::TopkPlan plan;
  std::shared_ptr<cpu::ThreadPool> pool;
};

// Ragged rows: every worker's scratch holds any window (cpu::ragged_worker_bytes).
struct CpuPlannedRagged final : PlannedTopk {
  size_t worker_bytes = 0;
  std::shared_ptr<cpu::ThreadPool> pool;
};

// Sampling: every worker's scratch holds one row (cpu::sampling_worker_bytes).
struct CpuPlannedSampling final : PlannedTopk {
  size_t worker_bytes = 0;
  std::shared_ptr<cpu::ThreadPool> pool;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend() : pool_(std::make_shared<cpu::ThreadPool>(0)), kernel_(best_topk_kernel()) {}

  mtk_backend kind() const override { return MTK_BACKEND_CPU; }
  bool supports_dtype(mtk_dtype dtype) const override { return dtype_info(dtype) != nullptr; }

  void* allocate(size_t bytes) override { return aligned_host_alloc(bytes); }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind, void*) override {
    if (bytes != 0) std::memcpy(dst, src, bytes);
  }
  void synchronize(void*) override {}  // every CPU call has finished when it returns

  std::shared_ptr<const PlannedTopk> plan_topk(const TopkProblem& problem) override {
    auto planned = std::make_shared<CpuPlannedTopk>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      planned->pool = pool_;
    }
    planned->plan = cpu::make_topk_plan(problem, planned->pool->num_threads());
    // Slack to align a caller's workspace, which may start anywhere.
    planned->workspace_bytes = cpu::plan_scratch_bytes(planned->plan) + kScratchAlign;
    return planned;
  }

  void run_topk(const PlannedTopk& planned, const TopkProblem& problem, Workspace workspace,
                void*) override {
    const cpu::TopkPlan& plan = static_cast<const CpuPlannedTopk&>(planned).plan;
    cpu::ThreadPool& pool = *static_cast<const CpuPlannedTopk&>(planned).pool;
    // One call at a time: the scratch and the pool belong to the running call. The pool is the
    // one the plan was made for, kept alive by the plan where set_num_threads has replaced it.
    std::lock_guard<std::mutex> lock(mutex_);
    const cpu::ScratchView view =
        carve_scratch(workspace, plan.shared_bytes, plan.worker_bytes, plan.workers);
    kernel_(problem, plan, pool, view);
  }

  bool supports_indices_only() const override { return true; }

  std::shared_ptr<const PlannedTopk> plan_topk_ragged(const RaggedProblem& problem) override {
    auto planned = std::make_shared<CpuPlannedRagged>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      planned->pool = pool_;
    }
    planned->worker_bytes = cpu::ragged_worker_bytes(problem);
    planned->workspace_bytes =
        planned->worker_bytes * static_cast<size_t>(planned->pool->num_threads()) + kScratchAlign;
    return planned;
  }

  void run_topk_ragged(const PlannedTopk& planned, const RaggedProblem& problem,
                       Workspace workspace, void*) override {
    const auto& ragged = static_cast<const CpuPlannedRagged&>(planned);
    std::lock_guard<std::mutex> lock(mutex_);
    const cpu::ScratchView view =
        carve_scratch(workspace, 0, ragged.worker_bytes, ragged.pool->num_threads());
    cpu::run_ragged(problem, kernel_, *ragged.pool, view.worker);
  }

  std::shared_ptr<const PlannedTopk> plan_sampling(const SamplingProblem& problem) override {
    auto planned = std::make_shared<CpuPlannedSampling>();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      planned->pool = pool_;
    }
    planned->worker_bytes = cpu::sampling_worker_bytes(problem);
    planned->workspace_bytes =
        planned->worker_bytes * static_cast<size_t>(planned->pool->num_threads()) + kScratchAlign;
    return planned;
  }

  void run_sampling(const PlannedTopk& planned, const SamplingProblem& problem,
                    Workspace workspace, void*) override {
    const auto& sampling = static_cast<const CpuPlannedSampling&>(planned);
    std::lock_guard<std::mutex> lock(mutex_);
    const cpu::ScratchView view =
        carve_scratch(workspace, 0, sampling.worker_bytes, sampling.pool->num_threads());
    cpu::run_sampling(problem, *sampling.pool, view.worker);
  }

  void moe_route(const RouterProblem& problem, void*) override {
    std::lock_guard<std::mutex> lock(mutex_);
    cpu::cpu_moe_route(problem, *pool_);
  }

  // Plans are a few integer operations per call, so nothing is cached.
  CacheCounters cache_counters() const override { return CacheCounters{}; }

  size_t scratch_bytes() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t bytes = shared_.bytes();
    for (const ScratchBuffer& buffer : owned_) bytes += buffer.bytes();
    return bytes;
  }

  void set_num_threads(int num_threads) override {  // the core rejected negative counts
    std::lock_guard<std::mutex> lock(mutex_);
    pool_ = std::make_shared<cpu::ThreadPool>(num_threads);
    const size_t workers = static_cast<size_t>(pool_->num_threads());
    if (owned_.size() > workers) owned_.resize(workers);  // drop the scratch of retired workers
  }

 private:
  // One call's scratch, `shared_bytes` and then `worker_bytes` for each of `workers`: from the
  // caller's workspace when there is one, else from the buffers kept across calls.
  cpu::ScratchView carve_scratch(Workspace workspace, size_t shared_bytes, size_t worker_bytes,
                                 int workers) {
    worker_scratch_.resize(static_cast<size_t>(workers));
    cpu::ScratchView view;
    if (workspace.data != nullptr) {  // the core checked its size against the plan
      std::byte* at = align_up(static_cast<std::byte*>(workspace.data));
      view.shared = at;
      at += shared_bytes;
      for (int w = 0; w < workers; ++w, at += worker_bytes) worker_scratch_[w] = at;
    } else {
      view.shared = shared_bytes != 0 ? shared_.reserve(shared_bytes) : nullptr;
      owned_.resize(static_cast<size_t>(workers));
      for (int w = 0; w < workers; ++w) worker_scratch_[w] = owned_[w].reserve(worker_bytes);
    }
    view.worker = worker_scratch_.data();
    return view;
  }

  mutable std::mutex mutex_;
  std::shared_ptr<cpu::ThreadPool> pool_;
  TopkKernel kernel_;
  ScratchBuffer shared_;
  std::vector<ScratchBuffer> owned_;
  std::vector<std::byte*> worker_scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int device_index) {
  if (device_index != 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "device_index = ", device_index,
         " is not valid for the CPU backend (only 0)");
  }
  return std::make_unique<CpuBackend>();
}

namespace {
bool cpu_available() { return true; }
// The default when no GPU backend is available.
const BackendRegistration cpu_registration(MTK_BACKEND_CPU, 1, make_cpu_backend, cpu_available);
}  // namespace

}  // namespace mtk
