// Eager per-call cost of mtk_moe_route on CUDA as a C/C++ runtime sees it: descriptors and
// outputs built once on cudaMalloc memory, calls made straight through the C ABI on one stream,
// host launch overhead included. bench_router_cuda.py runs this binary with its own shape list
// and merges the lines into its table, so the shapes live in one place.
//
// Usage: bench_router_c_abi [--calls N] [--reps R] SHAPE...
//   SHAPE = router:tokens:experts:k:scoring:n_group:topk_group:scale:bias
//           router is a label echoed back; scoring softmax, sigmoid or none; n_group 0 or 1 for
//           no grouping; bias 1 adds a per-expert float32 bias N(0, 0.1^2). Logits are bfloat16
//           standard normal, renormalised weights, int32 ids.
// Per shape, prints one JSON line with eager_us: the median over R repetitions of (time of N
// back-to-back calls) / N, CUDA events around the whole burst, i.e. max(host cost, device time)
// per call, what a runtime issuing calls in a row pays.
// Before timing, the result is checked against the CPU backend's mtk_moe_route on the same
// logits and against a float64 recomputation of the weights from the ids returned, so a wrong
// answer is never timed: ids must equal the CPU's (on the plain path exactly, as the contract
// says; with bias or groups a token may differ where float32 rounding breaks a near-tie, and
// then every rank's selection score must match the CPU's within 1e-5), and weights must match
// within 1e-5 relative.
// Exits 0 on success, 1 on a failure or mismatch, 2 when no CUDA device is available.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "c_abi_bench.hpp"
#include "metaltopk.h"

namespace {

using namespace c_abi_bench;

constexpr double kScoreRtol = 1e-5;
constexpr double kWeightRtol = 1e-5, kWeightAtol = 1e-7;
// Near-tie tokens beyond this share mean a broken kernel, not rounding.
constexpr double kMaxNearTieShare = 1e-3;

struct Shape {
  std::string router;
  int64_t tokens, experts, k;
  mtk_scoring scoring;
  int64_t n_group, topk_group;
  float scale;
  bool bias;

  bool plain() const { return !bias && n_group <= 1; }
};

mtk_scoring parse_scoring(const std::string& name) {
  if (name == "softmax") return MTK_SCORING_SOFTMAX;
  if (name == "sigmoid") return MTK_SCORING_SIGMOID;
  if (name == "none") return MTK_SCORING_NONE;
  throw std::runtime_error("scoring '" + name + "' is not softmax, sigmoid or none");
}

Shape parse_shape(const std::string& spec) {
  const std::vector<std::string> f = split_fields(spec);
  if (f.size() != 9) {
    throw std::runtime_error("shape '" + spec + "' is not " +
                             "router:tokens:experts:k:scoring:n_group:topk_group:scale:bias");
  }
  Shape s{f[0],
          std::stoll(f[1]),
          std::stoll(f[2]),
          std::stoll(f[3]),
          parse_scoring(f[4]),
          std::stoll(f[5]),
          std::stoll(f[6]),
          std::stof(f[7]),
          f[8] == "1"};
  if (s.tokens < 1 || s.experts < 1 || s.k < 1 || s.k > s.experts) {
    throw std::runtime_error("shape '" + spec + "' is out of range");
  }
  return s;
}

mtk_tensor describe_vector(void* data, int64_t size) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = MTK_FLOAT32;
  t.ndim = 1;
  t.sizes[0] = size;
  t.strides[0] = 1;
  return t;
}

mtk_router_params params_of(const Shape& s, const mtk_tensor* bias) {
  mtk_router_params p = MTK_ROUTER_PARAMS_INIT;
  p.k = s.k;
  p.scoring = s.scoring;
  p.bias = bias;
  p.n_group = s.n_group;
  p.topk_group = s.topk_group;
  p.renormalize = 1;
  p.scale = s.scale;
  return p;
}

struct Route {
  std::vector<float> weights;
  std::vector<int32_t> ids;
};

// ---- verification ------------------------------------------------------------------------------

// Float64 scores of one token (router_semantics.md): u (weight numerators) and the selection
// scores c = s + bias.
struct TokenScores {
  std::vector<double> u, c;
};

