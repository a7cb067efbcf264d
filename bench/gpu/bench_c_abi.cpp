// Eager per-call cost of mtk_topk on CUDA as a C/C++ runtime (e.g. an AOT-compiled PyTorch
// model) sees it: descriptors built once, calls made straight through the C ABI on one stream,
// host launch overhead included. bench_cuda.py runs this binary and merges its lines into its
// table, so the shape list lives in one place (bench_cuda.py's SHAPES).
//
// Usage: bench_c_abi [--calls N] [--reps R] [--singles S] SHAPE...
//   SHAPE = family:rows:n:k:dtype:dim  (dtype float32 or bfloat16; dim 0 means the input is
//           [n, rows] and the top-k runs down its columns, as in bench_cuda.py)
// Per shape and per sorted mode, prints one JSON line:
//   eager_us   median over R repetitions of (time of N back-to-back calls) / N, CUDA events
//              around the whole burst: max(host cost, device time) per call, what a runtime
//              issuing calls in a row pays;
//   host_us    the same bursts' enqueue time on the host clock, per call (host-bound when it is
//              close to eager_us; bench/gpu/launch_floor gives the floor of one launch);
//   single_us  median of S single calls, each bracketed by events on an idle GPU (host cost +
//              launch latency + device time): the method bench_cuda.py uses for "eager".
// Before timing, each shape's result (sorted and unsorted) is checked bit for bit against the
// CPU backend on the same data, so a wrong answer is never timed.
// Exits 0 on success, 1 on a failure or mismatch, 2 when no CUDA device is available.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "c_abi_bench.hpp"
#include "metaltopk.h"

