// metaltopk against the serving engines' top-k and routing kernels on the same inputs, in one
// process and on one stream (issue #21). For every top-k shape of BENCHMARKS.md, the large-k
// shapes of issue #32 and every router shape of the router benchmark, each peer that supports
// the shape and metaltopk (through the C ABI: mtk_topk_with_workspace, mtk_moe_route) are
//   - checked: the peer's result against metaltopk's on the same input (values as a multiset,
//     since most peers return the k unsorted; rows whose index sets differ only among equal
//     values are counted as index ties; anything else is a mismatch, reported),
//   - timed: replay of a CUDA graph of `graph_calls` captured calls (the primary number, launch
//     gaps removed) and back-to-back calls between CUDA events (median of `reps` bursts).
// Inputs that fit in L2 rotate over 4 buffers, as bench/gpu/bench_c_abi.cpp does.
// The ragged shapes of issue #31 (family `ragged`, --only ragged) check every peer and metaltopk's
// mtk_topk_ragged on the device against metaltopk's CPU backend (the same index set per row)
// and give each shape's time to read its scores once at the measured copy bandwidth.
// The sampling shapes of issue #33 (family `sampling`, --only sampling) are in sampling.cu.
//
// Usage: peers_bench [--probe | --self-test] [--json FILE] [--only topk|router|ragged|sampling]
//                    [--filter TEXT] [--calls N] [--reps R]
//                    [--graph-calls N] [--replays N]
// Prints one JSON object per (shape, peer) as it goes and writes the list to FILE after every
// row (so a time limit leaves what was measured). Exit status: 0 when every supported peer ran
// and matched, 1 on a mismatch or failure, 2 with no CUDA device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "c_abi_bench.hpp"
#include "metaltopk.h"
#include "harness.hpp"
#include "peers.hpp"

namespace {

using namespace c_abi_bench;
using namespace harness;

// ---- top-k shapes -------------------------------------------------------------------------------

struct TopkShape {
  std::string family;
  int64_t rows, n, k;
  bool bf16;
  int64_t dim;  // 0: the tensor is [n, rows] and the top-k runs down its columns
  size_t itemsize() const { return bf16 ? 2 : 4; }
  std::string dtype() const { return bf16 ? "bfloat16" : "float32"; }
  std::string name() const {
    return family + " " + std::to_string(rows) + "x" + std::to_string(n) +
           (dim == 0 ? " dim 0" : "");
  }
  // What `--filter` matches: the name, k and dtype, so one k of a shape can be run alone.
  std::string filter_key() const {
    return name() + " k=" + std::to_string(k) + " " + dtype();
  }
};

// BENCHMARKS.md's GPU shapes (bench/gpu/bench_cuda.py's SHAPES).
std::vector<TopkShape> topk_shapes() {
  return {
      {"moe", 1, 256, 8, true, -1},          {"moe", 128, 256, 8, true, -1},
      {"moe", 4096, 256, 8, true, -1},       {"moe", 4096, 256, 8, false, -1},
      {"moe", 16384, 256, 8, true, -1},      {"moe", 4096, 512, 10, true, -1},
      {"moe", 4096, 128, 8, true, -1},       {"moe", 4096, 256, 8, true, 0},
      {"sampling", 1, 151936, 50, false, -1}, {"sampling", 1, 151936, 1024, false, -1},
      {"sampling", 64, 151936, 50, false, -1}, {"sampling", 64, 151936, 50, true, -1},
      {"sampling", 256, 151936, 50, false, -1}, {"sampling", 256, 151936, 1024, false, -1},
      {"sampling", 256, 262144, 256, false, -1}, {"select", 1, int64_t{1} << 28, 100, false, -1},
      {"select", 1, int64_t{1} << 28, 10000, false, -1},
      {"select", 1, int64_t{1} << 26, 1000, true, -1},
  };
}

// Large k on long batched rows (issue #32): k = 2048, where FlashInfer still has its filtered
// kernel and its on-device sort, and k = 4096, past both (its multi-CTA radix alone; the sorted
// peer row says why not). 64..256 rows of 2^17..2^20, all within CUB DeviceBatchedTopK's 2^21
// segments; two of them in bfloat16. Run last, so a time limit cuts these before the table of
// BENCHMARKS.md; `--filter large-k` runs them alone.
std::vector<TopkShape> large_k_shapes() {
  std::vector<TopkShape> v;
  for (int64_t k : {2048, 4096}) {
    v.push_back({"large-k", 64, int64_t{1} << 17, k, false, -1});
    v.push_back({"large-k", 256, int64_t{1} << 17, k, false, -1});
    v.push_back({"large-k", 256, int64_t{1} << 18, k, false, -1});
    v.push_back({"large-k", 64, int64_t{1} << 20, k, false, -1});
  }
  v.push_back({"large-k", 256, int64_t{1} << 18, 2048, true, -1});
  v.push_back({"large-k", 64, int64_t{1} << 20, 4096, true, -1});
  return v;
}


// The value's place in the order (larger key = larger value; the data holds no NaN).
uint32_t ordered_key(const uint8_t* p, bool bf16) {
  uint32_t bits;
  if (bf16) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    bits = uint32_t{h} << 16;
  } else {
    std::memcpy(&bits, p, 4);
  }
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

struct TopkResult {
  std::vector<uint8_t> values;
  std::vector<int64_t> indices;  // widened from int32
};

TopkResult download(const TopkShape& s, const void* values, const int32_t* indices,
                    cudaStream_t stream) {
  const size_t out = static_cast<size_t>(s.rows * s.k);
  TopkResult r{std::vector<uint8_t>(out * s.itemsize()), std::vector<int64_t>(out)};
  std::vector<int32_t> narrow(out);
  checked(cudaMemcpyAsync(r.values.data(), values, r.values.size(), cudaMemcpyDeviceToHost,
                          stream), "copy values");
  checked(cudaMemcpyAsync(narrow.data(), indices, out * 4, cudaMemcpyDeviceToHost, stream),
          "copy indices");
  checked(cudaStreamSynchronize(stream), "copy");
  std::copy(narrow.begin(), narrow.end(), r.indices.begin());
  return r;
}

// Checks a peer's result (row-major [rows, k]) against metaltopk's sorted one; fills the row's
// counts and status. metaltopk's dim-0 layout never reaches here (no peer takes it).
void compare_topk(const TopkShape& s, const std::vector<uint8_t>& input, const TopkResult& want,
                  const TopkResult& got, bool got_sorted, Row& row) {
  const size_t w = s.itemsize();
  std::string first;
  for (int64_t r = 0; r < s.rows; ++r) {
    std::vector<uint32_t> keys_got, keys_want;
    std::vector<int64_t> idx_got, idx_want;
    std::string why;
    for (int64_t j = 0; j < s.k && why.empty(); ++j) {
      const size_t o = static_cast<size_t>(r * s.k + j);
      const int64_t i = got.indices[o];
      if (i < 0 || i >= s.n) {
        why = "index " + std::to_string(i) + " out of range";
        break;
      }
      if (std::memcmp(&got.values[o * w], &input[(r * s.n + i) * w], w) != 0)
        why = "value is not the input's at its index " + std::to_string(i);
      keys_got.push_back(ordered_key(&got.values[o * w], s.bf16));
      keys_want.push_back(ordered_key(&want.values[o * w], s.bf16));
      idx_got.push_back(i);
      idx_want.push_back(want.indices[o]);
    }
    if (why.empty() && got_sorted &&
        !std::is_sorted(keys_got.begin(), keys_got.end(), std::greater<uint32_t>())) {
      why = "sorted output not in descending order";
    }
    if (why.empty()) {
      std::vector<int64_t> unique_idx = idx_got;
      std::sort(unique_idx.begin(), unique_idx.end());
      if (std::adjacent_find(unique_idx.begin(), unique_idx.end()) != unique_idx.end())
        why = "repeated index";
    }
    if (why.empty()) {
      std::sort(keys_got.begin(), keys_got.end(), std::greater<uint32_t>());
      std::sort(keys_want.begin(), keys_want.end(), std::greater<uint32_t>());
      if (keys_got != keys_want) why = "values differ from metaltopk's as a multiset";
    }
    if (!why.empty()) {
      if (first.empty()) first = "row " + std::to_string(r) + ": " + why;
      ++row.mismatch_rows;
      continue;
    }
    // Same values: the indices may still differ among equal values (the k-th value's ties),
    // and a sorted peer may order equal values differently.
    bool same_order = idx_got == idx_want;
    std::sort(idx_got.begin(), idx_got.end());
    std::sort(idx_want.begin(), idx_want.end());
    if (idx_got != idx_want || (got_sorted && !same_order)) ++row.tie_rows;
  }
  row.rows_checked = s.rows;
  if (row.mismatch_rows > 0) {
    row.status = "mismatch";
    row.note += (row.note.empty() ? "" : "; ") + first;
  } else {
    row.status = row.tie_rows > 0 ? "match (index ties)" : "match";
  }
}

struct DeviceArrays {
  std::vector<DeviceBuffer> inputs;
  std::vector<uint8_t> first_input;
};

DeviceArrays upload_rotation(size_t count, bool bf16, uint64_t seed, size_t l2_bytes) {
  const size_t bytes = count * (bf16 ? 2 : 4);
  const size_t rotation = bytes <= l2_bytes ? 4 : 1;
  DeviceArrays d;
  for (size_t b = 0; b < rotation; ++b) {
    std::vector<uint8_t> host = standard_normal_bytes(count, bf16, seed + b);
    d.inputs.emplace_back(bytes);
    checked(cudaMemcpy(d.inputs.back().get(), host.data(), bytes, cudaMemcpyHostToDevice),
            "upload input");
    if (b == 0) d.first_input = std::move(host);
  }
  return d;
}

// Device-to-device copy bandwidth (bytes read + written per second) of a 1 GiB copy, the rate
// that turns a shape's score bytes into the time to read them once.
double copy_bytes_per_s(cudaStream_t stream) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(bytes), b(bytes);
  checked(cudaMemsetAsync(a.get(), 0, bytes, stream), "memset");
  std::vector<double> seconds;
  Event start, end;
  for (int i = 0; i < 6; ++i) {
    checked(cudaEventRecord(start.get(), stream), "event");
    checked(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, stream), "copy");
    checked(cudaEventRecord(end.get(), stream), "event");
    checked(cudaEventSynchronize(end.get()), "event sync");
    float ms = 0;
    checked(cudaEventElapsedTime(&ms, start.get(), end.get()), "elapsed");
    if (i > 0) seconds.push_back(1e-3 * ms);  // the first copy warms up
  }
  return 2.0 * double(bytes) / median(seconds);
}

