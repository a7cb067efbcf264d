// Validation of the sampling calls (docs/CONTRACT.md, "Sampling filters"): every error a caller
// can cause, with the argument it names, before any backend runs.
#include <cstddef>
#include <cstring>

#include "abi_enums.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "sampling_problem.hpp"
#include "tensor_checks.hpp"
#include "validate.hpp"
#include "versioned_params.hpp"

namespace mtk {
namespace {

constexpr VersionedLayout<mtk_sampling_params> kSamplingParams{
    "mtk_sampling_params", "MTK_SAMPLING_PARAMS_INIT", sizeof(size_t), MTK_SAMPLING_PARAMS_INIT};

constexpr int64_t kMaxSamplingRow = (int64_t{1} << 31) - 1;

const char* operation_name(mtk_sampling_op op) {
  switch (op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS: return "mtk_top_k_mask_logits";
    case MTK_SAMPLING_RENORM_PROBS: return "mtk_renorm_probs";
    case MTK_SAMPLING_SAMPLE: return "mtk_sample";
    case MTK_SAMPLING_SAMPLE_FROM_LOGITS: return "mtk_sample_from_logits";
  }
  return "?";
}

// A [rows] tensor of params or the uniforms, of one of the dtypes `accepts` allows.
template <class Accepts>
CheckedTensor check_per_row(const mtk_tensor* t, const char* name, int64_t rows,
                            Accepts accepts, const char* dtypes, bool data_required = true) {
  const CheckedTensor checked = check_descriptor(t, name, data_required);
  if (!accepts(t->dtype)) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, name, ".dtype = ", dtype_name(t->dtype), " must be ",
         dtypes);
  }
  if (t->ndim != 1) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".ndim = ", t->ndim, " must be 1 ([rows])");
  }
  if (t->sizes[0] != rows) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".sizes[0] = ", t->sizes[0], " does not match the ",
         rows, " rows of the input");
  }
  return checked;
}

bool is_float32(mtk_dtype d) { return d == MTK_FLOAT32; }
bool is_index(mtk_dtype d) { return d == MTK_INT32 || d == MTK_INT64; }

RowFloat row_float(const mtk_tensor* t, const char* name, float value, int64_t rows,
                   ByteSpan* span) {
  RowFloat r;
  r.value = value;
  if (t == nullptr) return r;
  *span = check_per_row(t, name, rows, is_float32, "float32").span;
  r.data = static_cast<const float*>(t->data);
  r.stride = t->strides[0];
  return r;
}

// Bit patterns: -0.0 or a NaN where the default is 0.0 or 1.0 is a value the caller set.
bool float_is(float value, float expected) {
  return std::memcmp(&value, &expected, sizeof value) == 0;
}

// A member the operation does not read, set by the caller: a mistake to report, not to ignore.
void require_unset(bool set, const char* member, mtk_sampling_op op, const char* why) {
  if (set) fail(MTK_ERROR_INVALID_ARGUMENT, member, " is set but ", operation_name(op), why);
}

}  // namespace

void check_sampling_op(const mtk_sampling_op& op) {
  const int raw = abi_enum_value(op);
  if (raw < kFirstSamplingOp || raw > kLastSamplingOp) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "op = ", raw, " is not a known mtk_sampling_op");
  }
}

