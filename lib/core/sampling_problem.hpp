// A validated sampling call (mtk_top_k_mask_logits, mtk_renorm_probs, mtk_sample,
// mtk_sample_from_logits) in canonical form, as every backend receives it.
#pragma once

#include <cstdint>

#include "metaltopk.h"
#include "problem.hpp"

namespace mtk {

// A per-row float parameter: the [rows] float32 tensor where given, else the scalar.
struct RowFloat {
  const float* data = nullptr;
  int64_t stride = 0;  // elements
  float value = 0.0f;

  float at(int64_t row) const { return data != nullptr ? data[row * stride] : value; }
};

// A per-row integer parameter: the [rows] int32 or int64 tensor where given, else the scalar.
struct RowInteger {
  RowVector vector;
  int64_t value = 0;

  int64_t at(int64_t row) const { return vector.data != nullptr ? vector.at(row) : value; }
};

struct SamplingProblem {
  mtk_sampling_op op;
  mtk_dtype dtype;  // of the input: float32 (probabilities), or float32, float16, bfloat16
  int64_t rows, n;  // n < 2^31
  const void* input;
  int64_t input_row_stride, input_stride;  // elements
  RowInteger top_k;
  RowFloat top_p, min_p, temperature;
  RowFloat uniforms;  // the sampling operations only
  // [rows, n] for the filters (the input's dtype, or float32 probabilities), [rows] int32 or
  // int64 samples (output_stride unused) for the samplers.
  void* output;
  mtk_dtype output_dtype;
  int64_t output_row_stride, output_stride;

  bool samples() const {
    return op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  }
  bool from_logits() const {
    return op == MTK_SAMPLING_TOP_K_MASK_LOGITS || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  }
};

}  // namespace mtk