bool bench_topk(const TopkShape& s, mtk_context ctx, cudaStream_t stream, size_t l2_bytes,
                double copy_rate, const Settings& base, Output& out) {
  const size_t count = static_cast<size_t>(s.rows * s.n);
  const Settings st = scaled(base, double(count) * s.itemsize());
  std::fprintf(stderr, "[peers] %s k=%lld %s\n", s.name().c_str(), (long long)s.k,
               s.dtype().c_str());
  DeviceArrays in = upload_rotation(count, s.bf16, uint64_t(s.rows * 31 + s.n + s.k) * 8,
                                    l2_bytes);
  const size_t rotation = in.inputs.size();
  const size_t outputs = static_cast<size_t>(s.rows * s.k);
  const mtk_dtype dtype = s.bf16 ? MTK_BFLOAT16 : MTK_FLOAT32;
  const bool columns = s.dim == 0;

  // metaltopk: int32 indices like every peer here, caller's workspace, both sorted modes.
  DeviceBuffer mtk_values(outputs * s.itemsize()), mtk_indices(outputs * 4);
  std::vector<mtk_tensor> mtk_in;
  for (const DeviceBuffer& b : in.inputs)
    mtk_in.push_back(describe(b.get(), dtype, columns ? s.n : s.rows, columns ? s.rows : s.n));
  const mtk_tensor mv = describe(mtk_values.get(), dtype, columns ? s.k : s.rows,
                                 columns ? s.rows : s.k);
  const mtk_tensor mi = describe(mtk_indices.get(), MTK_INT32, columns ? s.k : s.rows,
                                 columns ? s.rows : s.k);
  size_t ws_bytes = 0;
  for (int sorted : {0, 1}) {
    size_t b = 0;
    check(mtk_topk_workspace_size(ctx, &mtk_in[0], s.k, s.dim, 1, sorted, MTK_INT32, &b),
          "mtk_topk_workspace_size");
    ws_bytes = std::max(ws_bytes, b);
  }
  DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
  auto mtk_call = [&](int sorted) -> Call {
    return [&, sorted](int i) -> cudaError_t {
      check(mtk_topk_with_workspace(ctx, &mtk_in[size_t(i) % rotation], s.k, s.dim, 1, sorted,
                                    &mv, &mi, workspace.get(), ws_bytes, stream),
            "mtk_topk_with_workspace");
      return cudaSuccess;
    };
  };
  checked(mtk_call(1)(0), "metaltopk");
  TopkResult want;
  if (!columns) want = download(s, mtk_values.get(), static_cast<int32_t*>(mtk_indices.get()),
                                stream);
  double mtk_graph[2] = {-1, -1}, mtk_loop[2] = {-1, -1};
  std::string mtk_note;
  for (int sorted : {0, 1}) time_both(stream, st, mtk_call(sorted), mtk_graph[sorted],
                                      mtk_loop[sorted], mtk_note);

  auto base_row = [&](const std::string& peer) {
    Row r;
    r.shape = s.name();
    r.family = s.family;
    r.k = s.k;
    r.dtype = s.bf16 ? "bf16" : "f32";
    r.peer = peer;
    r.score_bytes = double(count) * s.itemsize();
    r.read_once_us = 1e6 * r.score_bytes / copy_rate;
    r.copy_gbps = 1e-9 * copy_rate;
    r.metaltopk_sorted_us = mtk_graph[1];
    r.metaltopk_sorted_loop_us = mtk_loop[1];
    r.note = mtk_note;
    return r;
  };
  const char* peer_names[] = {"flashinfer_radix_topk", "flashinfer_radix_topk_sorted",
                              "cub_device_batched_topk", "cub_device_topk"};
  if (columns) {
    for (const char* name : peer_names) {
      Row r = base_row(name);
      r.status = "unsupported";
      r.metaltopk_us = mtk_graph[0];
      r.metaltopk_loop_us = mtk_loop[0];
      r.note = "dim 0 (top-k down the columns of a [n, rows] tensor): the peer takes contiguous "
               "rows only";
      out.add(r);
    }
    return true;
  }

  DeviceBuffer peer_values(outputs * s.itemsize()), peer_indices(outputs * 4);
  auto* pidx = static_cast<int32_t*>(peer_indices.get());
  const peers::Dtype pd = s.bf16 ? peers::Dtype::bf16 : peers::Dtype::f32;
  auto input = [&](int i) { return in.inputs[size_t(i) % rotation].get(); };
  bool ok = true;

  auto run_peer = [&](Row r, bool sorted_mode, const Call& call) {
    // One line a peer, so that a run cut by its time limit shows which peer it was in.
    std::fprintf(stderr, "[peers]   %s\n", r.peer.c_str());
    r.peer_sorted = sorted_mode;
    r.metaltopk_us = mtk_graph[sorted_mode ? 1 : 0];
    r.metaltopk_loop_us = mtk_loop[sorted_mode ? 1 : 0];
    try {
      const cudaError_t first = call(0);
      if (first == cudaErrorNotSupported) {  // the peer's own "not for this shape"
        cudaGetLastError();
        r.status = "unsupported";
        r.note += (r.note.empty() ? "" : "; ") +
                  std::string("the peer returns cudaErrorNotSupported for this shape");
        out.add(r);
        return;
      }
      checked(first, "first call");
      checked(cudaStreamSynchronize(stream), "first call");
      compare_topk(s, in.first_input, want, download(s, peer_values.get(), pidx, stream),
                   sorted_mode, r);
      time_both(stream, st, call, r.peer_us, r.peer_loop_us, r.note);
    } catch (const std::exception& e) {
      cudaGetLastError();
      r.status = "failed";
      r.note += (r.note.empty() ? "" : "; ") + std::string(e.what());
    }
    if (r.status == "failed" || r.status == "mismatch") ok = false;
    out.add(r);
  };

  // FlashInfer radix top-k, unsorted (its default) and sorted on the device (deterministic).
  DeviceBuffer row_states(peers::flashinfer_row_states_bytes());
  checked(cudaMemset(row_states.get(), 0, peers::flashinfer_row_states_bytes()), "memset");
  // Its multi-CTA path keeps a row in the shared memory of the CTAs that meet at its group
  // barrier, one CTA a SM: a longer row needs more CTAs than can be resident at once, and the
  // barrier then waits forever (the bf16 2^26 select ran past every time limit).
  int device = 0, sms = 0, smem_per_block = 0;
  checked(cudaGetDevice(&device), "cudaGetDevice");
  checked(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "SM count");
  checked(cudaDeviceGetAttribute(&smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
          "shared memory per block");
  const double row_bytes = double(s.n) * double(s.itemsize());
  const double resident_bytes = double(sms) * double(smem_per_block);
  for (bool sorted : {false, true}) {
    Row r = base_row(peer_names[sorted ? 1 : 0]);
    if (row_bytes > resident_bytes) {
      r.status = "unsupported";
      r.peer_sorted = sorted;
      r.metaltopk_us = mtk_graph[sorted ? 1 : 0];
      r.metaltopk_loop_us = mtk_loop[sorted ? 1 : 0];
      r.note = "not run: a row of " + std::to_string(int64_t(row_bytes) >> 20) +
               " MiB exceeds the shared memory of one CTA a SM (" +
               std::to_string(int64_t(resident_bytes) >> 20) +
               " MiB), which the multi-CTA radix needs resident at once";
      out.add(r);
      continue;
    }
    if (sorted && s.k > 2048) {
      r.status = "unsupported";
      r.peer_sorted = true;
      r.metaltopk_us = mtk_graph[1];
      r.metaltopk_loop_us = mtk_loop[1];
      r.note = "flashinfer.top_k sorts on the device only for k <= 2048 (else with torch.sort)";
      out.add(r);
      continue;
    }
    if (sorted) r.note = "deterministic mode + its on-device stable sort by value";
    run_peer(r, sorted, [&, sorted](int i) {
      return peers::flashinfer_radix_topk(pd, input(i), peer_values.get(), pidx,
                                          uint32_t(s.rows), uint32_t(s.n), uint32_t(s.k),
                                          row_states.get(), sorted, stream);
    });
  }

  // CUB: DeviceBatchedTopK for rows of up to 2^21, DeviceTopK for one row.
  for (int which : {2, 3}) {
    Row r = base_row(peer_names[which]);
    const bool batched = which == 2;
    if (batched && s.n > peers::kCubBatchedMaxLen) {
      r.status = "unsupported";
      r.metaltopk_us = mtk_graph[0];
      r.metaltopk_loop_us = mtk_loop[0];
      r.note = "DeviceBatchedTopK takes segments of at most 2^21 items";
      out.add(r);
      continue;
    }
    if (!batched && s.rows != 1) continue;  // DeviceTopK is one sequence: run on 1-row shapes
    size_t temp_bytes = 0;
    cudaError_t q = batched ? peers::cub_batched_topk(pd, input(0), peer_values.get(), pidx, s.rows,
                                                      s.n, s.k, nullptr, &temp_bytes, stream)
                            : peers::cub_device_topk(pd, input(0), peer_values.get(), pidx, s.n,
                                                     s.k, nullptr, &temp_bytes, stream);
    if (q != cudaSuccess) {
      r.status = q == cudaErrorNotSupported ? "unsupported" : "failed";
      r.metaltopk_us = mtk_graph[0];
      r.note = std::string("temp-storage query: ") + cudaGetErrorString(q);
      cudaGetLastError();
      out.add(r);
      ok = ok && q == cudaErrorNotSupported;
      continue;
    }
    DeviceBuffer temp(std::max<size_t>(temp_bytes, 256));
    run_peer(r, false, [&, batched, temp_bytes](int i) {
      size_t bytes = temp_bytes;
      return batched ? peers::cub_batched_topk(pd, input(i), peer_values.get(), pidx, s.rows, s.n,
                                               s.k, temp.get(), &bytes, stream)
                     : peers::cub_device_topk(pd, input(i), peer_values.get(), pidx, s.n, s.k,
                                              temp.get(), &bytes, stream);
    });
  }
  return ok;
}

// ---- router shapes ------------------------------------------------------------------------------

struct RouterShape {
  bool deepseek;  // sigmoid + bias, 8 groups keep 4 (DeepSeek-V3); else softmax
  int64_t tokens, experts, k;
  std::string name() const {
    return std::string(deepseek ? "router deepseek-v3" : "router softmax") + " T=" +
           std::to_string(tokens) + " E=" + std::to_string(experts);
  }
};

std::vector<RouterShape> router_shapes() {
  std::vector<RouterShape> v;
  for (int64_t e : {64, 128, 256, 512})
    for (int64_t t : {1, 128, 4096, 16384}) v.push_back({false, t, e, e == 512 ? 10 : 8});
  for (int64_t t : {1, 128, 4096, 16384}) v.push_back({true, t, 256, 8});
  return v;
}

constexpr int64_t kGroups = 8, kTopkGroups = 4;

// Float64 selection scores of one token: softmax probabilities, or sigmoid + bias.
std::vector<double> selection_scores(const RouterShape& s, const uint16_t* logits,
                                     const std::vector<float>& bias) {
  std::vector<double> c(s.experts);
  double m = -INFINITY, total = 0;
  for (int64_t e = 0; e < s.experts; ++e) m = std::max(m, double(from_bfloat16(logits[e])));
  for (int64_t e = 0; e < s.experts; ++e) {
    const double x = from_bfloat16(logits[e]);
    c[e] = s.deepseek ? 1.0 / (1.0 + std::exp(-x)) + bias[e] : std::exp(x - m);
    total += c[e];
  }
  if (!s.deepseek)
    for (double& v : c) v /= total;
  return c;
}

// Checks a peer's route against metaltopk's: the same expert set per token (order free), and
// the weights of each expert within `weight_rtol` relative (1e-5 for float32 weights; a peer
// whose weights are bfloat16 gets 2^-7, two bfloat16 roundings; the largest error is reported). A token
// whose sets differ counts as a near tie when the selection scores of the two sets, rank by rank,
// agree within 1e-5 relative (float32 rounding breaking a near-tie either way); else it is a
// mismatch.
void compare_route(const RouterShape& s, const std::vector<uint16_t>& logits,
                   const std::vector<float>& bias, const std::vector<float>& w_want,
                   const std::vector<int32_t>& id_want, const std::vector<float>& w_got,
                   const std::vector<int32_t>& id_got, Row& row, double weight_rtol = 1e-5) {
  std::string first;
  double max_err = 0;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int32_t* got = &id_got[t * s.k];
    const int32_t* want = &id_want[t * s.k];
    std::vector<int32_t> a(got, got + s.k), b(want, want + s.k);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    std::string why;
    if (a.front() < 0 || a.back() >= s.experts) why = "expert id out of range";
    else if (std::adjacent_find(a.begin(), a.end()) != a.end()) why = "repeated expert id";
    if (why.empty() && a != b) {
      const std::vector<double> c = selection_scores(s, &logits[t * s.experts], bias);
      auto by_score = [&](int32_t x, int32_t y) { return c[x] > c[y]; };
      std::sort(a.begin(), a.end(), by_score);
      std::sort(b.begin(), b.end(), by_score);
      for (int64_t r = 0; r < s.k && why.empty(); ++r) {
        if (std::fabs(c[a[r]] - c[b[r]]) > 1e-5 * std::fabs(c[b[r]]))
          why = "expert set differs from metaltopk's (rank " + std::to_string(r) + ": " +
                std::to_string(a[r]) + " instead of " + std::to_string(b[r]) + ")";
      }
      if (why.empty()) {
        ++row.tie_rows;
        continue;
      }
    }
    if (why.empty()) {
      for (int64_t r = 0; r < s.k; ++r) {
        const int64_t j = std::find(want, want + s.k, got[r]) - want;
        const double ref = w_want[t * s.k + j];
        const double err = std::fabs(double(w_got[t * s.k + r]) - ref) / std::max(ref, 1e-30);
        max_err = std::max(max_err, err);
        if (err > weight_rtol && why.empty())
          why = "weight of expert " + std::to_string(got[r]) + " is " +
                std::to_string(w_got[t * s.k + r]) + ", metaltopk's " + std::to_string(ref);
      }
    }
    if (!why.empty()) {
      if (first.empty()) first = "token " + std::to_string(t) + ": " + why;
      ++row.mismatch_rows;
    }
  }
  row.rows_checked = s.tokens;
  row.max_weight_rel_err = max_err;
  if (row.mismatch_rows > 0) {
    row.status = "mismatch";
    row.note += (row.note.empty() ? "" : "; ") + first;
  } else {
    row.status = row.tie_rows > 0 ? "match (near-tie tokens)" : "match";
  }
}

