// A validated top-k call in canonical form: every backend receives this, never raw descriptors.
#pragma once

#include <cstdint>

#include "metaltopk.h"

namespace mtk {

constexpr int kMaxBatchDims = MTK_MAX_NDIM - 1;

// The input seen as `rows` independent rows of `n` elements. Batch dims (all dims but `dim`) are
// collapsed wherever input and both outputs allow it, outermost first; the last batch dim varies
// fastest in row numbering. Strides are in elements and may be negative (or zero for the input).
struct RowGeometry {
  int64_t n = 1;     // size along dim (1 for a 0-d input)
  int64_t k = 0;
  int64_t rows = 1;  // product of batch sizes; 0 for an empty input
  int batch_ndim = 0;
  int64_t batch_sizes[kMaxBatchDims] = {};
  int64_t input_batch_strides[kMaxBatchDims] = {};
  int64_t values_batch_strides[kMaxBatchDims] = {};
  int64_t indices_batch_strides[kMaxBatchDims] = {};
  int64_t input_stride = 1;    // along dim
  int64_t values_stride = 1;   // along dim
  int64_t indices_stride = 1;  // along dim
};

// Element offsets of row `row` in the input and both outputs.
struct RowOffsets {
  int64_t input, values, indices;
};

inline RowOffsets row_offsets(const RowGeometry& g, int64_t row) {
  RowOffsets o{0, 0, 0};
  for (int d = g.batch_ndim - 1; d >= 0; --d) {
    const int64_t i = row % g.batch_sizes[d];
    row /= g.batch_sizes[d];
    o.input += i * g.input_batch_strides[d];
    o.values += i * g.values_batch_strides[d];
    o.indices += i * g.indices_batch_strides[d];
  }
  return o;
}

struct TopkProblem {
  mtk_dtype dtype;
  mtk_dtype index_dtype;  // MTK_INT64 or MTK_INT32
  bool largest;
  bool sorted;
  RowGeometry geometry;
  const void* input;  // address of element 0 (strides apply from here)
  void* values;
  void* indices;
};

// One int32 or int64 entry per row, read on the device; `data` is null where the tensor is
// absent.
struct RowVector {
  const void* data = nullptr;
  mtk_dtype dtype = MTK_INT64;
  int64_t stride = 0;  // elements

  int64_t at(int64_t row) const {
    return dtype == MTK_INT32 ? static_cast<const int32_t*>(data)[row * stride]
                              : static_cast<const int64_t*>(data)[row * stride];
  }
};

// A validated mtk_topk_ragged call. `dense` describes the whole [rows, n] input and the
// [rows, k] outputs as a plain top-k along the last dim would (one batch dim), except that
// geometry.k is the requested k, which may exceed n, and `values` may be null.
struct RaggedProblem {
  TopkProblem dense;
  RowVector lengths;
  RowVector starts;  // absent: every window starts at 0
  mtk_index_transform transform;
  RowVector offsets;       // MTK_INDEX_TRANSFORM_RAGGED
  const void* page_table;  // MTK_INDEX_TRANSFORM_PAGE_TABLE: [batch, pages]
  mtk_dtype page_table_dtype;
  int64_t page_table_batch, page_table_pages;
  int64_t page_table_batch_stride, page_table_page_stride;  // elements
  int64_t page_size;
  RowVector row_to_batch;  // absent: b = r
};

// Caller- or context-provided device scratch for one call.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

struct RouterProblem {
  mtk_dtype dtype;        // of the logits: f32, f16 or bf16
  mtk_dtype index_dtype;  // MTK_INT32 or MTK_INT64
  int64_t tokens;         // T
  int64_t experts;        // E
  int64_t k;
  mtk_scoring scoring;
  int64_t n_group;        // 1 when not grouped
  int64_t topk_group;     // == n_group when not grouped
  bool renormalize;
  float scale;
  const void* logits;
  int64_t logits_token_stride, logits_expert_stride;  // elements
  const float* bias;      // nullptr, or E floats
  int64_t bias_stride;
  float* weights;
  int64_t weights_token_stride, weights_k_stride;
  void* ids;
  int64_t ids_token_stride, ids_k_stride;
};

}  // namespace mtk
