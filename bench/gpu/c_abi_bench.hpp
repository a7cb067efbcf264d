// What the C-ABI benchmarks (bench_c_abi.cpp for mtk_topk, bench_router_c_abi.cpp for
// mtk_moe_route) share: status checks, owners of library and CUDA resources, the counter-based
// standard-normal inputs, and burst timing with CUDA events.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "metaltopk.h"

namespace c_abi_bench {

inline void check(mtk_status status, const char* what) {
  if (status != MTK_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + mtk_status_string(status) + ": " +
                             mtk_last_error_message());
  }
}

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

// ---- owners of library and CUDA resources ----------------------------------------------------

class Context {
 public:
  explicit Context(mtk_backend backend) {
    check(mtk_context_create(backend, 0, &handle_), "mtk_context_create");
  }
  ~Context() { mtk_context_destroy(handle_); }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  mtk_context get() const { return handle_; }

 private:
  mtk_context handle_ = nullptr;
};

// Device memory from cudaMalloc, as a runtime with its own allocator would hand to the library.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) {
    check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

class Stream {
 public:
  Stream() {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { check_cuda(cudaEventCreate(&event_), "cudaEventCreate"); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// ---- inputs ----------------------------------------------------------------------------------

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Sample i of a standard-normal sequence (as torch.randn feeds the Python benchmarks), a pure
// function of (seed, i) so a fill can split over threads.
inline float standard_normal(uint64_t seed, size_t i) {
  const uint64_t r = splitmix64(seed * 0x100000001b3ull + i);
  const double u1 = (static_cast<double>(r >> 40) + 1.0) / 16777217.0;  // (0, 1)
  const double u2 = static_cast<double>(r & 0xffffff) / 16777216.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

// float -> bfloat16 bits, round to nearest even (the data holds no NaN).
inline uint16_t to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

// `count` standard-normal samples as float32 or bfloat16 bytes, split over threads for large
// inputs. The value distribution matters: radix-select passes see how keys spread over digits.
inline std::vector<uint8_t> standard_normal_bytes(size_t count, bool bf16, uint64_t seed) {
  std::vector<uint8_t> host(count * (bf16 ? 2 : 4));
  auto fill = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const float value = standard_normal(seed, i);
      if (bf16) {
        const uint16_t bits = to_bfloat16(value);
        std::memcpy(&host[i * 2], &bits, 2);
      } else {
        std::memcpy(&host[i * 4], &value, 4);
      }
    }
  };
  const size_t workers = count < (1u << 20) ? 1 : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  for (size_t w = 0; w < workers; ++w)
    threads.emplace_back(fill, count * w / workers, count * (w + 1) / workers);
  for (auto& t : threads) t.join();
  return host;
}

inline float from_bfloat16(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// A contiguous [rows, columns] tensor at `data`.
inline mtk_tensor describe(void* data, mtk_dtype dtype, int64_t rows, int64_t columns) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 2;
  t.sizes[0] = rows;
  t.sizes[1] = columns;
  t.strides[0] = columns;
  t.strides[1] = 1;
  return t;
}

// ---- command line ----------------------------------------------------------------------------

inline std::vector<std::string> split_fields(const std::string& spec) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1) {
    parts.push_back(spec.substr(start, colon - start));
  }
  parts.push_back(spec.substr(start));
  return parts;
}

inline int positive_option(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw std::runtime_error(std::string(argv[i]) + " needs a value");
  const int value = std::atoi(argv[++i]);
  if (value < 1) throw std::runtime_error(std::string(argv[i - 1]) + " must be positive");
  return value;
}

// Both harnesses' bursts (median_burst_us): `calls` back-to-back calls, timed `reps` times.
struct BurstSettings {
  int calls = 100, reps = 7;
  // Takes --calls N or --reps R at argv[i] (advancing i past the value); false for any other
  // argument.
  bool take_option(const std::string& arg, int argc, char** argv, int& i) {
    if (arg == "--calls") {
      calls = positive_option(argc, argv, i);
    } else if (arg == "--reps") {
      reps = positive_option(argc, argv, i);
    } else {
      return false;
    }
    return true;
  }
};

// ---- timing ----------------------------------------------------------------------------------

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Median over `reps` bursts of (time of `calls` back-to-back calls on `stream`) / calls, in us,
// CUDA events around each whole burst: max(host cost, device time) per call, what a runtime
// issuing calls in a row pays. call(i) issues call i of a burst. With `host_us`, also the median
// of the bursts' enqueue time on the host clock per call: when it is close to the result, the
// calls are host-bound.
template <class Call>
double median_burst_us(cudaStream_t stream, int calls, int reps, Call&& call,
                       double* host_us = nullptr) {
  Event start, end;
  std::vector<double> per_call, host;
  for (int rep = 0; rep < reps; ++rep) {
    check_cuda(cudaEventRecord(start.get(), stream), "cudaEventRecord");
    const auto enqueue_start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call(i);
    host.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                             enqueue_start).count() / calls);
    check_cuda(cudaEventRecord(end.get(), stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end.get()), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start.get(), end.get()), "cudaEventElapsedTime");
    per_call.push_back(1e3 * ms / calls);
  }
  if (host_us != nullptr) *host_us = median(host);
  return median(per_call);
}

// ---- the harness driver ----------------------------------------------------------------------

// What both harnesses do around their shapes: read the command line (`option(arg, argc, argv, i)`
// takes an option and returns whether it knew it; every other argument is a shape for `parse`),
// require a CUDA device (exit 2 without), make the contexts and the stream, then run
// `bench(shape, cuda, cpu, stream, l2_bytes)` on each shape; one shape's exception is reported
// (after `describe(stderr, shape)`) and the others still run. Returns the exit status: 0 when
// every shape passed its check, 1 otherwise.
template <class Parse, class Option, class Bench, class Describe>
int run_shapes(const char* name, const char* usage, int argc, char** argv, Parse&& parse,
               Option&& option, Bench&& bench, Describe&& describe) {
  using Shape = decltype(parse(std::string()));
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!option(arg, argc, argv, i)) shapes.push_back(parse(arg));
  }
  if (shapes.empty()) {
    std::fprintf(stderr, "usage: %s %s\n", name, usage);
    return 1;
  }
  int available = 0;
  check(mtk_backend_query(MTK_BACKEND_CUDA, nullptr, &available), "mtk_backend_query");
  if (!available) {
    std::fprintf(stderr, "%s: no CUDA device\n", name);
    return 2;
  }
  // The stream outlives the contexts: the CUDA context keeps scratch per stream until destroyed.
  Stream stream;
  Context cuda(MTK_BACKEND_CUDA), cpu(MTK_BACKEND_CPU);
  int l2_bytes = 0;
  check_cuda(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "reading the L2 size");
  bool all_ok = true;
  for (const Shape& shape : shapes) {
    try {
      all_ok = bench(shape, cuda.get(), cpu.get(), stream.get(), static_cast<size_t>(l2_bytes)) &&
               all_ok;
    } catch (const std::exception& error) {  // one shape's failure must not hide the rest
      describe(stderr, shape);
      std::fprintf(stderr, ": %s\n", error.what());
      all_ok = false;
    }
  }
  return all_ok ? 0 : 1;
}

// main() of a harness: `run` with any escaping exception reported as `name: what`, exit 1.
template <class Run>
int guarded_main(const char* name, Run&& run) {
  try {
    return run();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s: %s\n", name, error.what());
    return 1;
  }
}

}  // namespace c_abi_bench