bool bench_router(const RouterShape& s, mtk_context ctx, cudaStream_t stream, size_t l2_bytes,
                  const Settings& base, Output& out) {
  const Settings st = scaled(base, double(s.tokens * s.experts) * 2);
  std::fprintf(stderr, "[peers] %s k=%lld\n", s.name().c_str(), (long long)s.k);
  const size_t elements = static_cast<size_t>(s.tokens * s.experts);
  const size_t outputs = static_cast<size_t>(s.tokens * s.k);
  const uint64_t seed = static_cast<uint64_t>(s.tokens * 31 + s.experts + s.k) * 8;
  DeviceArrays in = upload_rotation(elements, true, seed, l2_bytes);
  const size_t rotation = in.inputs.size();
  std::vector<uint16_t> logits(elements);
  std::memcpy(logits.data(), in.first_input.data(), elements * 2);
  std::vector<float> bias;
  if (s.deepseek)
    for (int64_t e = 0; e < s.experts; ++e)
      bias.push_back(0.1f * standard_normal(seed + 99, static_cast<size_t>(e)));
  DeviceBuffer bias_d(static_cast<size_t>(s.experts) * 4);
  if (s.deepseek)
    checked(cudaMemcpy(bias_d.get(), bias.data(), bias.size() * 4, cudaMemcpyHostToDevice),
            "upload bias");

  // metaltopk
  DeviceBuffer mw(outputs * 4), mi(outputs * 4);
  mtk_tensor bias_t{};
  bias_t.data = bias_d.get();
  bias_t.dtype = MTK_FLOAT32;
  bias_t.ndim = 1;
  bias_t.sizes[0] = s.experts;
  bias_t.strides[0] = 1;
  mtk_router_params p = MTK_ROUTER_PARAMS_INIT;
  p.k = s.k;
  p.scoring = s.deepseek ? MTK_SCORING_SIGMOID : MTK_SCORING_SOFTMAX;
  p.bias = s.deepseek ? &bias_t : nullptr;
  p.n_group = s.deepseek ? kGroups : 0;
  p.topk_group = s.deepseek ? kTopkGroups : 0;
  p.renormalize = 1;
  p.scale = 1.0f;
  std::vector<mtk_tensor> lt;
  for (const DeviceBuffer& b : in.inputs) lt.push_back(describe(b.get(), MTK_BFLOAT16, s.tokens,
                                                                s.experts));
  const mtk_tensor wt = describe(mw.get(), MTK_FLOAT32, s.tokens, s.k);
  const mtk_tensor it = describe(mi.get(), MTK_INT32, s.tokens, s.k);
  const Call mtk_call = [&](int i) -> cudaError_t {
    check(mtk_moe_route(ctx, &lt[size_t(i) % rotation], &p, &wt, &it, stream), "mtk_moe_route");
    return cudaSuccess;
  };
  checked(mtk_call(0), "metaltopk");
  std::vector<float> w_want(outputs), w_got(outputs);
  std::vector<int32_t> id_want(outputs), id_got(outputs);
  checked(cudaMemcpy(w_want.data(), mw.get(), outputs * 4, cudaMemcpyDeviceToHost), "copy");
  checked(cudaMemcpy(id_want.data(), mi.get(), outputs * 4, cudaMemcpyDeviceToHost), "copy");
  double mtk_graph = -1, mtk_loop = -1;
  std::string mtk_note;
  time_both(stream, st, mtk_call, mtk_graph, mtk_loop, mtk_note);

  DeviceBuffer pw(outputs * 4), pi(outputs * 4), pscratch(outputs * 4),
      pworkspace(std::max<size_t>(elements * 4, 256));
  auto* pw_f = static_cast<float*>(pw.get());
  auto* pi_i = static_cast<int32_t*>(pi.get());
  auto* bias_f = static_cast<float*>(bias_d.get());
  auto input = [&](int i) { return in.inputs[size_t(i) % rotation].get(); };

  struct Peer {
    std::string name, note;
    bool bf16_weights;
    Call call;
  };
  std::vector<Peer> peer_list;
  if (s.deepseek) {
    const std::string what = "n_group=8 topk_group=4, sigmoid + float32 bias, renormalised, "
                             "scale 1";
    peer_list.push_back({"vllm_grouped_topk", what, false, [&](int i) {
                           return peers::vllm_grouped_topk(input(i), pw_f, pi_i, bias_f,
                                                           s.tokens, s.experts, kGroups,
                                                           kTopkGroups, s.k, true, 1.0, stream);
                         }});
    peer_list.push_back({"flashinfer_noaux_tc",
                         what + "; its weights are bfloat16 (the logits' dtype): checked "
                                "within 2^-7 relative",
                         true, [&](int i) {
                           return peers::flashinfer_noaux_tc(input(i), pw.get(), pi_i, bias_f,
                                                             s.tokens, s.experts, kGroups,
                                                             kTopkGroups, s.k, 1.0, stream);
                         }});
  } else {
    peer_list.push_back({"vllm_topk_softmax", "softmax in float32, renormalised", false,
                         [&](int i) {
                           return peers::vllm_topk_softmax(
                               input(i), pw_f, pi_i, static_cast<int32_t*>(pscratch.get()),
                               static_cast<float*>(pworkspace.get()), int(s.tokens),
                               int(s.experts), int(s.k), true, stream);
                         }});
  }
  bool ok = true;
  for (const Peer& peer : peer_list) {
    Row r;
    r.shape = s.name();
    r.family = "router";
    r.k = s.k;
    r.dtype = "bf16";
    r.peer = peer.name;
    r.metaltopk_us = mtk_graph;
    r.metaltopk_loop_us = mtk_loop;
    r.note = mtk_note + (mtk_note.empty() ? "" : "; ") + peer.note;
    try {
      checked(peer.call(0), "first call");
      checked(cudaStreamSynchronize(stream), "first call");
      if (peer.bf16_weights) {
        std::vector<uint16_t> narrow(outputs);
        checked(cudaMemcpy(narrow.data(), pw.get(), outputs * 2, cudaMemcpyDeviceToHost), "copy");
        for (size_t o = 0; o < outputs; ++o) w_got[o] = from_bfloat16(narrow[o]);
      } else {
        checked(cudaMemcpy(w_got.data(), pw.get(), outputs * 4, cudaMemcpyDeviceToHost), "copy");
      }
      checked(cudaMemcpy(id_got.data(), pi.get(), outputs * 4, cudaMemcpyDeviceToHost), "copy");
      compare_route(s, logits, bias, w_want, id_want, w_got, id_got, r,
                    peer.bf16_weights ? 1.0 / 128 : 1e-5);
      time_both(stream, st, peer.call, r.peer_us, r.peer_loop_us, r.note);
    } catch (const std::exception& e) {
      cudaGetLastError();
      r.status = "failed";
      r.note += (r.note.empty() ? "" : "; ") + std::string(e.what());
    }
    out.add(r);
    ok = ok && r.status != "failed" && r.status != "mismatch";
  }
  return ok;
}

