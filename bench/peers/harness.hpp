// What every family of peers_bench shares (main.cu: top-k, router, ragged; sampling.cu:
// sampling): the settings, the JSON rows and the two timings.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "c_abi_bench.hpp"
#include "metaltopk.h"

namespace harness {

using namespace c_abi_bench;

// ---- settings and output ------------------------------------------------------------------------

struct Settings {
  std::string json_path, only, filter;
  int calls = 50, reps = 5, graph_calls = 20, replays = 10;
};

// One result row; numbers < 0 are written as null.
struct Row {
  std::string shape, family, dtype, peer, status = "ok", note;
  int64_t k = 0;
  double peer_us = -1, metaltopk_us = -1, peer_loop_us = -1, metaltopk_loop_us = -1;
  double metaltopk_sorted_us = -1, metaltopk_sorted_loop_us = -1;
  bool peer_sorted = false;
  int64_t rows_checked = 0, tie_rows = 0, mismatch_rows = 0;
  double max_weight_rel_err = -1;
  std::string index_dtype = "int32";
  // Ragged rows (issue #31): the index transform of the peer (and of metaltopk's call it is
  // compared with), metaltopk's own check or refusal.
  std::string transform, metaltopk_status;
  // Top-k and ragged rows: the time to read the scores once at the measured copy rate, the
  // floor of any selection that reads every score.
  double score_bytes = -1, read_once_us = -1, copy_gbps = -1;
  // Sampling rows (issue #33): the operation and its filter parameters (metaltopk_status is
  // metaltopk's check against its CPU backend, or its refusal), and the largest relative
  // difference between the peer's kept probabilities and metaltopk's (the renormalisations).
  std::string op, params;
  double max_prob_rel_err = -1;
};

inline std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

inline std::string number(double v, int digits = 3) {
  if (v < 0 || !std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

inline std::string to_json(const Row& r) {
  std::string s = "{";
  s += "\"shape\": \"" + json_escape(r.shape) + "\", ";
  s += "\"family\": \"" + json_escape(r.family) + "\", ";
  s += "\"k\": " + std::to_string(r.k) + ", ";
  s += "\"dtype\": \"" + r.dtype + "\", ";
  s += "\"peer\": \"" + json_escape(r.peer) + "\", ";
  s += "\"peer_us\": " + number(r.peer_us) + ", ";
  s += "\"metaltopk_us\": " + number(r.metaltopk_us) + ", ";
  s += "\"peer_loop_us\": " + number(r.peer_loop_us) + ", ";
  s += "\"metaltopk_loop_us\": " + number(r.metaltopk_loop_us) + ", ";
  s += "\"speedup\": " + number(r.peer_us > 0 && r.metaltopk_us > 0 ? r.peer_us / r.metaltopk_us
                                                                     : -1) + ", ";
  if (r.family == "sampling") {
    s += "\"op\": \"" + r.op + "\", ";
    s += "\"params\": \"" + json_escape(r.params) + "\", ";
    s += "\"metaltopk_status\": \"" + r.metaltopk_status + "\", ";
    s += "\"max_prob_rel_err\": " + number(r.max_prob_rel_err, 9) + ", ";
  } else if (r.family != "router" && r.family != "ragged") {
    s += "\"peer_sorted\": " + std::string(r.peer_sorted ? "true" : "false") + ", ";
    s += "\"metaltopk_sorted_us\": " + number(r.metaltopk_sorted_us) + ", ";
    s += "\"metaltopk_sorted_loop_us\": " + number(r.metaltopk_sorted_loop_us) + ", ";
  } else {
    s += "\"max_weight_rel_err\": " + number(r.max_weight_rel_err, 9) + ", ";
  }
  if (r.family == "ragged") {
    s += "\"transform\": \"" + r.transform + "\", ";
    s += "\"metaltopk_status\": \"" + r.metaltopk_status + "\", ";
  }
  if (r.read_once_us >= 0) {
    s += "\"score_bytes\": " + number(r.score_bytes, 0) + ", ";
    s += "\"read_once_us\": " + number(r.read_once_us) + ", ";
    s += "\"copy_gbps\": " + number(r.copy_gbps, 1) + ", ";
  }
  s += "\"index_dtype\": \"" + r.index_dtype + "\", ";
  s += "\"status\": \"" + r.status + "\", ";
  s += "\"rows_checked\": " + std::to_string(r.rows_checked) + ", ";
  s += "\"tie_rows\": " + std::to_string(r.tie_rows) + ", ";
  s += "\"mismatch_rows\": " + std::to_string(r.mismatch_rows) + ", ";
  s += "\"timing\": \"graph: median over replays of a graph of captured calls, per call; loop: "
       "median over bursts of back-to-back calls, per call\", ";
  s += "\"note\": \"" + json_escape(r.note) + "\"}";
  return s;
}

class Output {
 public:
  explicit Output(std::string path) : path_(std::move(path)) {}
  void add(const Row& r) {
    rows_.push_back(to_json(r));
    std::printf("%s\n", rows_.back().c_str());
    std::fflush(stdout);
    if (path_.empty()) return;
    FILE* f = std::fopen(path_.c_str(), "w");
    if (f == nullptr) throw std::runtime_error("cannot write " + path_);
    std::fprintf(f, "[\n");
    for (size_t i = 0; i < rows_.size(); ++i)
      std::fprintf(f, "  %s%s\n", rows_[i].c_str(), i + 1 < rows_.size() ? "," : "");
    std::fprintf(f, "]\n");
    std::fclose(f);
  }

 private:
  std::string path_;
  std::vector<std::string> rows_;
};

// ---- timing ---------------------------------------------------------------------------------------

// A call that enqueues one operation on the stream; returns a CUDA error (cudaSuccess when fine).
using Call = std::function<cudaError_t(int)>;

inline void checked(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median per-call time of `graph_calls` calls captured in one graph, replayed `replays` times.
// Throws when the calls cannot be captured (the row then says so and keeps the loop time).
inline double graph_us(cudaStream_t stream, const Settings& st, const Call& call) {
  for (int i = 0; i < st.graph_calls; ++i) checked(call(i), "warm-up call");
  checked(cudaStreamSynchronize(stream), "warm-up");
  cudaGraph_t graph = nullptr;
  checked(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  cudaError_t failed = cudaSuccess;
  try {
    for (int i = 0; i < st.graph_calls && failed == cudaSuccess; ++i) failed = call(i);
  } catch (...) {  // never leave the stream capturing
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr)
      cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  if (failed != cudaSuccess || ended != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw std::runtime_error(std::string("graph capture failed: ") +
                             cudaGetErrorString(failed != cudaSuccess ? failed : ended));
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  checked(inst, "graph instantiate");
  std::vector<double> per_call;
  Event start, end;
  checked(cudaGraphLaunch(exec, stream), "graph launch");  // upload and warm
  checked(cudaStreamSynchronize(stream), "graph warm-up");
  for (int r = 0; r < st.replays; ++r) {
    checked(cudaEventRecord(start.get(), stream), "event");
    checked(cudaGraphLaunch(exec, stream), "graph launch");
    checked(cudaEventRecord(end.get(), stream), "event");
    checked(cudaEventSynchronize(end.get()), "event sync");
    float ms = 0;
    checked(cudaEventElapsedTime(&ms, start.get(), end.get()), "elapsed");
    per_call.push_back(1e3 * ms / st.graph_calls);
  }
  cudaGraphExecDestroy(exec);
  return median(per_call);
}

inline double loop_us(cudaStream_t stream, const Settings& st, const Call& call) {
  for (int i = 0; i < 3; ++i) checked(call(i), "warm-up call");
  checked(cudaStreamSynchronize(stream), "warm-up");
  return median_burst_us(stream, st.calls, st.reps,
                         [&](int i) { checked(call(i), "timed call"); });
}

// Graph and loop time of `call` into (graph, loop); a capture failure goes to `note`.
inline void time_both(cudaStream_t stream, const Settings& st, const Call& call,
                      double& graph, double& loop, std::string& note) {
  try {
    graph = graph_us(stream, st, call);
  } catch (const std::exception& e) {
    note += (note.empty() ? "" : "; ") + std::string(e.what());
    checked(cudaStreamSynchronize(stream), "after a failed capture");
  }
  loop = loop_us(stream, st, call);
}

// Large problems take ms per call: fewer calls keep the run within its budget.
inline Settings scaled(Settings st, double bytes) {
  if (bytes >= 256.0 * (1 << 20)) {
    st.calls = 5;
    st.reps = 3;
    st.graph_calls = 3;
    st.replays = 3;
  } else if (bytes >= 32.0 * (1 << 20)) {
    st.calls = std::min(st.calls, 20);
    st.graph_calls = std::min(st.graph_calls, 10);
    st.replays = std::min(st.replays, 5);
  }
  return st;
}

// ---- the sampling family (sampling.cu, issue #33) -------------------------------------------

// Times and checks every sampling shape that `wanted` keeps; false on a failure or mismatch.
bool bench_sampling(const Settings& st, mtk_context ctx, cudaStream_t stream, size_t l2_bytes,
                    const std::function<bool(const std::string&)>& wanted, Output& out);
// The sampling checks on small host cases and metaltopk's CPU backend; the failure count.
int sampling_self_test();

}  // namespace harness
