// The scalar rules of mtk_topk_ragged's rows, one copy for every backend: how a row's start and
// length are clipped to the row (a device-side check cannot raise, so every value has a
// meaning) and the wrapping arithmetic of the index transforms. Read by host C++, nvcc
// (MTK_HOST_DEVICE) and the Metal kernels (lib/metal/metal.mk embeds it after
// float_formats.hpp, whose rules it follows: integer arithmetic on value parameters only).
#pragma once

#include "float_formats.hpp"

namespace mtk {

#if defined(MTK_FLOAT_FORMATS_METAL)
typedef long int64_t;
#endif

// A window's first position: below 0 counts as 0, past the row's n as n.
MTK_HOST_DEVICE int64_t clipped_window_start(int64_t start, int64_t n) {
  return start < 0 ? int64_t(0) : (start > n ? n : start);
}

// A window's length from its clipped start: below 0 counts as 0, past the row's end as the rest
// of the row.
MTK_HOST_DEVICE int64_t clipped_window_length(int64_t length, int64_t start, int64_t n) {
  return length < 0 ? int64_t(0) : (length > n - start ? n - start : length);
}

// Whether a row of a page-table transform has a page table: its batch is inside the table.
// A row without one has no candidates.
MTK_HOST_DEVICE bool page_table_has_batch(int64_t batch, int64_t batches) {
  return batch >= 0 && batch < batches;
}

// offsets[r] + index in 64-bit two's complement: offsets are the caller's, and an overflow must
// give the same bits everywhere rather than undefined behaviour.
MTK_HOST_DEVICE int64_t ragged_transformed_index(int64_t offset, int64_t index) {
  return int64_t(uint64_t(offset) + uint64_t(index));
}

// page * page_size + within in 64-bit two's complement, `page` being the table's entry for
// index / page_size and `within` index % page_size (index >= 0, page_size >= 1).
MTK_HOST_DEVICE int64_t paged_transformed_index(int64_t page, int64_t page_size, int64_t within) {
  return int64_t(uint64_t(page) * uint64_t(page_size) + uint64_t(within));
}

}  // namespace mtk