// ---- ragged shapes: the sparse-attention indexer (issue #31) ----------------------------------

// Float32 scores [rows, n]; row r selects among its first lengths[r] positions. Decode rows draw
// their lengths uniformly in [lo, hi]; prefill rows are causal, lo + r (many shorter than k).
struct RaggedShape {
  std::string kind;  // "decode", "prefill" or "dsv4" (DeepSeek-V4: k = 512, pages of 64)
  int64_t rows, n, k, lo, hi;
  int64_t page_size;  // the page-table transform's (decode and dsv4 shapes)
  bool causal() const { return kind == "prefill"; }
  std::string name() const {
    std::string s = "ragged " + kind + " " + std::to_string(rows) + "x" + std::to_string(n) +
                    " len ";
    s += causal() ? std::to_string(lo) + "+r"
                  : std::to_string(lo) + ".." + std::to_string(hi);
    if (page_size > 1) s += " page " + std::to_string(page_size);
    return s;
  }
};

std::vector<RaggedShape> ragged_shapes() {
  return {
      {"decode", 64, 131072, 2048, 4096, 131072, 1},
      {"decode", 256, 131072, 2048, 4096, 131072, 1},
      {"decode", 64, 262144, 2048, 1024, 262144, 1},
      {"decode", 256, 262144, 2048, 1024, 262144, 1},
      {"decode", 32, 1048576, 2048, 983040, 1048576, 1},
      {"prefill", 8192, 9216, 2048, 1024, 9215, 1},
      {"dsv4", 128, 131072, 512, 4096, 131072, 64},
  };
}

