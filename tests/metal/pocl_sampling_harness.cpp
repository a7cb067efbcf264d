// Runs the Metal sampling kernel (lib/metal/sampling_kernels.h) on the CPU through PoCL and
// compares every result bit for bit with the CPU backend through the library's C ABI
// (mtk_top_k_mask_logits, mtk_renorm_probs, mtk_sample, mtk_sample_from_logits).
//
// Each case is planned by make_metal_sampling_plan as the Metal backend plans it and bound as
// the glue binds it (a per-row parameter given as a scalar binds the input's buffer). Checks:
//   the whole output buffer equals the CPU's, padding between rows included (canary-filled, so a
//   stray write shows); the input comes back unchanged;
//   batch invariance: chosen rows run alone (a one-row call with that row's parameters) give
//   the bits they have in the batch.
// Cases: the four operations x every input dtype they take x rows of 1 to 4099 tokens and of
// 151936 x scalar and per-row (int32 / int64 top_k, strided) parameters x rows with NaN,
// infinities, ties, signed zeros, subnormals, no mass at all; filters disabled by each of
// vLLM's conventions; temperatures that are greedy, subnormal or infinite; uniforms out of
// [0, 1). Before any kernel runs, the plan's rules are checked on their own (pipeline names,
// workspace, the 32 KB threadgroup-memory limit, refusals of small devices and bad offsets).
//
// usage: pocl_sampling_harness <kernels.bc>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "metal/metal_sampling_plan.hpp"
#include "metaltopk.h"
#include "pocl_runtime.hpp"
#include "pocl_test_data.hpp"

