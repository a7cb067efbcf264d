#include "metal_sampling_plan.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/float_formats.hpp"

namespace mtk {

using namespace metal_plan_support;

namespace {

// Must match lib/metal/sampling_kernels.h: 4 words per thread for the exact sums, one word per
// radix bin, 8 words of row state.
constexpr uint64_t kSumBytesPerThread = 4 * sizeof(uint64_t);
constexpr uint64_t kHistogramBytes = MTK_RADIX_BINS * sizeof(uint32_t);
constexpr uint64_t kStateBytes = 8 * sizeof(uint64_t);

static_assert(MTK_SAMPLING_THREADS % kSimdWidth == 0 && (MTK_SAMPLING_THREADS & (MTK_SAMPLING_THREADS - 1)) == 0,
              "the kernel's reductions halve its threadgroup");

bool is_float32_tensor(const RowFloat& v) { return v.data != nullptr; }

MtkRowFloat row_float(const RowFloat& v) {
  MtkRowFloat r{};
  r.present = is_float32_tensor(v) ? 1u : 0u;
  r.stride = v.stride;
  r.value_bits = bits_from_float(v.value);
  return r;
}

}  // namespace

const char* metal_sampling_operation_name(mtk_sampling_op op) {
  switch (op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS: return "mask_logits";
    case MTK_SAMPLING_RENORM_PROBS: return "renorm_probs";
    case MTK_SAMPLING_SAMPLE: return "sample";
    case MTK_SAMPLING_SAMPLE_FROM_LOGITS: return "sample_from_logits";
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, "op = ", static_cast<int>(op), " is not an mtk_sampling_op");
}

MetalSamplingPlan make_metal_sampling_plan(const SamplingProblem& problem, const MetalLimits& limits) {
  if (problem.dtype != MTK_FLOAT32 && problem.dtype != MTK_FLOAT16 && problem.dtype != MTK_BFLOAT16) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, "the Metal sampling kernel reads float32, float16 or bfloat16, not ",
         dtype_name(problem.dtype));
  }
  MetalSamplingPlan plan{};
  plan.function = std::string("mtk_sampling_") + metal_sampling_operation_name(problem.op) + "_" +
                  metal_dtype_suffix(problem.dtype);
  plan.threadgroups_y = to_u32(static_cast<uint64_t>(problem.rows), "rows");
  plan.threads = MTK_SAMPLING_THREADS;
  if (limits.max_threads < plan.threads) {
    fail(MTK_ERROR_DEVICE, "the Metal sampling kernel needs ", plan.threads, " threads per threadgroup; the device allows ",
         limits.max_threads);
  }
  plan.threadgroup_bytes[kTgSamplingSums] = static_cast<uint32_t>(threadgroup_buffer_bytes(kSumBytesPerThread * plan.threads));
  plan.threadgroup_bytes[kTgSamplingHistogram] = static_cast<uint32_t>(threadgroup_buffer_bytes(kHistogramBytes));
  plan.threadgroup_bytes[kTgSamplingState] = static_cast<uint32_t>(threadgroup_buffer_bytes(kStateBytes));
  uint64_t threadgroup_total = 0;
  for (uint32_t bytes : plan.threadgroup_bytes) threadgroup_total += bytes;
  if (threadgroup_total > limits.threadgroup_memory_bytes) {
    fail(MTK_ERROR_DEVICE, "the Metal sampling kernel needs ", threadgroup_total,
         " bytes of threadgroup memory; the device has ", limits.threadgroup_memory_bytes);
  }
  if (problem.samples()) {
    const uint64_t masses = static_cast<uint64_t>(problem.rows) * static_cast<uint64_t>(problem.n);
    if (masses > UINT64_MAX / sizeof(float)) fail(MTK_ERROR_OUT_OF_MEMORY, "Metal sampling workspace size overflows");
    plan.workspace_bytes = masses * sizeof(float);
  }

  MtkSamplingParams& p = plan.params;
  p.n = problem.n;
  p.input_row_stride = problem.input_row_stride;
  p.input_stride = problem.input_stride;
  p.output_row_stride = problem.output_row_stride;
  p.output_stride = problem.output_stride;
  p.top_k_value = problem.top_k.value;
  if (problem.top_k.vector.data != nullptr) {
    p.top_k.present = 1;
    p.top_k.stride = problem.top_k.vector.stride;
    p.top_k.is_64 = problem.top_k.vector.dtype == MTK_INT64 ? 1u : 0u;
  }
  p.top_p = row_float(problem.top_p);
  p.min_p = row_float(problem.min_p);
  p.temperature = row_float(problem.temperature);
  p.uniforms = row_float(problem.uniforms);
  p.output_is_64 = problem.samples() && problem.output_dtype == MTK_INT64 ? 1u : 0u;
  return plan;
}