// How a result's indices map to window positions: as they are, offsets[r] + position (ragged),
// or through the page table.
enum class IndexMode { none, ragged, page_table };

const char* mode_name(IndexMode m) {
  return m == IndexMode::none ? "none" : m == IndexMode::ragged ? "ragged" : "page_table";
}

// The host side of one shape's lengths and transforms. The page table of row r maps logical page
// p to physical page r * pages + (p * mul[r] + add[r]) mod pages (pages a power of two, mul[r]
// odd): every row's pages are scattered, and the inverse is exact.
struct RaggedHost {
  std::vector<int32_t> lengths, offsets, page_table;
  std::vector<uint64_t> mul, mul_inverse, add;
  int64_t n = 0, pages = 0, page_size = 1;

  RaggedHost(const RaggedShape& s, uint64_t seed) : n(s.n), page_size(s.page_size) {
    for (int64_t r = 0; r < s.rows; ++r) {
      const int64_t len = s.causal() ? s.lo + r
                                     : s.lo + int64_t(splitmix64(seed + uint64_t(r)) %
                                                      uint64_t(s.hi - s.lo + 1));
      lengths.push_back(int32_t(std::min(len, s.n)));
      offsets.push_back(int32_t(r * s.n));
    }
    pages = (s.n + s.page_size - 1) / s.page_size;
    if (s.causal()) return;
    if ((pages & (pages - 1)) != 0) throw std::runtime_error("pages must be a power of two");
    if (s.rows * pages * s.page_size > INT32_MAX) throw std::runtime_error("page table too big");
    page_table.resize(size_t(s.rows * pages));
    for (int64_t r = 0; r < s.rows; ++r) {
      const uint64_t m = splitmix64(seed ^ (0x9e37u + uint64_t(r))) | 1, a = splitmix64(m);
      uint64_t inverse = m;  // Newton's iteration for the inverse of an odd m mod 2^64
      for (int i = 0; i < 6; ++i) inverse *= 2 - m * inverse;
      mul.push_back(m);
      mul_inverse.push_back(inverse);
      add.push_back(a);
      for (int64_t p = 0; p < pages; ++p)
        page_table[size_t(r * pages + p)] =
            int32_t(r * pages + int64_t((uint64_t(p) * m + a) & uint64_t(pages - 1)));
    }
  }

  // The window position of an output index of row r, -1 for the padding index, -2 if the index
  // cannot come from this row's transform.
  int64_t position(IndexMode mode, int64_t r, int64_t index) const {
    if (index == -1) return -1;
    if (mode == IndexMode::ragged) index -= offsets[size_t(r)];
    if (mode == IndexMode::page_table) {
      const int64_t page = index / page_size, within = index % page_size;
      if (index < 0 || page / pages != r) return -2;
      const uint64_t local = uint64_t(page % pages);
      const uint64_t logical = ((local - add[size_t(r)]) * mul_inverse[size_t(r)]) &
                               uint64_t(pages - 1);
      index = int64_t(logical) * page_size + within;
    }
    return index < 0 || index >= n ? -2 : index;
  }
};

// Checks a result [rows, k] of output indices in `mode` against the reference's window positions
// [rows, k] (metaltopk's CPU backend, -1 padded): per row, the same set of min(length, k)
// positions. A set that differs only among values equal to the k-th counts as an index tie.
// `padded` (metaltopk's contract) also requires the valid entries first and -1 after them;
// peers are checked on their entries other than -1 wherever they are.
void compare_ragged(const RaggedShape& s, const float* scores, const RaggedHost& h,
                    const std::vector<int32_t>& want, const std::vector<int32_t>& got,
                    IndexMode mode, bool padded, Row& row) {
  std::string first;
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t expected = std::min<int64_t>(h.lengths[size_t(r)], s.k);
    std::vector<int64_t> pos, ref;
    std::string why;
    for (int64_t j = 0; j < s.k && why.empty(); ++j) {
      const int64_t p = h.position(mode, r, got[size_t(r * s.k + j)]);
      if (p == -2 || p >= h.lengths[size_t(r)])
        why = "index " + std::to_string(got[size_t(r * s.k + j)]) + " at " + std::to_string(j) +
              " is not a position of the row's window";
      else if (padded && (p == -1) != (j >= expected))
        why = "not the " + std::to_string(expected) + " winners first and -1 after them";
      else if (p >= 0)
        pos.push_back(p);
    }
    for (int64_t j = 0; j < expected; ++j) ref.push_back(want[size_t(r * s.k + j)]);
    std::sort(pos.begin(), pos.end());
    std::sort(ref.begin(), ref.end());
    if (why.empty() && int64_t(pos.size()) != expected)
      why = std::to_string(pos.size()) + " indices where the row has " + std::to_string(expected);
    if (why.empty() && std::adjacent_find(pos.begin(), pos.end()) != pos.end())
      why = "repeated index";
    if (why.empty() && pos != ref) {
      auto values = [&](const std::vector<int64_t>& v) {
        std::vector<float> out;
        for (int64_t p : v) out.push_back(scores[size_t(r * s.n + p)]);
        std::sort(out.begin(), out.end());
        return out;
      };
      if (values(pos) == values(ref)) {
        ++row.tie_rows;
        continue;
      }
      why = "index set differs from the CPU reference's";
    }
    if (!why.empty()) {
      if (first.empty()) first = "row " + std::to_string(r) + ": " + why;
      ++row.mismatch_rows;
    }
  }
  row.rows_checked = s.rows;
  if (row.mismatch_rows > 0) {
    row.status = "mismatch";
    row.note += (row.note.empty() ? "" : "; ") + first;
  } else {
    row.status = row.tie_rows > 0 ? "match (index ties)" : "match";
  }
}

mtk_tensor vector_tensor(void* data, mtk_dtype dtype, int64_t count) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.sizes[0] = count;
  t.strides[0] = 1;
  return t;
}

// The tensors of one mtk_topk_ragged call (host or device pointers), for one index mode.
struct RaggedCall {
  mtk_tensor lengths, offsets, page_table;
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  RaggedCall(void* lengths_data, void* offsets_data, void* page_table_data, int64_t rows,
             int64_t pages, int64_t page_size, IndexMode mode)
      : lengths(vector_tensor(lengths_data, MTK_INT32, rows)),
        offsets(vector_tensor(offsets_data, MTK_INT32, rows)),
        page_table(describe(page_table_data, MTK_INT32, rows, std::max<int64_t>(pages, 1))) {
    params.lengths = &lengths;
    if (mode == IndexMode::ragged) {
      params.transform = MTK_INDEX_TRANSFORM_RAGGED;
      params.offsets = &offsets;
    } else if (mode == IndexMode::page_table) {
      params.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
      params.page_table = &page_table;
      params.page_size = page_size;
    }
  }
  RaggedCall(const RaggedCall&) = delete;  // params points into this object
  RaggedCall& operator=(const RaggedCall&) = delete;
};

