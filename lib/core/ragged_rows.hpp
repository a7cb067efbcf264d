// The per-row rules of mtk_topk_ragged, shared by every backend so that a row's window and the
// index transform never differ between them: how lengths and starts are clipped (a device-side
// check cannot raise, so out-of-range values get a defined meaning instead) and how a winner's
// window-relative index becomes the index written.
#pragma once

#include <algorithm>
#include <cstdint>

#include "problem.hpp"

namespace mtk {

// Positions [start, start + length) of the row, both within [0, n].
struct RaggedWindow {
  int64_t start, length;
};

inline int64_t page_table_batch_of(const RaggedProblem& p, int64_t row) {
  return p.row_to_batch.data != nullptr ? p.row_to_batch.at(row) : row;
}

inline RaggedWindow ragged_window(const RaggedProblem& p, int64_t row) {
  const int64_t n = p.dense.geometry.n;
  const int64_t start = p.starts.data != nullptr ? std::clamp<int64_t>(p.starts.at(row), 0, n) : 0;
  int64_t length = std::clamp<int64_t>(p.lengths.at(row), 0, n - start);
  if (p.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
    const int64_t batch = page_table_batch_of(p, row);
    if (batch < 0 || batch >= p.page_table_batch) length = 0;  // the row has no page table
  }
  return RaggedWindow{start, length};
}

// Wrapping 64-bit arithmetic: offsets and page numbers are the caller's, and any overflow must
// give the same bits everywhere rather than undefined behaviour.
inline int64_t wrapping_mul_add(int64_t a, int64_t b, int64_t c) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b) +
                              static_cast<uint64_t>(c));
}

// The index written for a winner at window-relative `index` (0 <= index < the window's length)
// of row `row`.
inline int64_t transform_index(const RaggedProblem& p, int64_t row, int64_t index) {
  switch (p.transform) {
    case MTK_INDEX_TRANSFORM_NONE: break;
    case MTK_INDEX_TRANSFORM_RAGGED: return wrapping_mul_add(1, p.offsets.at(row), index);
    case MTK_INDEX_TRANSFORM_PAGE_TABLE: {
      const int64_t batch = page_table_batch_of(p, row);
      const int64_t page = index / p.page_size;
      const int64_t at = batch * p.page_table_batch_stride + page * p.page_table_page_stride;
      const int64_t entry = p.page_table_dtype == MTK_INT32
                                ? static_cast<const int32_t*>(p.page_table)[at]
                                : static_cast<const int64_t*>(p.page_table)[at];
      return wrapping_mul_add(entry, p.page_size, index % p.page_size);
    }
  }
  return index;
}

}  // namespace mtk
