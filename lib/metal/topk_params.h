// Parameter blocks shared bit for bit by the host plan (C++) and the Metal kernels. Only
// fixed-width fields, largest first, so both compilers lay them out identically; the host side
// static_asserts the sizes (lib/metal/metal_topk_plan.hpp).
#pragma once

#if defined(__METAL_VERSION__) || defined(__OPENCL_CPP_VERSION__) || defined(__OPENCL_C_VERSION__)
typedef long mtk_i64;
typedef ulong mtk_u64;
typedef uint mtk_u32;
#else
#include <cstdint>
typedef int64_t mtk_i64;
typedef uint64_t mtk_u64;
typedef uint32_t mtk_u32;
#endif

#define MTK_METAL_MAX_BATCH_DIMS 7
#define MTK_RADIX_BINS 256
#define MTK_RADIX_BITS 8

// How a ragged call's indices are transformed (mtk_index_transform's values).
#define MTK_METAL_TRANSFORM_NONE 0
#define MTK_METAL_TRANSFORM_RAGGED 1
#define MTK_METAL_TRANSFORM_PAGE_TABLE 2

// One per-row int32 or int64 tensor of a ragged call (lengths, starts, offsets, row_to_batch),
// read by the kernels from its own bound buffer.
struct MtkRowVector {
  mtk_i64 base;      // element offset of entry 0 in the bound buffer
  mtk_i64 stride;    // elements
  mtk_u32 present;   // 0: absent (its buffer slot holds another tensor, never read)
  mtk_u32 is_64;     // int64 (else int32)
};

// One top-k call: the row geometry (lib/core/problem.hpp RowGeometry) and the plan's choices.
struct MtkTopkParams {
  // Element offsets of element 0 of the input and the outputs from the start of their bound
  // buffers, so negative strides never index below a binding.
  mtk_i64 input_base;
  mtk_i64 values_base;
  mtk_i64 indices_base;
  mtk_i64 n;
  mtk_i64 k;
  mtk_i64 input_stride;
  mtk_i64 values_stride;
  mtk_i64 indices_stride;
  mtk_i64 batch_sizes[MTK_METAL_MAX_BATCH_DIMS];
  mtk_i64 input_batch_strides[MTK_METAL_MAX_BATCH_DIMS];
  mtk_i64 values_batch_strides[MTK_METAL_MAX_BATCH_DIMS];
  mtk_i64 indices_batch_strides[MTK_METAL_MAX_BATCH_DIMS];
  // Ragged rows (mtk_topk_ragged; `ragged` below): each row selects from its window of the
  // row (lib/core/ragged_window.hpp clips it), k is the outputs' width and may exceed n.
  MtkRowVector lengths;
  MtkRowVector starts;
  MtkRowVector offsets;
  MtkRowVector row_to_batch;
  mtk_i64 page_table_base;  // element offset of entry [0, 0] in the bound buffer
  mtk_i64 page_table_batches;
  mtk_i64 page_table_batch_stride;  // elements
  mtk_i64 page_table_page_stride;   // elements
  mtk_i64 page_size;
  // Byte offsets of the workspace regions (multi-pass selection and the device-memory sort).
  mtk_u64 ws_row_state;
  mtk_u64 ws_block_hist;
  mtk_u64 ws_block_counts;
  mtk_u64 ws_sort_keys;
  mtk_u64 ws_sort_indices;
  mtk_u32 batch_ndim;
  mtk_u32 largest;
  mtk_u32 index_is_64;          // indices output is int64 (else int32)
  mtk_u32 sort_in_threadgroup;  // the row kernel sorts its winners itself
  mtk_u32 blocks_per_row;       // multi-pass selection: threadgroups sharing a row
  mtk_u32 block_elems;          // elements per such threadgroup (a multiple of its threads)
  mtk_u32 sort_size;            // k rounded up to a power of two: the bitonic network's width
  mtk_u32 sort_tile;            // elements a threadgroup sorts in threadgroup memory
  mtk_u32 has_values;           // 0: indices only (the values binding is another tensor's)
  mtk_u32 ragged;               // per-row windows, padded and transformed by mtk_ragged_finish
  mtk_u32 transform;            // MTK_METAL_TRANSFORM_*
  mtk_u32 page_table_is_64;
};

// What changes between dispatches of one plan.
struct MtkPassParams {
  mtk_u32 shift;      // radix passes: bit position of the digit being chosen
  mtk_u32 first;      // radix passes: 1 for the most significant digit (state not yet written)
  mtk_u32 size_lo;    // bitonic passes: merge sizes size_lo..size_hi (powers of two)
  mtk_u32 size_hi;
  mtk_u32 stride;     // bitonic_step: the compare distance
  mtk_u32 reserved[3];
};

// Per-row state of the multi-pass selection: the key bits chosen so far and how many of the
// elements matching them are still to be taken.
struct MtkRowState {
  mtk_u64 prefix;
  mtk_u64 mask;
  mtk_u64 remaining;
  mtk_u64 reserved;
};
