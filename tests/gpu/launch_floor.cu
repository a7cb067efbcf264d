// The floor under every eager call of a one-kernel top-k: back-to-back launches of a kernel that
// does nothing, with a by-value parameter block the size of the library's (RowGeometry plus
// pointers, ~330 bytes), on one stream. Prints one JSON line:
//   eager_us  median over 7 bursts of 100 launches of (burst time by CUDA events) / 100;
//   host_us   the same bursts' enqueue time on the host clock, per launch;
//   graph_us  the 100 launches captured in a CUDA graph and replayed, per launch.
// bench_c_abi's eager_us for the MoE shapes is read against this: what is left above it is the
// library's own host and device time. Exits 2 when no CUDA device is available.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

struct Parameters {
  long long words[41];
};

// The launch copies the whole parameter block whether the kernel reads it or not.
__global__ void empty_kernel(Parameters) {}

bool ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return true;
  std::fprintf(stderr, "launch_floor: %s: %s\n", what, cudaGetErrorString(status));
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "launch_floor: no CUDA device\n");
    return 2;
  }
  constexpr int kCalls = 100, kReps = 7;
  cudaStream_t stream;
  cudaEvent_t start, end;
  if (!ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream") ||
      !ok(cudaEventCreate(&start), "event") || !ok(cudaEventCreate(&end), "event")) {
    return 1;
  }
  const Parameters p{};
  auto burst = [&] {
    for (int i = 0; i < kCalls; ++i) empty_kernel<<<1, 128, 0, stream>>>(p);
  };
  burst();
  if (!ok(cudaStreamSynchronize(stream), "warm-up")) return 1;

  std::vector<double> eager, host;
  for (int rep = 0; rep < kReps; ++rep) {
    cudaEventRecord(start, stream);
    const auto t0 = std::chrono::steady_clock::now();
    burst();
    const auto t1 = std::chrono::steady_clock::now();
    cudaEventRecord(end, stream);
    if (!ok(cudaEventSynchronize(end), "burst")) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    eager.push_back(1e3 * ms / kCalls);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
  }

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  if (!ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture")) return 1;
  burst();
  if (!ok(cudaStreamEndCapture(stream, &graph), "capture") ||
      !ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate")) {
    return 1;
  }
  std::vector<double> replay;
  for (int rep = 0; rep < kReps; ++rep) {
    cudaEventRecord(start, stream);
    cudaGraphLaunch(exec, stream);
    cudaEventRecord(end, stream);
    if (!ok(cudaEventSynchronize(end), "replay")) return 1;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    replay.push_back(1e3 * ms / kCalls);
  }
  std::printf("{\"empty_kernel\": true, \"eager_us\": %.3f, \"host_us\": %.3f, \"graph_us\": %.3f}\n",
              median(eager), median(host), median(replay));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 0;
}