MetalSamplingTensors metal_sampling_tensors(const SamplingProblem& problem) {
  MetalSamplingTensors t{};
  const int64_t rows = problem.rows;
  t.data[kSamplingInput] = problem.input;
  t.extents[kSamplingInput] = extent(&rows, &problem.input_row_stride, 1, problem.n, problem.input_stride,
                                     require_dtype(problem.dtype, "input").size);
  t.data[kSamplingOutput] = problem.output;
  const size_t output_element = require_dtype(problem.output_dtype, "output").size;
  t.extents[kSamplingOutput] =
      problem.samples() ? extent(nullptr, nullptr, 0, rows, problem.output_row_stride, output_element)
                        : extent(&rows, &problem.output_row_stride, 1, problem.n, problem.output_stride, output_element);
  if (problem.top_k.vector.data != nullptr) {
    t.data[kSamplingTopK] = problem.top_k.vector.data;
    t.extents[kSamplingTopK] = extent(nullptr, nullptr, 0, rows, problem.top_k.vector.stride,
                                      require_dtype(problem.top_k.vector.dtype, "params.top_k").size);
  }
  const auto per_row = [&](MetalSamplingBuffer slot, const RowFloat& v) {
    if (!is_float32_tensor(v)) return;
    t.data[slot] = v.data;
    t.extents[slot] = extent(nullptr, nullptr, 0, rows, v.stride, sizeof(float));
  };
  per_row(kSamplingTopP, problem.top_p);
  per_row(kSamplingMinP, problem.min_p);
  per_row(kSamplingTemperature, problem.temperature);
  per_row(kSamplingUniforms, problem.uniforms);
  return t;
}

void set_metal_sampling_buffer_offsets(MetalSamplingPlan& plan, const SamplingProblem& problem,
                                       const size_t (&bytes)[kMetalSamplingTensors]) {
  MtkSamplingParams& p = plan.params;
  p.input_base = element_offset(bytes[kSamplingInput], require_dtype(problem.dtype, "input").size, "input");
  p.output_base = element_offset(bytes[kSamplingOutput], require_dtype(problem.output_dtype, "output").size,
                                 problem.samples() ? "samples" : "out");
  if (problem.top_k.vector.data != nullptr) {
    p.top_k.base = element_offset(bytes[kSamplingTopK], require_dtype(problem.top_k.vector.dtype, "params.top_k").size,
                                  "params.top_k");
  }
  const auto per_row = [&](MtkRowFloat& v, MetalSamplingBuffer slot, const char* name) {
    if (v.present != 0u) v.base = element_offset(bytes[slot], sizeof(float), name);
  };
  per_row(p.top_p, kSamplingTopP, "params.top_p");
  per_row(p.min_p, kSamplingMinP, "params.min_p");
  per_row(p.temperature, kSamplingTemperature, "params.temperature");
  per_row(p.uniforms, kSamplingUniforms, "uniforms");
}

void check_metal_sampling_workspace(const MetalSamplingPlan& plan, size_t bytes, size_t offset_in_buffer) {
  if (bytes < plan.workspace_bytes) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes = ", bytes, " is smaller than the ", plan.workspace_bytes,
         " bytes this problem needs");
  }
  if (offset_in_buffer % sizeof(float) != 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "workspace lies ", offset_in_buffer,
         " bytes into its Metal buffer; it must be 4-byte aligned");
  }
}

}  // namespace mtk
