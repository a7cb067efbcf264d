// The per-row rules of mtk_topk_ragged, shared by every backend so that a row's window and the
// index transform never differ between them: how lengths and starts are clipped (a device-side
// check cannot raise, so out-of-range values get a defined meaning instead) and how a winner's
// window-relative index becomes the index written. RaggedRows is read by host C++ (the CPU
// backend) and by nvcc's device code (a CUDA kernel argument), hence MTK_HOST_DEVICE and plain
// pointers only.
#pragma once

#include <cstdint>

#include "float_formats.hpp"  // MTK_HOST_DEVICE
#include "problem.hpp"
#include "ragged_window.hpp"  // the scalar rules, shared with the Metal kernels

namespace mtk {

// Positions [start, start + length) of the row, both within [0, n].
struct RaggedWindow {
  int64_t start, length;
};

// Entry `row` of an int32 or int64 per-row vector.
MTK_HOST_DEVICE int64_t row_entry(const RowVector& v, int64_t row) {
  return v.dtype == MTK_INT32 ? static_cast<const int32_t*>(v.data)[row * v.stride]
                              : static_cast<const int64_t*>(v.data)[row * v.stride];
}

// How one row's winners' window indices become the indices written (winners only: padding
// stays -1).
struct RowIndexTransform {
  mtk_index_transform kind;
  int64_t offset;     // ragged: the row's offsets entry
  const void* pages;  // page table: the row's batch's first page entry
  mtk_dtype page_dtype;
  int64_t page_stride;  // elements
  int64_t page_size;

  MTK_HOST_DEVICE int64_t apply(int64_t index) const {
    if (kind == MTK_INDEX_TRANSFORM_RAGGED) return ragged_transformed_index(offset, index);
    if (kind != MTK_INDEX_TRANSFORM_PAGE_TABLE) return index;
    const int64_t page_number = index / page_size;
    return paged(page_number, index - page_number * page_size);
  }

  // apply() for a window position below 2^32, as every CUDA kernel's is (a composite holds 32
  // bits of it), by 32-bit division alone: the GPU has no 64-bit divider, and nvcc's routine for
  // one took registers from the kernels that write indices.
  MTK_HOST_DEVICE int64_t apply_to_position(uint32_t index) const {
    if (kind == MTK_INDEX_TRANSFORM_RAGGED) return ragged_transformed_index(offset, index);
    if (kind != MTK_INDEX_TRANSFORM_PAGE_TABLE) return index;
    // Pages of 2^32 or more: every such position is on the first.
    const uint32_t page_number =
        uint64_t(page_size) > 0xffffffffu ? 0u : index / uint32_t(page_size);
    return paged(page_number, index - int64_t(page_number) * page_size);
  }

 private:
  // The written index of the position `within` page `page_number` of the row's window.
  MTK_HOST_DEVICE int64_t paged(int64_t page_number, int64_t within) const {
    const int64_t at = page_number * page_stride;
    const int64_t page = page_dtype == MTK_INT32 ? static_cast<const int32_t*>(pages)[at]
                                                 : static_cast<const int64_t*>(pages)[at];
    return paged_transformed_index(page, page_size, within);
  }
};

// The windows and index transforms of a ragged call's rows. With `lengths` absent it describes
// a dense call: every window is the whole row and indices are written as they are.
struct RaggedRows {
  RowVector lengths;
  RowVector starts;  // absent: every window starts at 0
  mtk_index_transform transform = MTK_INDEX_TRANSFORM_NONE;
  RowVector offsets;                // ragged transform
  const void* page_table = nullptr; // page-table transform: [batch, pages]
  mtk_dtype page_table_dtype = MTK_INT64;
  int64_t page_table_batch = 0;
  int64_t page_table_batch_stride = 0, page_table_page_stride = 0;  // elements
  int64_t page_size = 1;
  RowVector row_to_batch;  // absent: b = r

  MTK_HOST_DEVICE bool is_ragged() const { return lengths.data != nullptr; }

  MTK_HOST_DEVICE int64_t page_table_batch_of(int64_t row) const {
    return row_to_batch.data != nullptr ? row_entry(row_to_batch, row) : row;
  }

  // Row `row`'s window within its n elements, clipped: a start below 0 counts as 0 and one past
  // n as n; then a length below 0 counts as 0 and one past the row's end as the rest of it. A
  // row without a page table (its batch outside the table) has no candidates.
  MTK_HOST_DEVICE RaggedWindow window(int64_t row, int64_t n) const {
    if (!is_ragged()) return RaggedWindow{0, n};
    const int64_t start =
        starts.data != nullptr ? clipped_window_start(row_entry(starts, row), n) : 0;
    int64_t length = clipped_window_length(row_entry(lengths, row), start, n);
    if (transform == MTK_INDEX_TRANSFORM_PAGE_TABLE &&
        !page_table_has_batch(page_table_batch_of(row), page_table_batch)) {
      length = 0;
    }
    return RaggedWindow{start, length};
  }

  // Row `row`'s index transform; for the page table only where the row has candidates.
  MTK_HOST_DEVICE RowIndexTransform index_transform(int64_t row) const {
    RowIndexTransform t{transform, 0, nullptr, page_table_dtype, page_table_page_stride,
                        page_size};
    if (transform == MTK_INDEX_TRANSFORM_RAGGED) t.offset = row_entry(offsets, row);
    if (transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
      const int64_t element = page_table_dtype == MTK_INT32 ? 4 : 8;
      t.pages = static_cast<const char*>(page_table) +
                page_table_batch_of(row) * page_table_batch_stride * element;
    }
    return t;
  }
};

inline RaggedRows ragged_rows_of(const RaggedProblem& p) {
  RaggedRows r;
  r.lengths = p.lengths;
  r.starts = p.starts;
  r.transform = p.transform;
  r.offsets = p.offsets;
  r.page_table = p.page_table;
  r.page_table_dtype = p.page_table_dtype;
  r.page_table_batch = p.page_table_batch;
  r.page_table_batch_stride = p.page_table_batch_stride;
  r.page_table_page_stride = p.page_table_page_stride;
  r.page_size = p.page_size;
  r.row_to_batch = p.row_to_batch;
  return r;
}

inline RaggedWindow ragged_window(const RaggedProblem& p, int64_t row) {
  return ragged_rows_of(p).window(row, p.dense.geometry.n);
}

// The index written for a winner at window-relative `index` (0 <= index < the window's length)
// of row `row`.
inline int64_t transform_index(const RaggedProblem& p, int64_t row, int64_t index) {
  return ragged_rows_of(p).index_transform(row).apply(index);
}

}  // namespace mtk
