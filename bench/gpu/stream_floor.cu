// The threshold pass's read alone: how fast 256 threads a block, 4 blocks an SM, stream a batch
// of rows when each block reads its own contiguous segment (as multi_threshold_kernel does),
// against other orders of the same bytes. Each kernel counts the elements above a threshold,
// so every load is used. Times are medians of cudaEvent-timed launches.
//
//   make build/bench/gpu/stream_floor   (bench/gpu/gpu.mk), then
//   build/bench/gpu/stream_floor [rows] [n]      (default 256 131072; exit 2 without a device)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p));
  return r;
}

__device__ __forceinline__ uint32_t above(const uint4& d, float t) {
  return (__uint_as_float(d.x) > t) + (__uint_as_float(d.y) > t) + (__uint_as_float(d.z) > t) +
         (__uint_as_float(d.w) > t);
}

// Reads vectors [first, end) of `vectors` in steps of Loads * kThreads, starting at step
// `rotate` and wrapping around; the steps' remainder last.
template <int Loads>
__device__ uint32_t stream(const uint4* vectors, int64_t first, int64_t end, int64_t rotate,
                           float t) {
  constexpr int64_t kStep = int64_t(Loads) * kThreads;
  const int64_t steps = (end - first) / kStep;
  uint32_t count = 0;
  for (int64_t s = 0; s < steps; ++s) {
    int64_t c = s + rotate;
    if (c >= steps) c -= steps;
    const int64_t v = first + c * kStep + threadIdx.x;
    uint4 data[Loads];
#pragma unroll
    for (int u = 0; u < Loads; ++u) data[u] = load_streaming(vectors + v + u * kThreads);
#pragma unroll
    for (int u = 0; u < Loads; ++u) count += above(data[u], t);
  }
  for (int64_t v = first + steps * kStep + threadIdx.x; v < end; v += kThreads) {
    count += above(load_streaming(vectors + v), t);
  }
  return count;
}

// Segments: block b of a row reads the row's b-th contiguous share. `rotate_steps` != 0 starts
// each block at a different step of its share.
template <int Loads>
__global__ void __launch_bounds__(kThreads, 4)
    segments_kernel(const float* input, int64_t n, int blocks_per_row, bool rotate,
                    uint32_t* out) {
  const int64_t row = blockIdx.x / blocks_per_row;
  const int seg = blockIdx.x % blocks_per_row;
  const int64_t vectors_per_row = n / 4;
  const int64_t share = (vectors_per_row + blocks_per_row - 1) / blocks_per_row;
  const int64_t first = row * vectors_per_row + seg * share;
  const int64_t end = row * vectors_per_row + min(vectors_per_row, (seg + 1) * share);
  constexpr int64_t kStep = int64_t(Loads) * kThreads;
  const int64_t steps = max(int64_t(1), (end - first) / kStep);
  const int64_t rotation = rotate ? (int64_t(blockIdx.x) * 7) % steps : 0;
  const uint32_t c = stream<Loads>(reinterpret_cast<const uint4*>(input), first, end, rotation,
                                   0.5f);
  if (c == 0xffffffffu) out[blockIdx.x] = c;
}

// Interleaved: the whole batch in chunks of a step, chunk i to block i mod grid.
template <int Loads>
__global__ void __launch_bounds__(kThreads, 4)
    interleaved_kernel(const float* input, int64_t total, uint32_t* out) {
  constexpr int64_t kStep = int64_t(Loads) * kThreads;
  const uint4* vectors = reinterpret_cast<const uint4*>(input);
  const int64_t chunks = total / 4 / kStep;
  uint32_t count = 0;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t v = c * kStep + threadIdx.x;
    uint4 data[Loads];
#pragma unroll
    for (int u = 0; u < Loads; ++u) data[u] = load_streaming(vectors + v + u * kThreads);
#pragma unroll
    for (int u = 0; u < Loads; ++u) count += above(data[u], 0.5f);
  }
  if (count == 0xffffffffu) out[blockIdx.x] = count;
}

template <class Launch>
float median_us(Launch&& launch) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> times;
  for (int rep = 0; rep < 25; ++rep) {
    cudaEventRecord(a);
    launch();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    if (rep >= 5) times.push_back(ms * 1000);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 256;
  const int64_t n = argc > 2 ? std::atoll(argv[2]) : 131072;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("stream_floor: no CUDA device\n");
    return 2;
  }
  if (rows < 1 || n < 4096 || n % 4 != 0) {
    std::printf("stream_floor: rows >= 1 and n a multiple of 4 of at least 4096\n");
    return 1;
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t total = rows * n;
  float* input;
  uint32_t* out;
  cudaMalloc(&input, total * sizeof(float));
  cudaMalloc(&out, 1 << 20);
  cudaMemset(input, 0x3f, total * sizeof(float));
  float* copy;
  cudaMalloc(&copy, total * sizeof(float));
  const double bytes = double(total) * sizeof(float);
  const float copy_us = median_us([&] {
    cudaMemcpyAsync(copy, input, total * sizeof(float), cudaMemcpyDeviceToDevice);
  });
  std::printf("%lld x %lld f32, %.1f MB, %d SMs; cudaMemcpy D2D %.1f us (%.0f GB/s read+write)\n",
              (long long)rows, (long long)n, bytes / 1e6, sms, copy_us, 2 * bytes / copy_us / 1e3);
  const int one_wave_per_row = std::max<int64_t>(1, 4 * sms / rows);
  auto report = [&](const char* name, float us) {
    std::printf("%-44s %8.1f us %7.0f GB/s\n", name, us, bytes / us / 1e3);
  };
  for (int bpr : {one_wave_per_row, 2 * one_wave_per_row}) {
    const unsigned grid = unsigned(rows * bpr);
    char name[96];
    std::snprintf(name, sizeof name, "segments, %d blocks a row, 4 loads", bpr);
    report(name, median_us([&] { segments_kernel<4><<<grid, kThreads>>>(input, n, bpr, false, out); }));
    std::snprintf(name, sizeof name, "segments, %d blocks a row, 4 loads, rotated", bpr);
    report(name, median_us([&] { segments_kernel<4><<<grid, kThreads>>>(input, n, bpr, true, out); }));
    std::snprintf(name, sizeof name, "segments, %d blocks a row, 8 loads", bpr);
    report(name, median_us([&] { segments_kernel<8><<<grid, kThreads>>>(input, n, bpr, false, out); }));
    std::snprintf(name, sizeof name, "segments, %d blocks a row, 8 loads, rotated", bpr);
    report(name, median_us([&] { segments_kernel<8><<<grid, kThreads>>>(input, n, bpr, true, out); }));
  }
  for (int per_sm : {4, 8}) {
    const unsigned grid = unsigned(per_sm * sms);
    char name[96];
    std::snprintf(name, sizeof name, "interleaved, %d blocks an SM, 4 loads", per_sm);
    report(name, median_us([&] { interleaved_kernel<4><<<grid, kThreads>>>(input, total, out); }));
    std::snprintf(name, sizeof name, "interleaved, %d blocks an SM, 8 loads", per_sm);
    report(name, median_us([&] { interleaved_kernel<8><<<grid, kThreads>>>(input, total, out); }));
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
