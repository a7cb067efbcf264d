// The CUDA backend: device memory, copies, stream-ordered top-k with a cached plan per shape,
// the fused router and the sampling filters. Every entry point makes the context's device current and restores the
// caller's device afterwards.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "core/backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/fault_injection.hpp"
#include "core/ragged_rows.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/moe_route.hpp"
#include "cuda/sampling.hpp"
#include "cuda/scratch_cache.hpp"
#include "cuda/topk_launch.hpp"
#include "cuda/topk_plan.hpp"

namespace mtk {
namespace cuda {

namespace {

constexpr size_t kPlanCacheCapacity = 1024;

cudaMemcpyKind to_cuda(mtk_copy_kind kind) {
  switch (kind) {
    case MTK_COPY_HOST_TO_DEVICE: return cudaMemcpyHostToDevice;
    case MTK_COPY_DEVICE_TO_HOST: return cudaMemcpyDeviceToHost;
    case MTK_COPY_DEVICE_TO_DEVICE: return cudaMemcpyDeviceToDevice;
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, "copy kind = ", int(kind), " is not a known mtk_copy_kind");
}

// Says what is missing: the driver itself, a driver new enough for this runtime, or a device.
[[noreturn]] void fail_unavailable(cudaError_t status) {
  int driver = 0;
  cudaDriverGetVersion(&driver);  // 0 where no driver library could be loaded
  cudaGetLastError();
  const auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  if (status == cudaErrorInsufficientDriver && driver == 0) {
    fail(MTK_ERROR_BACKEND_UNAVAILABLE,
         "backend 'cuda' is unavailable: no CUDA driver was found (libcuda could not be loaded)");
  }
  if (status == cudaErrorInsufficientDriver) {
    fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend 'cuda' is unavailable: the CUDA driver supports "
         "CUDA ", version(driver), " but this library needs CUDA ", version(CUDART_VERSION),
         "; update the driver");
  }
  if (status == cudaErrorNoDevice || status == cudaSuccess) {
    fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend 'cuda' is unavailable: the CUDA driver (CUDA ",
         version(driver), ") sees no device (check CUDA_VISIBLE_DEVICES)");
  }
  fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend 'cuda' is unavailable: ",
       cudaGetErrorString(status));
}

int device_count_or_fail() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) fail_unavailable(status);
  return count;
}