namespace {

using namespace mtk_pocl;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

size_t element_size(mtk_dtype d) { return d == MTK_FLOAT32 || d == MTK_INT32 ? 4 : d == MTK_INT64 ? 8 : 2; }

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// float32 to float16 bits, truncating (any pattern is valid test data; NaN stays NaN, values past
// the range become infinities, tiny ones zeros or subnormals).
uint16_t to_f16_bits(float f) {
  const uint32_t b = bits_of(f);
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (magnitude >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  const int exponent = int(magnitude >> 23) - 127;
  if (exponent < -24) return sign;
  const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  if (exponent < -14) return uint16_t(sign | (mantissa >> (-14 - exponent + 14)));
  return uint16_t(sign | uint32_t((exponent + 15) << 10) | ((magnitude >> 13) & 0x3ffu));
}

void store_value(std::vector<unsigned char>& bytes, mtk_dtype dtype, int64_t at, float value) {
  if (dtype == MTK_FLOAT32) {
    std::memcpy(&bytes[size_t(at) * 4], &value, 4);
  } else {
    const uint16_t h = dtype == MTK_FLOAT16 ? to_f16_bits(value) : uint16_t(bits_of(value) >> 16);
    std::memcpy(&bytes[size_t(at) * 2], &h, 2);
  }
}

// What a row holds. Logits and probabilities read the same kinds differently (a probability's
// negatives, NaN and -inf have no mass; +inf and values above 2^64 count as 2^64).
enum class RowKind { Random, Specials, Ties, NegativeInfinity, AllNaN, Extremes, Peaked, Zeros, Count };

float row_value(RowKind kind, bool probabilities, std::mt19937_64& rng, int64_t i) {
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  const auto random = [&] { return probabilities ? uniform(rng) : normal(rng); };
  switch (kind) {
    case RowKind::Random: return random();
    case RowKind::Specials: {
      const float specials[] = {kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f, 1.0f, -1.0f, 3e38f, 1e-45f};
      return rng() % 3 == 0 ? specials[rng() % 10] : random();
    }
    case RowKind::Ties: {
      const float levels[] = {0.25f, 0.5f, 0.125f, 0.0f};
      return levels[rng() % (probabilities ? 4 : 3)] * (probabilities ? 1.0f : 8.0f);
    }
    case RowKind::NegativeInfinity: return rng() % 5 == 0 ? kNaN : -kInf;
    case RowKind::AllNaN: return kNaN;
    case RowKind::Extremes: {
      // Subnormals, masses past 2^64, logits far enough apart that exp underflows.
      const float extremes[] = {1e-40f, 2e-45f, 1e20f, 3e19f, 200.0f, -150.0f, 1e-38f, 7.0f};
      return extremes[rng() % 8];
    }
    case RowKind::Peaked: {
      // A few heavy tokens and a long tail: top-p boundaries fall among the first tokens.
      const float head = i % 97 == 3 ? 0.5f : (i % 89 == 5 ? 0.25f : 0.0f);
      return probabilities ? head + uniform(rng) * 1e-4f : (head > 0.0f ? 12.0f * head : normal(rng) - 6.0f);
    }
    case RowKind::Zeros: return rng() % 2 == 0 ? 0.0f : -0.0f;
    case RowKind::Count: break;
  }
  return 0.0f;
}

// Parameter pools: the filters' disabling conventions, boundaries and ordinary values.
int64_t pick_top_k(std::mt19937_64& rng, int64_t n) {
  const int64_t pool[] = {0, -1, 1, 2, 5, n - 1, n, n + 3, 50, 1 + int64_t(rng() % uint64_t(n))};
  return pool[rng() % 10];
}
float pick_top_p(std::mt19937_64& rng) {
  const float pool[] = {1.0f, kNaN, 1.5f, 0.0f, -0.5f, 0.5f, 0.9f, 0.75f, 0.999f, 1e-6f};
  return pool[rng() % 10];
}
float pick_min_p(std::mt19937_64& rng) {
  const float pool[] = {0.0f, kNaN, -1.0f, 0.1f, 0.5f, 1.0f, 2.0f, 1e-3f, kInf, 0.25f};
  return pool[rng() % 10];
}
float pick_temperature(std::mt19937_64& rng) {
  const float pool[] = {1.0f, 0.7f, 0.0f, -1.0f, kNaN, 1e-39f, kInf, 1e-30f, 100.0f, 2.5f};
  return pool[rng() % 10];
}
float pick_uniform(std::mt19937_64& rng) {
  const float pool[] = {0.0f, 0.5f, 0.99999994f, 1.0f, 2.0f, -1.0f, kNaN, 0.25f};
  return rng() % 3 == 0 ? pool[rng() % 8] : std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
}

// Which filters a case sets, each a scalar for every row or a per-row tensor.
enum class Param { Unset, Scalar, PerRow };

struct Case {
  mtk_sampling_op op;
  mtk_dtype dtype;
  int64_t rows, n;
  Param top_k, top_p, min_p, temperature;
  mtk_dtype top_k_dtype;   // of a per-row top_k
  mtk_dtype samples_dtype;
  int64_t vector_stride;   // of the per-row tensors
  int64_t input_stride;    // elements between tokens
  int64_t row_pad;         // elements between rows, input and output
};

const char* op_name(mtk_sampling_op op) {
  switch (op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS: return "mask_logits";
    case MTK_SAMPLING_RENORM_PROBS: return "renorm_probs";
    case MTK_SAMPLING_SAMPLE: return "sample";
    case MTK_SAMPLING_SAMPLE_FROM_LOGITS: return "sample_from_logits";
  }
  return "?";
}

const char* param_name(Param p) { return p == Param::Unset ? "-" : p == Param::Scalar ? "scalar" : "per-row"; }

HostTensor vector_tensor(mtk_dtype dtype, int64_t stride, const std::vector<double>& values) {
  const int64_t size = int64_t(values.size());
  HostTensor t = host_vector(dtype, size, stride, 0xcd);
  for (int64_t r = 0; r < size; ++r) {
    unsigned char* at = &t.bytes[size_t(r * stride) * element_size(dtype)];
    if (dtype == MTK_FLOAT32) {
      const float f = float(values[size_t(r)]);
      std::memcpy(at, &f, 4);
    } else if (dtype == MTK_INT32) {
      const int32_t v = int32_t(values[size_t(r)]);
      std::memcpy(at, &v, 4);
    } else {
      const int64_t v = int64_t(values[size_t(r)]);
      std::memcpy(at, &v, 8);
    }
  }
  return t;
}

// One call: its tensors and scalars. Per-row values live in the vectors (one entry per row) and,
// for per-row parameters, in tensors built from them.
struct Call {
  Case c;
  HostTensor input, output;
  std::vector<double> top_k, top_p, min_p, temperature, uniforms;
  HostTensor top_k_tensor, top_p_tensor, min_p_tensor, temperature_tensor, uniforms_tensor;

  bool samples() const { return c.op == MTK_SAMPLING_SAMPLE || c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS; }
  mtk_dtype output_dtype() const {
    if (samples()) return c.samples_dtype;
    return c.op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? c.dtype : MTK_FLOAT32;
  }

  void build_tensors() {
    if (c.top_k == Param::PerRow) top_k_tensor = vector_tensor(c.top_k_dtype, c.vector_stride, top_k);
    if (c.top_p == Param::PerRow) top_p_tensor = vector_tensor(MTK_FLOAT32, c.vector_stride, top_p);
    if (c.min_p == Param::PerRow) min_p_tensor = vector_tensor(MTK_FLOAT32, c.vector_stride, min_p);
    if (c.temperature == Param::PerRow) {
      temperature_tensor = vector_tensor(MTK_FLOAT32, c.vector_stride, temperature);
    }
    if (samples()) uniforms_tensor = vector_tensor(MTK_FLOAT32, c.vector_stride, uniforms);
    const int64_t out_row = samples() ? c.vector_stride : c.n + c.row_pad;
    output.bytes.assign(size_t(samples() ? (c.rows - 1) * out_row + 1 : c.rows * out_row) *
                            element_size(output_dtype()), 0xa5);
    output.descriptor.dtype = output_dtype();
    output.descriptor.ndim = samples() ? 1 : 2;
    output.descriptor.sizes[0] = c.rows;
    output.descriptor.strides[0] = out_row;
    output.descriptor.sizes[1] = c.n;
    output.descriptor.strides[1] = 1;
  }

  // The C ABI's parameters, with every tensor bound.
  mtk_sampling_params params(mtk_tensor (&bound)[4]) {
    mtk_sampling_params p = MTK_SAMPLING_PARAMS_INIT;
    if (c.top_k == Param::Scalar) p.top_k_value = int64_t(top_k[0]);
    if (c.top_p == Param::Scalar) p.top_p_value = float(top_p[0]);
    if (c.min_p == Param::Scalar) p.min_p_value = float(min_p[0]);
    if (c.temperature == Param::Scalar) p.temperature_value = float(temperature[0]);
    if (c.top_k == Param::PerRow) p.top_k = &(bound[0] = top_k_tensor.bound());
    if (c.top_p == Param::PerRow) p.top_p = &(bound[1] = top_p_tensor.bound());
    if (c.min_p == Param::PerRow) p.min_p = &(bound[2] = min_p_tensor.bound());
    if (c.temperature == Param::PerRow) p.temperature = &(bound[3] = temperature_tensor.bound());
    return p;
  }

  // The validated problem the core hands the Metal backend for this call (make_sampling_problem).
  mtk::SamplingProblem problem() {
    mtk::SamplingProblem p{};
    p.op = c.op;
    p.dtype = c.dtype;
    p.rows = c.rows;
    p.n = c.n;
    p.input = input.bytes.data();
    p.input_row_stride = input.descriptor.strides[0];
    p.input_stride = input.descriptor.strides[1];
    p.top_k.value = c.top_k == Param::Scalar ? int64_t(top_k[0]) : 0;
    if (c.top_k == Param::PerRow) {
      p.top_k.vector = mtk::RowVector{top_k_tensor.bytes.data(), c.top_k_dtype, c.vector_stride};
    }
    const auto row_float = [&](Param param, const std::vector<double>& values, HostTensor& t, float unset) {
      mtk::RowFloat r;
      r.value = param == Param::Scalar ? float(values[0]) : unset;
      if (param == Param::PerRow) {
        r.data = reinterpret_cast<const float*>(t.bytes.data());
        r.stride = c.vector_stride;
      }
      return r;
    };
    p.top_p = row_float(c.top_p, top_p, top_p_tensor, 1.0f);
    p.min_p = row_float(c.min_p, min_p, min_p_tensor, 0.0f);
    p.temperature = row_float(c.temperature, temperature, temperature_tensor, 1.0f);
    if (samples()) p.uniforms = row_float(Param::PerRow, uniforms, uniforms_tensor, 0.0f);
    p.output = output.bytes.data();
    p.output_dtype = output_dtype();
    p.output_row_stride = output.descriptor.strides[0];
    p.output_stride = samples() ? 0 : 1;
    return p;
  }
};

Call make_call(const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Call call;
  call.c = c;
  const int64_t row_stride = c.n * c.input_stride + c.row_pad;
  call.input.bytes.assign(size_t(c.rows * row_stride) * element_size(c.dtype), 0x7b);
  call.input.descriptor.dtype = c.dtype;
  call.input.descriptor.ndim = 2;
  call.input.descriptor.sizes[0] = c.rows;
  call.input.descriptor.sizes[1] = c.n;
  call.input.descriptor.strides[0] = row_stride;
  call.input.descriptor.strides[1] = c.input_stride;
  const bool probabilities = !(c.op == MTK_SAMPLING_TOP_K_MASK_LOGITS || c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS);
  for (int64_t r = 0; r < c.rows; ++r) {
    // Most rows random or peaked; every kind appears across the cases.
    const RowKind kind = r % 3 == 0 ? RowKind(rng() % uint64_t(RowKind::Count)) : (r % 3 == 1 ? RowKind::Random : RowKind::Peaked);
    for (int64_t i = 0; i < c.n; ++i) {
      store_value(call.input.bytes, c.dtype, r * row_stride + i * c.input_stride, row_value(kind, probabilities, rng, i));
    }
  }
  // Scalar parameters are entry 0 for every row.
  const bool scalar_k = c.top_k == Param::Scalar, scalar_p = c.top_p == Param::Scalar,
             scalar_min = c.min_p == Param::Scalar, scalar_t = c.temperature == Param::Scalar;
  for (int64_t r = 0; r < c.rows; ++r) {
    call.top_k.push_back(scalar_k && r > 0 ? call.top_k[0] : double(pick_top_k(rng, c.n)));
    call.top_p.push_back(scalar_p && r > 0 ? call.top_p[0] : pick_top_p(rng));
    call.min_p.push_back(scalar_min && r > 0 ? call.min_p[0] : pick_min_p(rng));
    call.temperature.push_back(scalar_t && r > 0 ? call.temperature[0] : pick_temperature(rng));
    call.uniforms.push_back(pick_uniform(rng));
  }
  call.build_tensors();
  return call;
}

// Row r of a call as a call of its own: its tokens, its parameters (scalars stay scalars).
Call single_row(const Call& batch, int64_t r) {
  Call call;
  call.c = batch.c;
  call.c.rows = 1;
  const Case& c = batch.c;
  const size_t es = element_size(c.dtype);
  const int64_t row_stride = batch.input.descriptor.strides[0];
  call.input = batch.input;
  call.input.descriptor.sizes[0] = 1;
  call.input.bytes.assign(batch.input.bytes.begin() + long(size_t(r * row_stride) * es),
                          batch.input.bytes.begin() + long(size_t((r + 1) * row_stride) * es));
  call.top_k = {batch.top_k[size_t(r)]};
  call.top_p = {batch.top_p[size_t(r)]};
  call.min_p = {batch.min_p[size_t(r)]};
  call.temperature = {batch.temperature[size_t(r)]};
  call.uniforms = {batch.uniforms[size_t(r)]};
  call.build_tensors();
  return call;
}

class Harness {
 public:
  explicit Harness(const std::string& spir) : pocl_(spir) {}

  // The whole output buffer after the Metal kernel ran on PoCL.
  std::vector<unsigned char> run_metal(Call& call) {
    const mtk::SamplingProblem problem = call.problem();
    mtk::MetalSamplingPlan plan = mtk::make_metal_sampling_plan(problem);
    mtk::set_metal_sampling_buffer_offsets(plan, problem, {0, 0, 0, 0, 0, 0, 0});
    const mtk::MetalSamplingTensors tensors = mtk::metal_sampling_tensors(problem);

    ClBuffer input = pocl_.buffer(call.input.bytes.size(), call.input.bytes.data());
    ClBuffer output = pocl_.buffer(call.output.bytes.size(), call.output.bytes.data());
    ClBuffer params = pocl_.buffer(sizeof plan.params, &plan.params);
    const std::vector<unsigned char> garbage(std::max<size_t>(plan.workspace_bytes, 16), 0x5a);
    ClBuffer workspace = pocl_.buffer(garbage.size(), garbage.data());
    HostTensor* per_row[mtk::kMetalSamplingTensors] = {nullptr, nullptr, &call.top_k_tensor, &call.top_p_tensor,
                                                       &call.min_p_tensor, &call.temperature_tensor,
                                                       &call.uniforms_tensor};
    std::vector<ClBuffer> held;
    cl_mem bindings[9] = {};
    bindings[0] = input.get();
    bindings[1] = output.get();
    bindings[mtk::kMetalSamplingParamsBinding] = params.get();
    bindings[mtk::kMetalSamplingWorkspaceBinding] = workspace.get();
    for (int slot = mtk::kSamplingTopK; slot < mtk::kMetalSamplingTensors; ++slot) {
      cl_mem bound = input.get();  // as the glue binds a scalar parameter
      if (tensors.data[slot] != nullptr) {
        held.push_back(pocl_.buffer(per_row[slot]->bytes.size(), per_row[slot]->bytes.data()));
        bound = held.back().get();
      }
      bindings[mtk::kMetalSamplingBinding[slot]] = bound;
    }
    pocl_.run_kernel(plan.function, bindings, plan.threadgroup_bytes, plan.threads, plan.threadgroups_y);
    std::vector<unsigned char> result(call.output.bytes.size()), input_after(call.input.bytes.size());
    pocl_.read(output, result.data(), result.size());
    pocl_.read(input, input_after.data(), input_after.size());
    if (input_after != call.input.bytes) throw std::runtime_error("the kernel wrote into its input");
    return result;
  }

  std::vector<unsigned char> run_cpu(Call& call) {
    mtk_tensor bound[4];
    const mtk_sampling_params params = call.params(bound);
    const mtk_tensor input = call.input.bound();
    std::vector<unsigned char> saved = call.output.bytes;
    const mtk_tensor output = call.output.bound();
    const mtk_tensor uniforms = call.uniforms_tensor.bound();
    switch (call.c.op) {
      case MTK_SAMPLING_TOP_K_MASK_LOGITS:
        check_mtk(mtk_top_k_mask_logits(cpu_.get(), &input, &params, &output, nullptr), "mtk_top_k_mask_logits(cpu)");
        break;
      case MTK_SAMPLING_RENORM_PROBS:
        check_mtk(mtk_renorm_probs(cpu_.get(), &input, &params, &output, nullptr), "mtk_renorm_probs(cpu)");
        break;
      case MTK_SAMPLING_SAMPLE:
        check_mtk(mtk_sample(cpu_.get(), &input, &params, &uniforms, &output, nullptr), "mtk_sample(cpu)");
        break;
      case MTK_SAMPLING_SAMPLE_FROM_LOGITS:
        check_mtk(mtk_sample_from_logits(cpu_.get(), &input, &params, &uniforms, &output, nullptr),
                  "mtk_sample_from_logits(cpu)");
        break;
    }
    std::swap(saved, call.output.bytes);  // the call's canaries stay for the next run
    return saved;
  }

  // Runs one case; false (with a message) on any difference.
  bool run(const Case& c, uint64_t seed) {
    Call call = make_call(c, seed);
    char label[256];
    std::snprintf(label, sizeof label, "%s %s rows=%lld n=%lld top_k=%s%s top_p=%s min_p=%s temperature=%s stride=%lld pad=%lld seed=%llu",
                  op_name(c.op), mtk::metal_dtype_suffix(c.dtype), (long long)c.rows, (long long)c.n,
                  param_name(c.top_k), c.top_k == Param::PerRow ? (c.top_k_dtype == MTK_INT32 ? "(i32)" : "(i64)") : "",
                  param_name(c.top_p), param_name(c.min_p), param_name(c.temperature), (long long)c.input_stride,
                  (long long)c.row_pad, (unsigned long long)seed);
    const std::vector<unsigned char> metal = run_metal(call);
    const std::vector<unsigned char> cpu = run_cpu(call);
    if (!same(call, metal, cpu, label, "CPU backend")) return false;
    // Batch invariance: the first, a middle and the last row alone.
    const int64_t chosen[] = {0, c.rows / 2, c.rows - 1};
    for (int64_t r : chosen) {
      Call alone = single_row(call, r);
      const std::vector<unsigned char> by_itself = run_metal(alone);
      const size_t es = element_size(call.output_dtype());
      const size_t row_bytes = call.samples() ? es : size_t(c.n) * es;
      const size_t at = size_t(r * call.output.descriptor.strides[0]) * es;
      if (std::memcmp(by_itself.data(), metal.data() + at, row_bytes) != 0) {
        std::printf("FAIL %s: row %lld alone differs from the row in the batch\n", label, (long long)r);
        return false;
      }
    }
    return true;
  }

 private:
  static bool same(const Call& call, const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                   const char* label, const char* against) {
    if (got == want) return true;
    const size_t es = element_size(call.output_dtype());
    for (size_t at = 0; at < got.size(); at += es) {
      if (std::memcmp(&got[at], &want[at], es) == 0) continue;
      const int64_t element = int64_t(at / es), row_stride = call.output.descriptor.strides[0];
      std::printf("FAIL %s: output element %lld (row %lld, token %lld) differs from the %s: 0x%llx, want 0x%llx\n", label,
                  (long long)element, (long long)(element / row_stride), (long long)(element % row_stride), against,
                  (unsigned long long)load_bits(&got[at], es), (unsigned long long)load_bits(&want[at], es));
      break;
    }
    return false;
  }

  PoclRuntime pocl_;
  CpuContext cpu_ = create_cpu_context();
};

std::vector<Case> cases() {
  std::vector<Case> all;
  const Param U = Param::Unset, S = Param::Scalar, R = Param::PerRow;
  struct Filters {
    Param top_k, top_p, min_p, temperature;
  };
  // Each filter alone, scalar and per-row, then together; the temperature only from logits.
  const Filters filter_sets[] = {{U, U, U, U}, {S, U, U, S}, {R, U, U, R}, {U, S, U, U}, {U, R, U, R},
                                 {U, U, S, S}, {U, U, R, U}, {R, R, R, R}, {S, S, S, S}, {R, S, R, S}};
  const int64_t lengths[] = {1, 2, 7, 33, 256, 1000, 4099};
  const mtk_sampling_op ops[] = {MTK_SAMPLING_TOP_K_MASK_LOGITS, MTK_SAMPLING_RENORM_PROBS, MTK_SAMPLING_SAMPLE,
                                 MTK_SAMPLING_SAMPLE_FROM_LOGITS};
  int variant = 0;
  for (mtk_sampling_op op : ops) {
    const bool logits = op == MTK_SAMPLING_TOP_K_MASK_LOGITS || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    std::vector<mtk_dtype> dtypes = {MTK_FLOAT32};
    if (logits) dtypes = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16};
    for (mtk_dtype dtype : dtypes) {
      for (int64_t n : lengths) {
        for (const Filters& f : filter_sets) {
          ++variant;
          Case c{};
          c.op = op;
          c.dtype = dtype;
          c.rows = 3 + variant % 6;
          c.n = n;
          // mask_logits reads only top_k; probabilities take no temperature.
          c.top_k = f.top_k;
          c.top_p = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? U : f.top_p;
          c.min_p = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? U : f.min_p;
          c.temperature = op == MTK_SAMPLING_SAMPLE_FROM_LOGITS ? f.temperature : U;
          c.top_k_dtype = variant % 2 == 0 ? MTK_INT32 : MTK_INT64;
          c.samples_dtype = variant % 3 == 0 ? MTK_INT64 : MTK_INT32;
          c.vector_stride = 1 + variant % 2;
          c.input_stride = variant % 4 == 1 ? 2 : 1;
          c.row_pad = variant % 3;
          if (op == MTK_SAMPLING_TOP_K_MASK_LOGITS && f.top_p != U) continue;  // the same calls as above
          all.push_back(c);
        }
      }
    }
  }
  // A vocabulary of 151936 tokens (Qwen's): each operation, two rows, every filter per row.
  for (mtk_sampling_op op : ops) {
    const bool logits = op == MTK_SAMPLING_TOP_K_MASK_LOGITS || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    for (mtk_dtype dtype : logits ? std::vector<mtk_dtype>{MTK_FLOAT32, MTK_BFLOAT16} : std::vector<mtk_dtype>{MTK_FLOAT32}) {
      Case c{};
      c.op = op;
      c.dtype = dtype;
      c.rows = 2;
      c.n = 151936;
      c.top_k = R;
      c.top_p = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? U : R;
      c.min_p = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? U : R;
      c.temperature = op == MTK_SAMPLING_SAMPLE_FROM_LOGITS ? R : U;
      c.top_k_dtype = MTK_INT64;
      c.samples_dtype = MTK_INT64;
      c.vector_stride = 1;
      c.input_stride = 1;
      c.row_pad = 0;
      all.push_back(c);
    }
  }
  return all;
}

// The plan's own rules, apart from any kernel run: pipeline names, workspace, the 32 KB
// threadgroup-memory limit, and the refusals. Returns the number of failed checks.
int check_plan() {
  int failed = 0;
  const auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAIL plan: %s\n", what);
      ++failed;
    }
  };
  const auto throws = [](mtk_status status, auto&& body) {
    try {
      body();
    } catch (const mtk::Error& e) {
      return e.status() == status;
    }
    return false;
  };
  Case c{};
  c.rows = 64;
  c.n = 151936;
  c.top_k = c.top_p = c.min_p = c.temperature = Param::Unset;
  c.samples_dtype = MTK_INT32;
  c.vector_stride = 1;
  c.input_stride = 1;
  const mtk_sampling_op ops[] = {MTK_SAMPLING_TOP_K_MASK_LOGITS, MTK_SAMPLING_RENORM_PROBS, MTK_SAMPLING_SAMPLE,
                                 MTK_SAMPLING_SAMPLE_FROM_LOGITS};
  for (mtk_sampling_op op : ops) {
    c.op = op;
    c.dtype = op == MTK_SAMPLING_SAMPLE_FROM_LOGITS ? MTK_BFLOAT16 : MTK_FLOAT32;
    Call call;
    call.c = c;
    call.input.descriptor.strides[0] = c.n;
    call.input.descriptor.strides[1] = 1;
    call.uniforms.assign(size_t(c.rows), 0.5);
    call.build_tensors();
    const mtk::SamplingProblem problem = call.problem();
    const mtk::MetalSamplingPlan plan = mtk::make_metal_sampling_plan(problem);
    const std::string want = std::string("mtk_sampling_") + op_name(op) + "_" + mtk::metal_dtype_suffix(c.dtype);
    expect(plan.function == want, "pipeline name");
    expect(plan.threadgroups_y == c.rows && plan.threads == MTK_SAMPLING_THREADS, "one threadgroup per row");
    const size_t masses = call.samples() ? size_t(c.rows * c.n) * sizeof(float) : 0;
    expect(plan.workspace_bytes == masses, "workspace: the samplers' masses only");
    uint64_t threadgroup = 0;
    for (uint32_t bytes : plan.threadgroup_bytes) threadgroup += bytes;
    expect(threadgroup <= 32768, "within 32 KB of threadgroup memory");
    mtk::MetalLimits narrow;
    narrow.max_threads = 128;
    expect(throws(MTK_ERROR_DEVICE, [&] { mtk::make_metal_sampling_plan(problem, narrow); }), "too few threads refused");
    mtk::MetalLimits small;
    small.threadgroup_memory_bytes = 4096;
    expect(throws(MTK_ERROR_DEVICE, [&] { mtk::make_metal_sampling_plan(problem, small); }), "too little memory refused");
    if (call.samples()) {
      expect(throws(MTK_ERROR_INVALID_ARGUMENT, [&] { mtk::check_metal_sampling_workspace(plan, masses - 1, 0); }),
             "short workspace refused");
      expect(throws(MTK_ERROR_INVALID_ARGUMENT, [&] { mtk::check_metal_sampling_workspace(plan, masses, 2); }),
             "misaligned workspace refused");
    }
    mtk::MetalSamplingPlan offsets = plan;
    expect(throws(MTK_ERROR_INVALID_ARGUMENT,
                  [&] { mtk::set_metal_sampling_buffer_offsets(offsets, problem, {1, 0, 0, 0, 0, 0, 0}); }),
           "input offset inside an element refused");
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, [](const char* spir) {
    const int plan_failures = check_plan();
    std::printf("Metal sampling plan: %s\n", plan_failures == 0 ? "every check passed" : "checks failed");
    Harness harness(spir);
    int failures = 0, ran = 0;
    uint64_t seed = 5000;
    const std::vector<Case> all = cases();
    for (const Case& c : all) {
      ++ran;
      if (!harness.run(c, seed++)) ++failures;
      if (ran % 50 == 0) std::fprintf(stderr, "  %d of %zu cases\n", ran, all.size());
    }
    std::printf("PoCL sampling: %d cases ran (each also with 3 of its rows alone), %d matched the CPU backend bit for bit\n",
                ran, ran - failures);
    return failures == 0 && plan_failures == 0 ? 0 : 1;
  });
}