namespace {

using namespace c_abi_bench;

// ---- shapes and data -------------------------------------------------------------------------

struct Shape {
  std::string family;
  int64_t rows, n, k;
  std::string dtype_name;
  mtk_dtype dtype;
  int64_t dim;  // 0: input is [n, rows], top-k along dim 0; -1: input is [rows, n]
  size_t itemsize;
};

Shape parse_shape(const std::string& spec) {
  const std::vector<std::string> parts = split_fields(spec);
  if (parts.size() != 6)
    throw std::runtime_error("shape '" + spec + "' is not family:rows:n:k:dtype:dim");
  Shape s{parts[0], std::stoll(parts[1]), std::stoll(parts[2]), std::stoll(parts[3]),
          parts[4], MTK_FLOAT32,          std::stoll(parts[5]), 4};
  if (s.dtype_name == "bfloat16") {
    s.dtype = MTK_BFLOAT16;
    s.itemsize = 2;
  } else if (s.dtype_name != "float32") {
    throw std::runtime_error("shape '" + spec + "': dtype must be float32 or bfloat16");
  }
  if (s.rows < 1 || s.n < 1 || s.k < 1 || s.k > s.n || (s.dim != 0 && s.dim != -1)) {
    throw std::runtime_error("shape '" + spec + "' is out of range");
  }
  return s;
}

std::vector<uint8_t> random_input(const Shape& s, uint64_t seed) {
  return standard_normal_bytes(static_cast<size_t>(s.rows * s.n), s.dtype == MTK_BFLOAT16, seed);
}

// The input and output descriptors of one shape (contiguous; dim 0 swaps the two sizes).
struct Descriptors {
  mtk_tensor input, values, indices;
};

Descriptors describe_problem(const Shape& s, void* input, void* values, void* indices) {
  const bool columns = s.dim == 0;
  return {describe(input, s.dtype, columns ? s.n : s.rows, columns ? s.rows : s.n),
          describe(values, s.dtype, columns ? s.k : s.rows, columns ? s.rows : s.k),
          describe(indices, MTK_INT64, columns ? s.k : s.rows, columns ? s.rows : s.k)};
}

// ---- verification against the CPU backend ----------------------------------------------------

struct HostResult {
  std::vector<uint8_t> values;
  std::vector<int64_t> indices;
};

HostResult run_cuda_once(const Shape& s, mtk_context ctx, const Descriptors& d, int sorted,
                         cudaStream_t stream) {
  check(mtk_topk(ctx, &d.input, s.k, s.dim, 1, sorted, &d.values, &d.indices, stream),
        "mtk_topk (cuda)");
  const size_t outputs = static_cast<size_t>(s.rows * s.k);
  HostResult r{std::vector<uint8_t>(outputs * s.itemsize), std::vector<int64_t>(outputs)};
  check_cuda(cudaMemcpyAsync(r.values.data(), d.values.data, r.values.size(),
                             cudaMemcpyDeviceToHost, stream),
             "copy values");
  check_cuda(cudaMemcpyAsync(r.indices.data(), d.indices.data, outputs * 8, cudaMemcpyDeviceToHost,
                             stream),
             "copy indices");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  return r;
}

HostResult run_cpu(const Shape& s, mtk_context cpu, const std::vector<uint8_t>& input) {
  const size_t outputs = static_cast<size_t>(s.rows * s.k);
  HostResult r{std::vector<uint8_t>(outputs * s.itemsize), std::vector<int64_t>(outputs)};
  const Descriptors d =
      describe_problem(s, const_cast<uint8_t*>(input.data()), r.values.data(), r.indices.data());
  check(mtk_topk(cpu, &d.input, s.k, s.dim, 1, 1, &d.values, &d.indices, nullptr),
        "mtk_topk (cpu)");
  return r;
}

// Output element (row, j) and input element (row, position) offsets in elements.
size_t output_offset(const Shape& s, int64_t row, int64_t j) {
  return s.dim == 0 ? j * s.rows + row : row * s.k + j;
}
size_t input_offset(const Shape& s, int64_t row, int64_t p) {
  return s.dim == 0 ? p * s.rows + row : row * s.n + p;
}

// Sorted: bit-identical to the CPU backend. Unsorted: per row the same index set, and every
// value the bits of the input element its index names.
std::string mismatch(const Shape& s, const std::vector<uint8_t>& input, const HostResult& expected,
                     const HostResult& got, bool sorted) {
  if (sorted) {
    if (got.indices != expected.indices) return "sorted indices differ from the CPU backend";
    if (got.values != expected.values) return "sorted values differ from the CPU backend";
    return "";
  }
  std::vector<int64_t> want(s.k), have(s.k);
  for (int64_t row = 0; row < s.rows; ++row) {
    for (int64_t j = 0; j < s.k; ++j) {
      const size_t o = output_offset(s, row, j);
      want[j] = expected.indices[o];
      have[j] = got.indices[o];
      if (have[j] < 0 || have[j] >= s.n)
        return "unsorted index out of range in row " + std::to_string(row);
      if (std::memcmp(&got.values[o * s.itemsize],
                      &input[input_offset(s, row, have[j]) * s.itemsize], s.itemsize) != 0) {
        return "unsorted value does not match the input at its index in row " + std::to_string(row);
      }
    }
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    if (want != have)
      return "unsorted index set differs from the CPU backend in row " + std::to_string(row);
  }
  return "";
}

// ---- timing -----------------------------------------------------------------------------------

struct Settings : BurstSettings {
  int singles = 50;
};

struct Timing {
  double eager_us, host_us, single_us;
  int calls, reps, singles;
};

// `problems` are rotated call by call so inputs that fit in L2 are not all served from it.
Timing time_calls(const Shape& s, mtk_context ctx, const std::vector<Descriptors>& problems,
                  int sorted, cudaStream_t stream, Settings settings) {
  auto call = [&](size_t i) {
    const Descriptors& d = problems[i % problems.size()];
    check(mtk_topk(ctx, &d.input, s.k, s.dim, 1, sorted, &d.values, &d.indices, stream),
          "mtk_topk (timed)");
  };
  for (size_t i = 0; i < 3 * problems.size(); ++i)
    call(i);  // plans and scratch exist before timing
  check_cuda(cudaStreamSynchronize(stream), "warm-up");
  double host_us = 0;
  const double eager_us = median_burst_us(stream, settings.calls, settings.reps, call, &host_us);
  Event start, end;
  std::vector<double> single;
  for (int i = 0; i < settings.singles; ++i) {
    check_cuda(cudaEventRecord(start.get(), stream), "cudaEventRecord");
    call(i);
    check_cuda(cudaEventRecord(end.get(), stream), "cudaEventRecord");
    check_cuda(cudaEventSynchronize(end.get()), "cudaEventSynchronize");
    float ms = 0;
    check_cuda(cudaEventElapsedTime(&ms, start.get(), end.get()), "cudaEventElapsedTime");
    single.push_back(1e3 * ms);
  }
  return {eager_us, host_us, median(single), settings.calls, settings.reps, settings.singles};
}

// Returns false on a mismatch (reported on stderr); throws on library or CUDA errors.
bool bench_shape(const Shape& s, mtk_context cuda, mtk_context cpu, cudaStream_t stream,
                 size_t l2_bytes, Settings settings) {
  const size_t input_bytes = static_cast<size_t>(s.rows * s.n) * s.itemsize;
  const size_t outputs = static_cast<size_t>(s.rows * s.k);
  const size_t rotation = input_bytes <= l2_bytes ? 4 : 1;
  // Large inputs take ms per call: fewer calls keep the whole run within its time budget.
  if (static_cast<double>(s.rows) * s.n >= double(1 << 26)) settings = {{10, 3}, 10};

  std::vector<DeviceBuffer> inputs;
  std::vector<uint8_t> first_input;
  for (size_t b = 0; b < rotation; ++b) {
    std::vector<uint8_t> host =
        random_input(s, static_cast<uint64_t>(s.rows * 31 + s.n + s.k) * 8 + b);
    inputs.emplace_back(input_bytes);
    check_cuda(cudaMemcpy(inputs.back().get(), host.data(), input_bytes, cudaMemcpyHostToDevice),
               "upload input");
    if (b == 0) first_input = std::move(host);
  }
  DeviceBuffer values(outputs * s.itemsize), indices(outputs * 8);
  std::vector<Descriptors> problems;
  for (const DeviceBuffer& input : inputs)
    problems.push_back(describe_problem(s, input.get(), values.get(), indices.get()));

  const HostResult expected = run_cpu(s, cpu, first_input);
  bool ok = true;
  for (int sorted : {1, 0}) {
    const std::string why = mismatch(s, first_input, expected,
                                     run_cuda_once(s, cuda, problems[0], sorted, stream), sorted);
    if (!why.empty()) {
      std::fprintf(stderr, "%s %lldx%lld k=%lld %s dim=%lld sorted=%d: %s\n", s.family.c_str(),
                   (long long)s.rows, (long long)s.n, (long long)s.k, s.dtype_name.c_str(),
                   (long long)s.dim, sorted, why.c_str());
      ok = false;
    }
  }
  if (!ok) return false;

  for (int sorted : {1, 0}) {
    const Timing t = time_calls(s, cuda, problems, sorted, stream, settings);
    std::printf(
        "{\"family\": \"%s\", \"rows\": %lld, \"n\": %lld, \"k\": %lld, \"dtype\": \"%s\", "
        "\"dim\": %lld, "
        "\"sorted\": %s, \"eager_us\": %.3f, \"host_us\": %.3f, \"single_us\": %.3f, "
        "\"calls\": %d, \"reps\": %d, "
        "\"singles\": %d, \"input_buffers\": %zu, \"verified\": true}\n",
        s.family.c_str(), (long long)s.rows, (long long)s.n, (long long)s.k, s.dtype_name.c_str(),
        (long long)s.dim, sorted ? "true" : "false", t.eager_us, t.host_us, t.single_us, t.calls,
        t.reps, t.singles, rotation);
    std::fflush(stdout);
  }
  return true;
}

int run(int argc, char** argv) {
  Settings settings;
  auto option = [&](const std::string& arg, int count, char** args, int& i) {
    if (settings.take_option(arg, count, args, i)) return true;
    if (arg != "--singles") return false;
    settings.singles = positive_option(count, args, i);
    return true;
  };
  auto bench = [&](const Shape& s, mtk_context cuda, mtk_context cpu, cudaStream_t stream,
                   size_t l2_bytes) {
    return bench_shape(s, cuda, cpu, stream, l2_bytes, settings);
  };
  auto describe = [](FILE* out, const Shape& s) {
    std::fprintf(out, "%s %lldx%lld k=%lld %s dim=%lld", s.family.c_str(), (long long)s.rows,
                 (long long)s.n, (long long)s.k, s.dtype_name.c_str(), (long long)s.dim);
  };
  return run_shapes("bench_c_abi",
                    "[--calls N] [--reps R] [--singles S] family:rows:n:k:dtype:dim...", argc,
                    argv, parse_shape, option, bench, describe);
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("bench_c_abi", [&] { return run(argc, argv); });
}