TokenScores token_scores(const Shape& s, const uint16_t* logits, const std::vector<float>& bias) {
  TokenScores t{std::vector<double>(s.experts), std::vector<double>(s.experts)};
  double m = -INFINITY, total = 1.0;
  for (int64_t e = 0; e < s.experts; ++e) m = std::max(m, double(from_bfloat16(logits[e])));
  if (s.scoring == MTK_SCORING_SOFTMAX) total = 0.0;
  for (int64_t e = 0; e < s.experts; ++e) {
    const double x = from_bfloat16(logits[e]);
    t.u[e] = s.scoring == MTK_SCORING_SOFTMAX   ? std::exp(x - m)
             : s.scoring == MTK_SCORING_SIGMOID ? 1.0 / (1.0 + std::exp(-x))
                                                : x;
    if (s.scoring == MTK_SCORING_SOFTMAX) total += t.u[e];
  }
  for (int64_t e = 0; e < s.experts; ++e) {
    t.c[e] = t.u[e] / total + (bias.empty() ? 0.0 : double(bias[e]));
  }
  return t;
}

bool close(double got, double want, double rtol, double atol) {
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// Empty when the CUDA route is right (see the header); else why not. Counts near-tie tokens.
std::string mismatch(const Shape& s, const std::vector<uint16_t>& logits,
                     const std::vector<float>& bias, const Route& cpu, const Route& gpu,
                     int64_t& near_ties) {
  near_ties = 0;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const std::string where = "token " + std::to_string(t) + ": ";
    const int32_t* got = &gpu.ids[t * s.k];
    const int32_t* want = &cpu.ids[t * s.k];
    const TokenScores scores = token_scores(s, &logits[t * s.experts], bias);
    double u_total = 0.0;
    for (int64_t r = 0; r < s.k; ++r) {
      if (got[r] < 0 || got[r] >= s.experts) return where + "id out of range";
      if (std::count(got, got + s.k, got[r]) != 1) return where + "repeated id";
      u_total += scores.u[got[r]];
    }
    if (!std::equal(got, got + s.k, want)) {
      if (s.plain()) return where + "ids differ from the CPU backend's on the plain path";
      for (int64_t r = 0; r < s.k; ++r) {
        if (!close(scores.c[got[r]], scores.c[want[r]], kScoreRtol, 0.0)) {
          return where + "rank " + std::to_string(r) + " differs from the CPU backend's: expert " +
                 std::to_string(got[r]) + " instead of " + std::to_string(want[r]);
        }
      }
      ++near_ties;
    }
    for (int64_t r = 0; r < s.k; ++r) {
      const double expected = scores.u[got[r]] / u_total * s.scale;
      if (!close(gpu.weights[t * s.k + r], expected, kWeightRtol, kWeightAtol)) {
        return where + "weight " + std::to_string(r) + " is " +
               std::to_string(gpu.weights[t * s.k + r]) + ", expected " + std::to_string(expected);
      }
    }
  }
  if (double(near_ties) > kMaxNearTieShare * double(s.tokens) + 1.0) {
    return std::to_string(near_ties) + " near-tie tokens: more than rounding explains";
  }
  return "";
}

// ---- one shape ---------------------------------------------------------------------------------

void print_shape(FILE* out, const Shape& s) {
  std::fprintf(out, "%s T=%lld E=%lld k=%lld", s.router.c_str(), (long long)s.tokens,
               (long long)s.experts, (long long)s.k);
}