bool bench_ragged(const RaggedShape& s, mtk_context ctx, mtk_context cpu, cudaStream_t stream,
                  size_t l2_bytes, double copy_rate, const Settings& base, Output& out) {
  std::fprintf(stderr, "[peers] %s k=%lld\n", s.name().c_str(), (long long)s.k);
  const uint64_t seed = uint64_t(s.rows * 131 + s.n + s.k * 7 + s.page_size) * 8 + 31;
  const RaggedHost h(s, seed + 1000);
  int64_t keys = 0;
  for (int32_t len : h.lengths) keys += len;
  const double score_bytes = double(keys) * 4;
  const Settings st = scaled(base, score_bytes);
  const size_t count = size_t(s.rows * s.n), outputs = size_t(s.rows * s.k);
  DeviceArrays in = upload_rotation(count, false, seed, l2_bytes);
  const size_t rotation = in.inputs.size();
  const float* scores = reinterpret_cast<const float*>(in.first_input.data());
  auto input = [&](int i) {
    return static_cast<const float*>(in.inputs[size_t(i) % rotation].get());
  };

  // The reference: metaltopk's CPU backend on the host copy, window positions, sorted.
  std::vector<int32_t> want(outputs);
  {
    std::vector<int32_t> lengths = h.lengths;
    RaggedCall call(lengths.data(), nullptr, nullptr, s.rows, 0, 1, IndexMode::none);
    const mtk_tensor x = describe(in.first_input.data(), MTK_FLOAT32, s.rows, s.n);
    const mtk_tensor idx = describe(want.data(), MTK_INT32, s.rows, s.k);
    check(mtk_topk_ragged(cpu, &x, s.k, 1, 1, &call.params, nullptr, &idx, nullptr),
          "mtk_topk_ragged on the CPU backend (the reference)");
  }

  auto upload = [&](const std::vector<int32_t>& v) {
    DeviceBuffer b(std::max<size_t>(v.size() * 4, 256));
    checked(cudaMemcpy(b.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
    return b;
  };
  DeviceBuffer lengths_d = upload(h.lengths), offsets_d = upload(h.offsets),
               page_table_d = upload(h.page_table),
               zeros_d = upload(std::vector<int32_t>(size_t(s.rows), 0));
  // FlashInfer takes its lengths as a mutable pointer: its own copy keeps the others' intact.
  DeviceBuffer flashinfer_lengths_d = upload(h.lengths);
  DeviceBuffer out_d(outputs * 4), values_d(outputs * 4);
  auto* out_idx = static_cast<int32_t*>(out_d.get());
  auto* lengths = static_cast<int32_t*>(lengths_d.get());
  auto download_indices = [&]() {
    std::vector<int32_t> v(outputs);
    checked(cudaMemcpy(v.data(), out_d.get(), outputs * 4, cudaMemcpyDeviceToHost), "copy");
    return v;
  };

  // metaltopk on the device, unsorted (as every peer here), indices only, per index mode: timed
  // once a mode, checked like a peer (and for its -1 padding). A refusal (today's CUDA backend
  // refuses ragged calls) marks the rows of that mode and the peers still run.
  struct MtkResult {
    bool done = false;
    double graph = -1, loop = -1;
    std::string status, note;
  };
  std::map<IndexMode, MtkResult> mtk;
  auto metaltopk = [&](IndexMode mode) -> const MtkResult& {
    MtkResult& m = mtk[mode];
    if (m.done) return m;
    m.done = true;
    std::fprintf(stderr, "[peers]   metaltopk (%s)\n", mode_name(mode));
    std::vector<mtk_tensor> x;
    for (const DeviceBuffer& b : in.inputs)
      x.push_back(describe(b.get(), MTK_FLOAT32, s.rows, s.n));
    RaggedCall call(lengths_d.get(), offsets_d.get(), page_table_d.get(), s.rows, h.pages,
                    s.page_size, mode);
    const mtk_tensor idx = describe(out_d.get(), MTK_INT32, s.rows, s.k);
    size_t ws_bytes = 0;
    mtk_status status = mtk_topk_ragged_workspace_size(ctx, &x[0], s.k, 1, 0, &call.params,
                                                       MTK_INT32, &ws_bytes);
    DeviceBuffer workspace(std::max<size_t>(ws_bytes, 256));
    if (status == MTK_SUCCESS) {
      checked(cudaMemset(out_d.get(), 0x7f, outputs * 4), "memset");
      status = mtk_topk_ragged_with_workspace(ctx, &x[0], s.k, 1, 0, &call.params, nullptr, &idx,
                                              workspace.get(), ws_bytes, stream);
    }
    if (status != MTK_SUCCESS) {
      m.status = status == MTK_ERROR_BACKEND_UNAVAILABLE ? "refused" : "failed";
      m.note = std::string("metaltopk: ") + mtk_status_string(status) + ": " +
               mtk_last_error_message();
      return m;
    }
    try {
      checked(cudaStreamSynchronize(stream), "metaltopk");
      Row check_row;
      compare_ragged(s, scores, h, want, download_indices(), mode, true, check_row);
      m.status = check_row.status;
      if (!check_row.note.empty()) m.note = "metaltopk: " + check_row.note;
      time_both(stream, st, [&](int i) -> cudaError_t {
        check(mtk_topk_ragged_with_workspace(ctx, &x[size_t(i) % rotation], s.k, 1, 0,
                                             &call.params, nullptr, &idx, workspace.get(),
                                             ws_bytes, stream),
              "mtk_topk_ragged_with_workspace");
        return cudaSuccess;
      }, m.graph, m.loop, m.note);
    } catch (const std::exception& e) {
      cudaGetLastError();
      m.status = "failed";
      m.note += (m.note.empty() ? "" : "; ") + std::string(e.what());
    }
    return m;
  };

  struct Peer {
    std::string name;
    IndexMode mode;
    std::string note;
    Call call;
  };
  std::vector<Peer> peer_list;
  DeviceBuffer row_states(peers::flashinfer_row_states_bytes());
  checked(cudaMemset(row_states.get(), 0, peers::flashinfer_row_states_bytes()), "memset");
  auto* fi_lengths = static_cast<int32_t*>(flashinfer_lengths_d.get());
  for (bool deterministic : {false, true}) {
    const std::string suffix = deterministic ? "_deterministic" : "";
    if (s.causal()) {
      peer_list.push_back({"flashinfer_ragged_transform" + suffix, IndexMode::ragged,
                           "offsets[r] = r * n", [&, deterministic](int i) {
                             return peers::flashinfer_ragged_transform(
                                 input(i), out_idx, static_cast<int32_t*>(offsets_d.get()),
                                 fi_lengths, uint32_t(s.rows), uint32_t(s.n), uint32_t(s.k),
                                 row_states.get(), deterministic, stream);
                           }});
    } else {
      peer_list.push_back({"flashinfer_page_table_transform" + suffix, IndexMode::page_table,
                           "page_size " + std::to_string(s.page_size) + ", scattered pages",
                           [&, deterministic](int i) {
                             return peers::flashinfer_page_table_transform(
                                 input(i), out_idx, static_cast<int32_t*>(page_table_d.get()),
                                 h.pages, fi_lengths, uint32_t(s.rows), uint32_t(s.n),
                                 uint32_t(s.k), uint32_t(s.page_size), row_states.get(),
                                 deterministic, stream);
                           }});
    }
  }
  DeviceBuffer vllm_scratch(std::max<size_t>(peers::vllm_decode_scratch_bytes(s.rows, s.n, s.k),
                                             256));
  if (s.causal()) {
    peer_list.push_back({"vllm_top_k_per_row_prefill", IndexMode::none,
                         "row_starts 0, row_ends = lengths", [&](int i) {
                           return peers::vllm_top_k_per_row_prefill(
                               input(i), static_cast<int32_t*>(zeros_d.get()), lengths, out_idx,
                               s.rows, s.n, s.k, stream);
                         }});
  } else {
    peer_list.push_back({"vllm_top_k_per_row_decode", IndexMode::none,
                         "next_n 1, 1-D seq_lens", [&](int i) {
                           return peers::vllm_top_k_per_row_decode(input(i), lengths, out_idx,
                                                                   s.rows, s.n, s.k,
                                                                   vllm_scratch.get(), stream);
                         }});
  }
  size_t cub_temp_bytes = 0;
  cudaError_t cub_query = peers::cub_batched_topk_lengths(
      input(0), static_cast<float*>(values_d.get()), out_idx, lengths, s.rows, s.n, s.k, nullptr,
      &cub_temp_bytes, stream);
  std::unique_ptr<DeviceBuffer> cub_temp;  // a failed allocation fails CUB's row alone
  try {
    cub_temp = std::make_unique<DeviceBuffer>(std::max<size_t>(cub_temp_bytes, 256));
  } catch (const std::exception&) {
    cudaGetLastError();
    if (cub_query == cudaSuccess) cub_query = cudaErrorMemoryAllocation;
  }
  peer_list.push_back({"cub_device_batched_topk_lengths", IndexMode::none,
                       "per-segment sizes (deferred_sequence of the device lengths); a row "
                       "shorter than k leaves its other outputs unwritten",
                       [&](int i) {
                         if (cub_query != cudaSuccess) return cub_query;
                         size_t bytes = cub_temp_bytes;
                         return peers::cub_batched_topk_lengths(
                             input(i), static_cast<float*>(values_d.get()), out_idx, lengths,
                             s.rows, s.n, s.k, cub_temp->get(), &bytes, stream);
                       }});

  bool ok = true;
  for (const Peer& peer : peer_list) {
    const MtkResult& m = metaltopk(peer.mode);
    Row r;
    r.shape = s.name();
    r.family = "ragged";
    r.k = s.k;
    r.dtype = "f32";
    r.peer = peer.name;
    r.transform = mode_name(peer.mode);
    r.metaltopk_us = m.graph;
    r.metaltopk_loop_us = m.loop;
    r.metaltopk_status = m.status;
    r.score_bytes = score_bytes;
    r.read_once_us = 1e6 * score_bytes / copy_rate;
    r.copy_gbps = 1e-9 * copy_rate;
    r.note = peer.note + (m.note.empty() ? "" : "; " + m.note);
    std::fprintf(stderr, "[peers]   %s\n", peer.name.c_str());
    try {
      checked(cudaMemset(out_d.get(), 0xff, outputs * 4), "memset");  // -1: unwritten outputs
      const cudaError_t first = peer.call(0);
      // FlashInfer's host-side refusals: a k or mode it does not take (cudaErrorNotSupported),
      // or a row too long for its deterministic multi-CTA radix (cudaErrorInvalidConfiguration).
      if (first == cudaErrorNotSupported || first == cudaErrorInvalidConfiguration) {
        cudaGetLastError();
        r.status = "unsupported";
        r.note += std::string("; the peer returns ") + cudaGetErrorName(first) +
                  " for this shape";
      } else {
        checked(first, "first call");
        checked(cudaStreamSynchronize(stream), "first call");
        compare_ragged(s, scores, h, want, download_indices(), peer.mode, false, r);
        time_both(stream, st, peer.call, r.peer_us, r.peer_loop_us, r.note);
      }
    } catch (const std::exception& e) {
      cudaGetLastError();
      r.status = "failed";
      r.note += "; " + std::string(e.what());
    }
    ok = ok && r.status != "failed" && r.status != "mismatch" && m.status != "failed" &&
         m.status != "mismatch";
    out.add(r);
  }
  return ok;
}

// ---- self-test of the checks (host only, no device) --------------------------------------------

int self_test() {
  int failures = 0;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) {
      std::fprintf(stderr, "self-test FAILED: %s\n", what);
      ++failures;
    }
  };
  // A 2 x 6 f32 input, k = 3; row 1 has a tie at the k-th value.
  const TopkShape s{"selftest", 2, 6, 3, false, -1};
  const std::vector<float> x = {0.5f, 3.f, -1.f, 2.f, 7.f, 1.f, 4.f, 2.f, 2.f, 9.f, 2.f, -3.f};
  std::vector<uint8_t> input(x.size() * 4);
  std::memcpy(input.data(), x.data(), input.size());
  auto result = [&](const std::vector<int64_t>& idx) {
    TopkResult r{std::vector<uint8_t>(idx.size() * 4), idx};
    for (size_t j = 0; j < idx.size(); ++j)
      std::memcpy(&r.values[j * 4], &x[(j / 3) * 6 + idx[j]] , 4);
    return r;
  };
  const TopkResult want = result({4, 1, 3, 3, 0, 1});  // sorted, ties to the lower index
  Row a;
  compare_topk(s, input, want, result({3, 4, 1, 1, 3, 0}), false, a);
  expect(a.status == "match" && a.mismatch_rows == 0 && a.tie_rows == 0, "unsorted, same sets");
  Row b;
  compare_topk(s, input, want, result({4, 1, 3, 3, 0, 4}), false, b);
  expect(b.status == "match (index ties)" && b.tie_rows == 1, "tie at the k-th value");
  Row c;
  compare_topk(s, input, want, result({4, 1, 5, 3, 0, 1}), false, c);
  expect(c.status == "mismatch" && c.mismatch_rows == 1, "a smaller value selected");
  Row d;
  TopkResult bad = want;
  bad.values[0] ^= 1;  // a value that is not the input's at its index
  compare_topk(s, input, want, bad, true, d);
  expect(d.status == "mismatch", "value not from the input");
  Row e;
  compare_topk(s, input, want, result({1, 4, 3, 3, 0, 1}), true, e);
  expect(e.status == "mismatch", "sorted peer out of order");
  Row f;
  compare_topk(s, input, want, result({4, 1, 3, 3, 0, 2}), true, f);
  expect(f.status == "match (index ties)", "sorted peer, another index of the k-th value");
  Row g;
  compare_topk(s, input, want, result({4, 4, 3, 3, 0, 1}), false, g);
  expect(g.status == "mismatch", "repeated index");

  // Router: 2 tokens of 4 experts, k = 2, softmax.
  const RouterShape r{false, 2, 4, 2};
  std::vector<uint16_t> logits;
  for (float v : {1.f, 3.f, 2.f, 0.f, 5.f, 5.f, -1.f, 0.f}) logits.push_back(to_bfloat16(v));
  const std::vector<int32_t> ids = {1, 2, 0, 1};
  const std::vector<float> w = {0.731059f, 0.268941f, 0.5f, 0.5f};
  Row h;
  compare_route(r, logits, {}, w, ids, {0.268941f, 0.731059f, 0.5f, 0.5f}, {2, 1, 1, 0}, h);
  expect(h.status == "match" && h.max_weight_rel_err < 1e-6, "route, other order");
  Row i;
  compare_route(r, logits, {}, w, ids, {0.731059f, 0.268941f, 0.5f, 0.6f}, ids, i);
  expect(i.status == "mismatch", "route, wrong weight");
  Row j;
  compare_route(r, logits, {}, w, ids, w, {1, 3, 0, 1}, j);
  expect(j.status == "mismatch", "route, wrong expert");

  // Ragged: 2 rows of 8, k = 3, lengths 6 and 2; ragged offsets r * 8; row 0 has 5.0 twice.
  const RaggedShape rs{"selftest", 2, 8, 3, 0, 0, 1};
  RaggedHost rh(rs, 1);
  rh.lengths = {6, 2};
  const std::vector<float> sc = {1, 5, 3, 5, 0, 4, 9, 9, 2, 1, 7, 7, 7, 7, 7, 7};
  const std::vector<int32_t> rwant = {1, 3, 5, 0, 1, -1};  // positions, -1 padded
  Row ra;
  compare_ragged(rs, sc.data(), rh, rwant, {5, 1, 3, 1, 0, -1}, IndexMode::none, false, ra);
  expect(ra.status == "match", "ragged, unsorted, same sets");
  Row rb;
  compare_ragged(rs, sc.data(), rh, rwant, {5, 1, 3, 8, -1, 9}, IndexMode::ragged, false, rb);
  expect(rb.status == "match", "ragged transform, padding anywhere for a peer");
  Row rc;
  compare_ragged(rs, sc.data(), rh, rwant, {5, 1, 3, 8, -1, 9}, IndexMode::ragged, true, rc);
  expect(rc.status == "mismatch", "metaltopk must pad after its winners");
  Row rd;
  compare_ragged(rs, sc.data(), rh, rwant, {5, 1, 6, 0, 1, -1}, IndexMode::none, false, rd);
  expect(rd.status == "mismatch", "a position past the row's length");
  Row re;
  compare_ragged(rs, sc.data(), rh, rwant, {5, 1, 2, 0, 1, -1}, IndexMode::none, false, re);
  expect(re.status == "mismatch", "a smaller value selected");
  Row rf;
  compare_ragged(rs, sc.data(), rh, rwant, {0, 1, -1, 0, 1, -1}, IndexMode::none, false, rf);
  expect(rf.status == "mismatch", "too few indices");
  // The page table's inverse, page_size 2 over 8 positions: every position maps back.
  const RaggedShape ps{"selftest", 3, 8, 3, 1, 8, 2};
  const RaggedHost ph(ps, 7);
  bool inverse_ok = true;
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t p = 0; p < 8; ++p) {
      const int64_t index = int64_t(ph.page_table[size_t(r * 4 + p / 2)]) * 2 + p % 2;
      inverse_ok = inverse_ok && ph.position(IndexMode::page_table, r, index) == p &&
                   ph.position(IndexMode::page_table, (r + 1) % 3, index) == -2;
    }
  expect(inverse_ok, "page-table inverse");
  // The ragged part's metaltopk calls, on the CPU backend: in every index mode, its result maps
  // back to the reference's positions (also rows of length 0 and below k).
  {
    Context cpu(MTK_BACKEND_CPU);
    const RaggedShape cs{"selftest", 4, 16, 5, 1, 16, 4};
    RaggedHost ch(cs, 3);
    ch.lengths = {0, 3, 16, 9};
    std::vector<float> cx(64);
    for (size_t i = 0; i < cx.size(); ++i) cx[i] = standard_normal(11, i);
    const mtk_tensor xt = describe(cx.data(), MTK_FLOAT32, cs.rows, cs.n);
    auto run_cpu = [&](IndexMode mode, int sorted) {
      std::vector<int32_t> idx(size_t(cs.rows * cs.k));
      const mtk_tensor it = describe(idx.data(), MTK_INT32, cs.rows, cs.k);
      RaggedCall call(ch.lengths.data(), ch.offsets.data(), ch.page_table.data(), cs.rows,
                      ch.pages, ch.page_size, mode);
      check(mtk_topk_ragged(cpu.get(), &xt, cs.k, 1, sorted, &call.params, nullptr, &it,
                            nullptr),
            "mtk_topk_ragged on the CPU backend");
      return idx;
    };
    const std::vector<int32_t> cwant = run_cpu(IndexMode::none, 1);
    for (IndexMode mode : {IndexMode::none, IndexMode::ragged, IndexMode::page_table}) {
      Row rm;
      compare_ragged(cs, cx.data(), ch, cwant, run_cpu(mode, 0), mode, true, rm);
      expect(rm.status == "match", mode_name(mode));
    }
  }

  // JSON: nulls for unmeasured times, escaped notes.
  Row k;
  k.note = "a \"quoted\" note";
  const std::string json = to_json(k);
  expect(json.find("\"peer_us\": null") != std::string::npos, "null time");
  expect(json.find("a \\\"quoted\\\" note") != std::string::npos, "escaped note");
  failures += sampling_self_test();
  std::printf("peers_bench self-test: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}

// ---- driver -------------------------------------------------------------------------------------

constexpr const char* kUsage =
    "peers_bench [--probe | --self-test | --help] [--json FILE] "
    "[--only topk|router|ragged|sampling] "
    "[--filter TEXT] [--calls N] [--reps R] [--graph-calls N] [--replays N]";

int run(int argc, char** argv) {
  Settings st;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--probe") {  // run.sh: does the binary load here (library found, glibc)?
      std::printf("peers_bench: loads, metaltopk %d\n", mtk_version());
      return 0;
    }
    if (a == "--self-test") return self_test();
    if (a == "--help") {
      std::printf("%s\n", kUsage);
      return 0;
    }
    if (a == "--json") st.json_path = value();
    else if (a == "--only") st.only = value();
    else if (a == "--filter") st.filter = value();
    else if (a == "--calls") st.calls = std::stoi(value());
    else if (a == "--reps") st.reps = std::stoi(value());
    else if (a == "--graph-calls") st.graph_calls = std::stoi(value());
    else if (a == "--replays") st.replays = std::stoi(value());
    else throw std::runtime_error("unknown argument " + a + " (usage: " + kUsage + ")");
  }
  if (!st.only.empty() && st.only != "topk" && st.only != "router" && st.only != "ragged" &&
      st.only != "sampling")
    throw std::runtime_error("--only takes topk, router, ragged or sampling");
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::fprintf(stderr, "peers_bench: no CUDA device (%s); nothing to measure here\n",
                 cudaGetErrorString(cudaGetLastError()));
    return 2;
  }
  int available = 0;
  check(mtk_backend_query(MTK_BACKEND_CUDA, nullptr, &available), "mtk_backend_query");
  if (!available) {
    std::fprintf(stderr, "peers_bench: metaltopk's CUDA backend is not available\n");
    return 2;
  }
  Output out(st.json_path);
  Stream stream;  // outlives the context (its per-stream scratch)
  Context ctx(MTK_BACKEND_CUDA);
  int l2 = 0;
  checked(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "L2 size");
  bool ok = true;
  auto wanted = [&](const std::string& name) {
    return st.filter.empty() || name.find(st.filter) != std::string::npos;
  };
  auto part = [&](const char* name) { return st.only.empty() || st.only == name; };
  double copy_rate = -1;  // measured once, for every row's read_once_us
  if (part("topk")) {
    copy_rate = copy_bytes_per_s(stream.get());
    std::vector<TopkShape> shapes = topk_shapes();
    for (const TopkShape& s : large_k_shapes()) shapes.push_back(s);
    for (const TopkShape& s : shapes) {
      if (!wanted(s.filter_key())) continue;
      try {
        ok = bench_topk(s, ctx.get(), stream.get(), size_t(l2), copy_rate, st, out) && ok;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", s.name().c_str(), e.what());
        cudaGetLastError();
        ok = false;
      }
    }
  }
  if (part("router")) {
    for (const RouterShape& s : router_shapes()) {
      if (!wanted(s.name())) continue;
      try {
        ok = bench_router(s, ctx.get(), stream.get(), size_t(l2), st, out) && ok;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", s.name().c_str(), e.what());
        cudaGetLastError();
        ok = false;
      }
    }
  }
  if (part("ragged")) {
    Context cpu(MTK_BACKEND_CPU);  // the reference
    for (const RaggedShape& s : ragged_shapes()) {
      if (!wanted(s.name())) continue;
      try {
        if (copy_rate < 0) copy_rate = copy_bytes_per_s(stream.get());
        ok = bench_ragged(s, ctx.get(), cpu.get(), stream.get(), size_t(l2), copy_rate, st, out) &&
             ok;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", s.name().c_str(), e.what());
        cudaGetLastError();
        ok = false;
      }
    }
  }
  if (part("sampling")) {
    try {
      ok = bench_sampling(st, ctx.get(), stream.get(), size_t(l2), wanted, out) && ok;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "sampling: %s\n", e.what());
      cudaGetLastError();
      ok = false;
    }
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("peers_bench", [&] { return run(argc, argv); });
}
