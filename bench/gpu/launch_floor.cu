// The floor under every eager call of a one-kernel top-k: back-to-back launches of a kernel that
// does nothing, with a by-value parameter block the size of the library's (RowGeometry plus
// pointers, ~330 bytes), on one stream. Two launch kinds:
//   plain       kernel<<<...>>>;
//   overlapped  cudaLaunchKernelEx with programmatic stream serialization, the kernel waiting
//               for its predecessor first thing;
//   driver      the same launch through the driver's cuLaunchKernelEx with a kernel handle
//               found once, after asking the driver for the thread's current context: how the
//               library launches every kernel (lib/cuda/kernel_launch.cuh);
//   cluster     overlapped, one cluster of 16 blocks of 512 threads (the non-portable size)
//               that pass one cluster barrier: the floor under cluster_select_kernel, launched
//               as the library launches it (launch_overlapped_in_clusters);
//   rounds      the same cluster passing cluster_select_kernel's skeleton without its data:
//               four rounds of what each radix round synchronises (a block barrier, each
//               block adding 256 counts into their owners' shared memory, the cluster
//               barrier, each block reading the 256 sums back, four block barriers): what the
//               rounds cost before any key is counted.
// Prints one JSON line with, for each kind (prefix plain_ / overlapped_ / driver_ / cluster_ /
// rounds_):
//   eager_us  median over 7 bursts of 100 launches of (burst time by CUDA events) / 100;
//   host_us   the same bursts' enqueue time on the host clock, per launch;
//   graph_us  the 100 launches captured in a CUDA graph and replayed, per launch.
// bench_c_abi's eager_us for the MoE shapes is read against the driver kind: what is left
// above it is the library's own host and device time. Exits 2 when no CUDA device is available.
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Parameters {
  long long words[41];
};

// The launch copies the whole parameter block whether the kernel reads it or not.
__global__ void empty_kernel(Parameters) {}

__global__ void empty_overlapped_kernel(Parameters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__global__ void empty_cluster_kernel(Parameters) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  cooperative_groups::this_cluster().sync();
#endif
}

constexpr unsigned kClusterBlocks = 16, kClusterThreads = 512, kBins = 256, kRounds = 4;

__global__ void cluster_rounds_kernel(Parameters, unsigned* sink) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  constexpr unsigned kOwned = kBins / kClusterBlocks;
  __shared__ unsigned owned[kRounds][kOwned];
  auto cluster = cooperative_groups::this_cluster();
  if (threadIdx.x < kRounds * kOwned) owned[threadIdx.x / kOwned][threadIdx.x % kOwned] = 0;
  cluster.sync();
  const unsigned owner = threadIdx.x / kOwned, bin = threadIdx.x % kOwned;
  unsigned total = 0;
  for (unsigned round = 0; round < kRounds; ++round) {
    __syncthreads();
    if (threadIdx.x < kBins) atomicAdd(cluster.map_shared_rank(&owned[round][bin], owner), 1u);
    cluster.sync();
    if (threadIdx.x < kBins) total += *cluster.map_shared_rank(&owned[round][bin], owner);
    for (int barrier = 0; barrier < 4; ++barrier) __syncthreads();
  }
  cluster.sync();  // no block leaves while another may still read its counts
  if (threadIdx.x < kBins && total == 0) *sink = total;  // keeps the reads; never true
#endif
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "launch_floor: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Floor {
  double eager_us, host_us, graph_us;
};

constexpr int kCalls = 100, kReps = 7;