// The backend's plan of a shape, cached and shared by every call of that shape.
struct CudaPlannedTopk final : PlannedTopk {
  TopkPlan plan;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device), scratch_(device) {
    const int count = device_count_or_fail();
    if (device >= count) {
      fail(MTK_ERROR_BACKEND_UNAVAILABLE, "device_index = ", device, " but only ", count,
           " CUDA device(s) are present");
    }
    check_cuda(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device),
               "reading the multiprocessor count");
    check_cuda(cudaDeviceGetAttribute(&l2_bytes_, cudaDevAttrL2CacheSize, device),
               "reading the L2 cache size");
    DeviceGuard guard(device_);
    cluster_rows_ = max_active_select_clusters();
    split_capacity_ = sampling_split_capacity();
  }

  mtk_backend kind() const override { return MTK_BACKEND_CUDA; }
  bool supports_dtype(mtk_dtype dtype) const override { return dtype_info(dtype) != nullptr; }

  void* allocate(size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    check_cuda(cudaMalloc(&ptr, bytes), "allocating device memory");
    return ptr;
  }

  void deallocate(void* ptr) noexcept override {
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;
    if (previous != device_) cudaSetDevice(device_);
    cudaFree(ptr);
    cudaGetLastError();
    if (previous != device_) cudaSetDevice(previous);
  }

  void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind kind, void* stream) override {
    DeviceGuard guard(device_);
    check_cuda(cudaMemcpyAsync(dst, src, bytes, to_cuda(kind), static_cast<cudaStream_t>(stream)),
               "copying memory");
  }

  void synchronize(void* stream) override {
    DeviceGuard guard(device_);
    check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)),
               "synchronizing the stream");
  }

  std::shared_ptr<const PlannedTopk> plan_topk(const TopkProblem& problem) override {
    return cached_plan(problem, false);
  }

  void run_topk(const PlannedTopk& planned, const TopkProblem& problem, Workspace workspace,
                void* stream_handle) override {
    run(planned, problem, RaggedRows{}, workspace, stream_handle);
  }

  bool supports_indices_only() const override { return true; }

  // Ragged rows are planned by their dense shape (see topk_plan.hpp); their windows are read on
  // the device, so nothing here waits for the stream.
  std::shared_ptr<const PlannedTopk> plan_topk_ragged(const RaggedProblem& problem) override {
    return cached_plan(problem.dense, true);
  }

  void run_topk_ragged(const PlannedTopk& planned, const RaggedProblem& problem,
                       Workspace workspace, void* stream_handle) override {
    run(planned, problem.dense, ragged_rows_of(problem), workspace, stream_handle);
  }

  // The sampling filters and samplers (sampling.cu): one kernel, scratch as run() takes it.
  std::shared_ptr<const PlannedTopk> plan_sampling(const SamplingProblem& problem) override {
    auto planned = std::make_shared<PlannedTopk>();
    planned->workspace_bytes = sampling_workspace_bytes(problem);
    return planned;
  }

  void run_sampling(const PlannedTopk& planned, const SamplingProblem& problem,
                    Workspace workspace, void* stream_handle) override {
    const auto stream = static_cast<cudaStream_t>(stream_handle);
    DeviceGuard guard(device_);
    fault_point(FaultSite::DeviceCall);  // the kernel launch
    if (planned.workspace_bytes == 0 || workspace.data != nullptr) {
      launch_sampling(problem, workspace.data, split_capacity_, stream);
    } else {
      const ScratchCache::Lease lease = scratch_.acquire(stream, planned.workspace_bytes);
      launch_sampling(problem, lease.data(), split_capacity_, stream);
    }
  }

  void moe_route(const RouterProblem& problem, void* stream) override {
    DeviceGuard guard(device_);
    fault_point(FaultSite::DeviceCall);  // the router's launch
    cuda_moe_route(problem, sm_count_, static_cast<cudaStream_t>(stream));
  }

  CacheCounters cache_counters() const override { return plans_.counters(); }
  size_t scratch_bytes() const override { return scratch_.bytes_held(); }

  void set_num_threads(int) override {
    fail(MTK_ERROR_INVALID_ARGUMENT,
         "num_threads applies to CPU contexts only; a CUDA context has no worker threads");
  }

 private:
  std::shared_ptr<const PlannedTopk> cached_plan(const TopkProblem& problem, bool ragged) {
    const RowGeometry& g = problem.geometry;
    const PlanKey key{problem.dtype, g.rows, g.n, g.k, ragged};
    return plans_.get_or_create(key, [&] {
      DeviceGuard guard(device_);  // CUB's scratch sizing may touch the device
      auto planned = std::make_shared<CudaPlannedTopk>();
      planned->plan = make_topk_plan(key, DeviceLimits{sm_count_, l2_bytes_, cluster_rows_},
                                     winner_sort_temp_bytes);
      planned->workspace_bytes = planned->plan.workspace_bytes;
      return std::shared_ptr<const CudaPlannedTopk>(std::move(planned));
    });
  }

  void run(const PlannedTopk& planned, const TopkProblem& problem, const RaggedRows& ragged,
           Workspace workspace, void* stream_handle) {
    const TopkPlan& plan = static_cast<const CudaPlannedTopk&>(planned).plan;
    const auto stream = static_cast<cudaStream_t>(stream_handle);
    DeviceGuard guard(device_);
    if (plan.workspace_bytes == 0) {
      launch(problem, ragged, plan, nullptr, stream);
    } else if (workspace.data != nullptr) {
      launch(problem, ragged, plan, workspace.data, stream);
    } else {
      const ScratchCache::Lease lease = scratch_.acquire(stream, plan.workspace_bytes);
      launch(problem, ragged, plan, lease.data(), stream);
    }
  }

  static void launch(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                     void* scratch, cudaStream_t stream) {
    fault_point(FaultSite::DeviceCall);  // the kernel launches below
    switch (dtype_info(problem.dtype)->size) {
      case 1: launch_topk_key8(problem, ragged, plan, scratch, stream); return;
      case 2: launch_topk_key16(problem, ragged, plan, scratch, stream); return;
      case 4: launch_topk_key32(problem, ragged, plan, scratch, stream); return;
      case 8: launch_topk_key64(problem, ragged, plan, scratch, stream); return;
    }
    fail(MTK_ERROR_INTERNAL, "no CUDA kernels for dtype ", dtype_name(problem.dtype));
  }

  int device_;
  int sm_count_ = 0;
  int l2_bytes_ = 0;
  int cluster_rows_ = 0;
  SplitCapacity split_capacity_;
  LruCache<PlanKey, std::shared_ptr<const CudaPlannedTopk>, PlanKeyHash> plans_{
      kPlanCacheCapacity};
  ScratchCache scratch_;
};

}  // namespace
}  // namespace cuda

namespace {

bool cuda_backend_available() {
  int count = 0;
  const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  cudaGetLastError();
  return ok;
}

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  return std::make_unique<cuda::CudaBackend>(device_index);
}

// The default wherever a CUDA device is present.
const BackendRegistration cuda_registration(MTK_BACKEND_CUDA, 3, make_cuda_backend,
                                            cuda_backend_available);

}  // namespace

}  // namespace mtk