// Returns false on a mismatch (reported on stderr); throws on library or CUDA errors.
bool bench_shape(const Shape& s, mtk_context cuda, mtk_context cpu, cudaStream_t stream,
                 size_t l2_bytes, BurstSettings settings) {
  const size_t elements = static_cast<size_t>(s.tokens * s.experts);
  const size_t logit_bytes = elements * sizeof(uint16_t);
  const size_t outputs = static_cast<size_t>(s.tokens * s.k);
  // Inputs that fit in L2 rotate over several buffers so they are not all served from it.
  const size_t rotation = logit_bytes <= l2_bytes ? 4 : 1;
  const uint64_t seed = static_cast<uint64_t>(s.tokens * 31 + s.experts + s.k) * 8;

  std::vector<std::vector<uint16_t>> host_logits(rotation, std::vector<uint16_t>(elements));
  std::vector<DeviceBuffer> logits;
  for (size_t b = 0; b < rotation; ++b) {
    for (size_t i = 0; i < elements; ++i) {
      host_logits[b][i] = to_bfloat16(standard_normal(seed + b, i));
    }
    logits.emplace_back(logit_bytes);
    check_cuda(cudaMemcpy(logits.back().get(), host_logits[b].data(), logit_bytes,
                          cudaMemcpyHostToDevice),
               "upload logits");
  }
  std::vector<float> host_bias;
  if (s.bias) {
    for (int64_t e = 0; e < s.experts; ++e) {
      host_bias.push_back(0.1f * standard_normal(seed + rotation, static_cast<size_t>(e)));
    }
  }
  DeviceBuffer bias(static_cast<size_t>(s.experts) * sizeof(float));
  if (s.bias) {
    check_cuda(cudaMemcpy(bias.get(), host_bias.data(), host_bias.size() * sizeof(float),
                          cudaMemcpyHostToDevice),
               "upload bias");
  }
  DeviceBuffer weights(outputs * sizeof(float)), ids(outputs * sizeof(int32_t));

  const mtk_tensor device_bias = describe_vector(bias.get(), s.experts);
  const mtk_router_params params = params_of(s, s.bias ? &device_bias : nullptr);
  const mtk_tensor weights_t = describe(weights.get(), MTK_FLOAT32, s.tokens, s.k);
  const mtk_tensor ids_t = describe(ids.get(), MTK_INT32, s.tokens, s.k);
  std::vector<mtk_tensor> logits_t;
  for (const DeviceBuffer& buffer : logits) {
    logits_t.push_back(describe(buffer.get(), MTK_BFLOAT16, s.tokens, s.experts));
  }
  auto call = [&](int i) {
    check(mtk_moe_route(cuda, &logits_t[size_t(i) % rotation], &params, &weights_t, &ids_t,
                        stream),
          "mtk_moe_route (cuda)");
  };

  // The CPU backend on the first buffer's logits, then the CUDA backend on the same.
  Route expected{std::vector<float>(outputs), std::vector<int32_t>(outputs)};
  {
    mtk_tensor host_bias_t = describe_vector(host_bias.data(), s.experts);
    const mtk_router_params cpu_params = params_of(s, s.bias ? &host_bias_t : nullptr);
    const mtk_tensor in = describe(host_logits[0].data(), MTK_BFLOAT16, s.tokens, s.experts);
    const mtk_tensor w = describe(expected.weights.data(), MTK_FLOAT32, s.tokens, s.k);
    const mtk_tensor i = describe(expected.ids.data(), MTK_INT32, s.tokens, s.k);
    check(mtk_moe_route(cpu, &in, &cpu_params, &w, &i, nullptr), "mtk_moe_route (cpu)");
  }
  call(0);
  Route got{std::vector<float>(outputs), std::vector<int32_t>(outputs)};
  check_cuda(cudaMemcpyAsync(got.weights.data(), weights.get(), outputs * sizeof(float),
                             cudaMemcpyDeviceToHost, stream),
             "copy weights");
  check_cuda(cudaMemcpyAsync(got.ids.data(), ids.get(), outputs * sizeof(int32_t),
                             cudaMemcpyDeviceToHost, stream),
             "copy ids");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  int64_t near_ties = 0;
  const std::string why = mismatch(s, host_logits[0], host_bias, expected, got, near_ties);
  if (!why.empty()) {
    print_shape(stderr, s);
    std::fprintf(stderr, ": %s\n", why.c_str());
    return false;
  }

  for (size_t i = 0; i < 3 * rotation; ++i) call(int(i));  // warm-up
  check_cuda(cudaStreamSynchronize(stream), "warm-up");
  const double eager_us = median_burst_us(stream, settings.calls, settings.reps, call);
  std::printf(
      "{\"router\": \"%s\", \"tokens\": %lld, \"experts\": %lld, \"k\": %lld, "
      "\"eager_us\": %.3f, \"calls\": %d, \"reps\": %d, \"input_buffers\": %zu, "
      "\"near_ties\": %lld, \"verified\": true}\n",
      s.router.c_str(), (long long)s.tokens, (long long)s.experts, (long long)s.k, eager_us,
      settings.calls, settings.reps, rotation, (long long)near_ties);
  std::fflush(stdout);
  return true;
}

int run(int argc, char** argv) {
  BurstSettings settings;
  auto option = [&](const std::string& arg, int count, char** args, int& i) {
    return settings.take_option(arg, count, args, i);
  };
  auto bench = [&](const Shape& s, mtk_context cuda, mtk_context cpu, cudaStream_t stream,
                   size_t l2_bytes) {
    return bench_shape(s, cuda, cpu, stream, l2_bytes, settings);
  };
  return run_shapes("bench_router_c_abi",
                    "[--calls N] [--reps R] "
                    "router:tokens:experts:k:scoring:n_group:topk_group:scale:bias...",
                    argc, argv, parse_shape, option, bench, print_shape);
}

}  // namespace

int main(int argc, char** argv) {
  return guarded_main("bench_router_c_abi", [&] { return run(argc, argv); });
}