template <class Burst>
Floor measure(cudaStream_t stream, Burst&& burst) {
  cudaEvent_t start, end;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&end), "event");
  burst();
  check(cudaStreamSynchronize(stream), "warm-up");

  std::vector<double> eager, host;
  for (int rep = 0; rep < kReps; ++rep) {
    check(cudaEventRecord(start, stream), "event record");
    const auto t0 = std::chrono::steady_clock::now();
    burst();
    const auto t1 = std::chrono::steady_clock::now();
    check(cudaEventRecord(end, stream), "event record");
    check(cudaEventSynchronize(end), "burst");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, end), "elapsed time");
    eager.push_back(1e3 * ms / kCalls);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
  }

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  burst();
  check(cudaStreamEndCapture(stream, &graph), "capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  std::vector<double> replay;
  for (int rep = 0; rep < kReps; ++rep) {
    check(cudaEventRecord(start, stream), "event record");
    check(cudaGraphLaunch(exec, stream), "replay");
    check(cudaEventRecord(end, stream), "event record");
    check(cudaEventSynchronize(end), "replay");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, end), "elapsed time");
    replay.push_back(1e3 * ms / kCalls);
  }
  check(cudaGraphExecDestroy(exec), "graph");
  check(cudaGraphDestroy(graph), "graph");
  check(cudaEventDestroy(start), "event");
  check(cudaEventDestroy(end), "event");
  return {median(eager), median(host), median(replay)};
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "launch_floor: no CUDA device\n");
    return 2;
  }
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const Parameters p{};

  const Floor plain = measure(stream, [&] {
    for (int i = 0; i < kCalls; ++i) empty_kernel<<<1, 128, 0, stream>>>(p);
    check(cudaGetLastError(), "plain launch");
  });

  cudaLaunchAttribute overlap{};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(128);
  config.stream = stream;
  config.attrs = &overlap;
  config.numAttrs = 1;
  const Floor overlapped = measure(stream, [&] {
    for (int i = 0; i < kCalls; ++i) {
      check(cudaLaunchKernelEx(&config, empty_overlapped_kernel, p), "overlapped launch");
    }
  });

  // The driver's launch, reached through the runtime as the library reaches it (no -lcuda).
  using DriverLaunch = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found;
  check(cudaGetDriverEntryPointByVersion("cuLaunchKernelEx", &entry, 12000, cudaEnableDefault,
                                         &found),
        "driver entry point");
  if (found != cudaDriverEntryPointSuccess) check(cudaErrorNotSupported, "cuLaunchKernelEx");
  const auto driver_launch = reinterpret_cast<DriverLaunch>(entry);
  check(cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &entry, 12000, cudaEnableDefault,
                                         &found),
        "driver entry point");
  if (found != cudaDriverEntryPointSuccess) check(cudaErrorNotSupported, "cuCtxGetCurrent");
  const auto current_context = reinterpret_cast<CUresult (*)(CUcontext*)>(entry);
  cudaKernel_t kernel;
  check(cudaGetKernel(&kernel, reinterpret_cast<const void*>(empty_overlapped_kernel)), "kernel");
  CUlaunchAttribute driver_overlap{};
  driver_overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  driver_overlap.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig driver_config{};
  driver_config.gridDimX = driver_config.gridDimY = driver_config.gridDimZ = 1;
  driver_config.blockDimX = 128;
  driver_config.blockDimY = driver_config.blockDimZ = 1;
  driver_config.hStream = stream;
  driver_config.attrs = &driver_overlap;
  driver_config.numAttrs = 1;
  Parameters argument = p;
  void* arguments[] = {&argument};
  const Floor driver = measure(stream, [&] {
    for (int i = 0; i < kCalls; ++i) {
      CUcontext context = nullptr;
      if (current_context(&context) != CUDA_SUCCESS || context == nullptr ||
          driver_launch(&driver_config, reinterpret_cast<CUfunction>(kernel), arguments,
                        nullptr) != CUDA_SUCCESS) {
        check(cudaErrorLaunchFailure, "driver launch");
      }
    }
  });

  check(cudaFuncSetAttribute(empty_cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1),
        "non-portable cluster size");
  cudaLaunchAttribute cluster_attributes[2] = {overlap, {}};
  cluster_attributes[1].id = cudaLaunchAttributeClusterDimension;
  cluster_attributes[1].val.clusterDim.x = kClusterBlocks;
  cluster_attributes[1].val.clusterDim.y = cluster_attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cluster_config = config;
  cluster_config.gridDim = dim3(kClusterBlocks);
  cluster_config.blockDim = dim3(kClusterThreads);
  cluster_config.attrs = cluster_attributes;
  cluster_config.numAttrs = 2;
  const Floor cluster = measure(stream, [&] {
    for (int i = 0; i < kCalls; ++i) {
      check(cudaLaunchKernelEx(&cluster_config, empty_cluster_kernel, p), "cluster launch");
    }
  });

  check(cudaFuncSetAttribute(cluster_rounds_kernel,
                             cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
        "non-portable cluster size");
  unsigned* sink = nullptr;
  check(cudaMalloc(&sink, sizeof(unsigned)), "sink");
  const Floor rounds = measure(stream, [&] {
    for (int i = 0; i < kCalls; ++i) {
      check(cudaLaunchKernelEx(&cluster_config, cluster_rounds_kernel, p, sink), "rounds launch");
    }
  });
  check(cudaFree(sink), "sink");

  std::printf("{\"empty_kernel\": true, \"plain_eager_us\": %.3f, \"plain_host_us\": %.3f, "
              "\"plain_graph_us\": %.3f, \"overlapped_eager_us\": %.3f, "
              "\"overlapped_host_us\": %.3f, \"overlapped_graph_us\": %.3f, "
              "\"driver_eager_us\": %.3f, \"driver_host_us\": %.3f, \"driver_graph_us\": %.3f, "
              "\"cluster_eager_us\": %.3f, \"cluster_host_us\": %.3f, "
              "\"cluster_graph_us\": %.3f, \"rounds_eager_us\": %.3f, \"rounds_host_us\": %.3f, "
              "\"rounds_graph_us\": %.3f}\n",
              plain.eager_us, plain.host_us, plain.graph_us, overlapped.eager_us,
              overlapped.host_us, overlapped.graph_us, driver.eager_us, driver.host_us,
              driver.graph_us, cluster.eager_us, cluster.host_us, cluster.graph_us,
              rounds.eager_us, rounds.host_us, rounds.graph_us);
  check(cudaStreamDestroy(stream), "stream");
  return 0;
}
