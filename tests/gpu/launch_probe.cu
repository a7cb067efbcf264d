// Experiment: host cost per launch by launch path and parameter size; graph replay per launch
// with and without programmatic dependent launch, for an empty kernel and a 1x256 bf16 top-8-like
// kernel (one warp reads 512 bytes, reduces, writes 8 values).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

template <int Words> struct Params { long long words[Words]; };

template <int Words> __global__ void empty_kernel(Params<Words>) {}

__global__ void empty_pdl_kernel(Params<41>) {
  asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

template <bool Pdl>
__global__ void tiny_kernel(const uint4* in, unsigned* out, Params<36>) {
  if (Pdl) asm volatile("griddepcontrol.launch_dependents;");
  const int lane = threadIdx.x;
  if (Pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  const uint4 v = in[lane];
  unsigned m = max(max(v.x, v.y), max(v.z, v.w));
  for (int r = 0; r < 8; ++r) {
    const unsigned w = __reduce_max_sync(0xffffffffu, m);
    if (m == w) m = 0;
    if (lane == r) out[r] = w;
  }
}

void check(cudaError_t s, const char* what) {
  if (s != cudaSuccess) {
    std::fprintf(stderr, "launch_probe: %s: %s\n", what, cudaGetErrorString(s));
    std::exit(1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr int kCalls = 200, kReps = 9;
cudaStream_t stream;
cudaEvent_t start, end;

template <class F> void eager(const char* name, F&& launch) {
  for (int i = 0; i < kCalls; ++i) launch();
  check(cudaStreamSynchronize(stream), name);
  std::vector<double> ev, host;
  for (int rep = 0; rep < kReps; ++rep) {
    check(cudaEventRecord(start, stream), "record");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kCalls; ++i) launch();
    const auto t1 = std::chrono::steady_clock::now();
    check(cudaEventRecord(end, stream), "record");
    check(cudaEventSynchronize(end), name);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    ev.push_back(1e3 * ms / kCalls);
    host.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kCalls);
  }
  check(cudaGetLastError(), name);
  std::printf("{\"probe\": \"eager\", \"name\": \"%s\", \"eager_us\": %.3f, \"host_us\": %.3f}\n",
              name, median(ev), median(host));
}

template <class F> void replay(const char* name, F&& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
  for (int i = 0; i < kCalls; ++i) launch();
  check(cudaStreamEndCapture(stream, &graph), name);
  check(cudaGraphInstantiate(&exec, graph, 0), name);
  check(cudaGraphLaunch(exec, stream), name);
  check(cudaStreamSynchronize(stream), name);
  std::vector<double> ev;
  for (int rep = 0; rep < kReps; ++rep) {
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), name);
    check(cudaEventRecord(end, stream), "record");
    check(cudaEventSynchronize(end), name);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, end);
    ev.push_back(1e3 * ms / kCalls);
  }
  std::printf("{\"probe\": \"graph\", \"name\": \"%s\", \"graph_us\": %.3f}\n", name, median(ev));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

template <class Kernel, class... Args>
void launch_ex(bool pdl, Kernel kernel, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = pdl ? 1 : 0;
  check(cudaLaunchKernelEx(&config, kernel, args...), "cudaLaunchKernelEx");
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 2;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&end), "event");
  uint4* in;
  unsigned* out;
  check(cudaMalloc(&in, 512), "malloc");
  check(cudaMalloc(&out, 64), "malloc");
  check(cudaMemset(in, 0x5a, 512), "memset");

  const Params<1> p1{};
  const Params<8> p8{};
  const Params<16> p16{};
  const Params<41> p41{};
  const Params<36> p36{};

  eager("chevron_8B", [&] { empty_kernel<<<1, 128, 0, stream>>>(p1); });
  eager("chevron_64B", [&] { empty_kernel<<<1, 128, 0, stream>>>(p8); });
  eager("chevron_128B", [&] { empty_kernel<<<1, 128, 0, stream>>>(p16); });
  eager("chevron_328B", [&] { empty_kernel<<<1, 128, 0, stream>>>(p41); });
  eager("ex_328B", [&] { launch_ex(false, empty_kernel<41>, p41); });
  eager("ex_pdl_328B", [&] { launch_ex(true, empty_pdl_kernel, p41); });

  // The driver's launch, reached through the runtime (no -lcuda).
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                unsigned, unsigned, CUstream, void**, void**);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found;
  check(cudaGetDriverEntryPoint("cuLaunchKernel", &entry, cudaEnableDefault, &found),
        "entry point");
  auto cu_launch = reinterpret_cast<LaunchFn>(entry);
  cudaFunction_t f41, f1;
  check(cudaGetFuncBySymbol(&f41, reinterpret_cast<const void*>(empty_kernel<41>)), "func");
  check(cudaGetFuncBySymbol(&f1, reinterpret_cast<const void*>(empty_kernel<1>)), "func");
  Params<41> q41{};
  Params<1> q1{};
  void* args41[] = {&q41};
  void* args1[] = {&q1};
  eager("driver_328B", [&] {
    if (cu_launch(CUfunction(f41), 1, 1, 1, 128, 1, 1, 0, CUstream(stream), args41, nullptr) != 0)
      std::exit(3);
  });
  eager("driver_8B", [&] {
    if (cu_launch(CUfunction(f1), 1, 1, 1, 128, 1, 1, 0, CUstream(stream), args1, nullptr) != 0)
      std::exit(3);
  });

  eager("tiny", [&] { launch_ex(false, tiny_kernel<false>, (const uint4*)in, out, p36); });
  eager("tiny_pdl", [&] { launch_ex(true, tiny_kernel<true>, (const uint4*)in, out, p36); });

  replay("empty_328B", [&] { empty_kernel<<<1, 128, 0, stream>>>(p41); });
  replay("empty_pdl_328B", [&] { launch_ex(true, empty_pdl_kernel, p41); });
  replay("tiny", [&] { launch_ex(false, tiny_kernel<false>, (const uint4*)in, out, p36); });
  replay("tiny_pdl", [&] { launch_ex(true, tiny_kernel<true>, (const uint4*)in, out, p36); });
  return 0;
}