SamplingProblem make_sampling_problem(const mtk_sampling_op& given_op, const mtk_tensor* input,
                                      const mtk_sampling_params* given_params,
                                      const mtk_tensor* uniforms, const mtk_tensor* output,
                                      OutputMemory outputs) {
  check_sampling_op(given_op);
  SamplingProblem p{};
  p.op = given_op;
  const mtk_sampling_op op = p.op;
  const bool logits = p.from_logits();
  const char* input_name = logits ? "logits" : "probs";
  const CheckedTensor in = check_descriptor(input, input_name);
  if (input->ndim != 2) {
    fail(MTK_ERROR_INVALID_ARGUMENT, input_name, ".ndim = ", input->ndim,
         " must be 2 ([rows, n])");
  }
  const mtk_dtype dtype = input->dtype;
  if (logits && dtype != MTK_FLOAT32 && dtype != MTK_FLOAT16 && dtype != MTK_BFLOAT16) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype = ", dtype_name(dtype),
         " is not float32, float16 or bfloat16");
  }
  if (!logits && dtype != MTK_FLOAT32) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, "probs.dtype = ", dtype_name(dtype), " must be float32");
  }
  const int64_t rows = input->sizes[0], n = input->sizes[1];
  if (n > kMaxSamplingRow) {
    fail(MTK_ERROR_INVALID_ARGUMENT, input_name, ".sizes[1] = ", n,
         " is too long: rows of fewer than 2^31 tokens only");
  }
  if (p.samples() && n == 0 && rows > 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, input_name,
         ".sizes[1] = 0: a row without tokens has none to sample");
  }
  const mtk_sampling_params defaults = MTK_SAMPLING_PARAMS_INIT;
  const mtk_sampling_params params = given_params == nullptr
      ? defaults
      : read_versioned_params(given_params, "params", kSamplingParams);

  constexpr int kParamTensors = 5;
  ByteSpan spans[kParamTensors];
  const char* span_names[kParamTensors] = {"params.top_k", "params.top_p", "params.min_p",
                                           "params.temperature", "uniforms"};
  p.top_k.value = params.top_k_value;
  if (params.top_k != nullptr) {
    spans[0] = check_per_row(params.top_k, "params.top_k", rows, is_index, "int32 or int64").span;
    p.top_k.vector = RowVector{params.top_k->data, params.top_k->dtype, params.top_k->strides[0]};
  }
  p.top_p = row_float(params.top_p, "params.top_p", params.top_p_value, rows, &spans[1]);
  p.min_p = row_float(params.min_p, "params.min_p", params.min_p_value, rows, &spans[2]);
  p.temperature = row_float(params.temperature, "params.temperature", params.temperature_value,
                            rows, &spans[3]);
  if (op == MTK_SAMPLING_TOP_K_MASK_LOGITS) {
    const char* why = " reads params.top_k only";
    require_unset(params.top_p != nullptr || !float_is(params.top_p_value, 1.0f),
                  "params.top_p", op, why);
    require_unset(params.min_p != nullptr || !float_is(params.min_p_value, 0.0f),
                  "params.min_p", op, why);
    require_unset(params.temperature != nullptr || !float_is(params.temperature_value, 1.0f),
                  "params.temperature", op, why);
  }
  if (!logits) {
    require_unset(params.temperature != nullptr || !float_is(params.temperature_value, 1.0f),
                  "params.temperature", op,
                  " takes probabilities, which have no temperature (mtk_sample_from_logits "
                  "applies one)");
  }
  if (p.samples()) {
    if (uniforms == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "uniforms is NULL");
    // A workspace query describes the uniforms without data, as it does the output.
    spans[4] = check_per_row(uniforms, "uniforms", rows, is_float32, "float32",
                             outputs == OutputMemory::CallerProvided)
                   .span;
    p.uniforms.data = static_cast<const float*>(uniforms->data);
    p.uniforms.stride = uniforms->strides[0];
  } else {
    require_unset(uniforms != nullptr, "uniforms", op, " does not sample (pass NULL)");
  }

  const bool provided = outputs == OutputMemory::CallerProvided;
  const char* output_name = p.samples() ? "samples" : "out";
  const CheckedTensor out = check_descriptor(output, output_name, provided);
  if (p.samples()) {
    check_output_shape(*output, output_name, OutputShape{1, {rows}});
    if (!is_index(output->dtype)) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "samples.dtype = ", dtype_name(output->dtype),
           " must be int32 or int64");
    }
  } else {
    check_output_shape(*output, output_name, OutputShape{2, {rows, n}});
    const mtk_dtype expected = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? dtype : MTK_FLOAT32;
    if (output->dtype != expected) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "out.dtype = ", dtype_name(output->dtype), " must be ",
           dtype_name(expected));
    }
  }
  check_no_self_overlap(*output, output_name);
  if (provided) {
    check_disjoint(out.span, output_name, in.span, input_name);
    for (int i = 0; i < kParamTensors; ++i) {
      check_disjoint(out.span, output_name, spans[i], span_names[i]);
    }
  }

  p.dtype = dtype;
  p.rows = rows;
  p.n = n;
  p.input = input->data;
  p.input_row_stride = input->strides[0];
  p.input_stride = input->strides[1];
  p.output = output->data;
  p.output_dtype = output->dtype;
  p.output_row_stride = output->strides[0];
  p.output_stride = p.samples() ? 0 : output->strides[1];
  return p;
}

}  // namespace mtk
