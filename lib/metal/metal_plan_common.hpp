// What the Metal plans share (metal_topk_plan, metal_router_plan; mpsgraph_plan routes to the
// first): the device limits they work within, the byte extents of strided tensors, the dtype
// suffix of pipeline names, and the helpers the plan files size threadgroup memory with.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "metaltopk.h"

namespace mtk {

// Device limits and tuning the plan works within. The defaults describe Apple GPUs; tests
// shrink them to reach every path with small inputs.
struct MetalLimits {
  size_t threadgroup_memory_bytes = 32768;  // Apple's limit for every GPU family
  uint32_t max_threads = 1024;              // per threadgroup: 256..1024, a multiple of 32
  int64_t short_row_max_n = 4096;           // rows up to this cache their keys in threadgroup memory
  int64_t huge_row_min_n = int64_t(1) << 17;  // rows from this length may be split ...
  int64_t huge_row_max_rows = 16;           // ... when there are too few rows to fill the GPU
  uint32_t huge_block_min_elems = 16384;    // elements per threadgroup in the multi-pass kernels
  uint32_t huge_max_blocks = 1024;          // threadgroups per row in the multi-pass kernels
  uint32_t sort_tile_max = 4096;            // widest bitonic network sorted in threadgroup memory
};

// The bytes a strided tensor touches, relative to its element 0: from `first` (<= 0, for
// negative strides) for `bytes` bytes. The glue checks that this whole range lies inside one of
// the context's buffers before any kernel may read or write it.
struct ByteExtent {
  int64_t first;
  uint64_t bytes;
};

// "f32", "bf16", ...; throws MTK_ERROR_UNSUPPORTED_DTYPE for float64 (Metal has none).
const char* metal_dtype_suffix(mtk_dtype dtype);

// For the plan files only.
namespace metal_plan_support {

// Must match lib/metal/mtk_dialect.h.
constexpr uint32_t kSimdWidth = 32;
// Metal requires threadgroup memory lengths in multiples of 16 bytes; Metal and OpenCL both
// reject zero-length buffers, so unused ones get the minimum.
constexpr uint32_t kTgGranule = 16;

inline uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The length a threadgroup buffer of `bytes` is declared with.
inline uint64_t threadgroup_buffer_bytes(uint64_t bytes) {
  return std::max<uint64_t>(round_up(bytes, kTgGranule), kTgGranule);
}

// Throws MTK_ERROR_INVALID_ARGUMENT naming `what` past the 32-bit grid.
uint32_t to_u32(uint64_t value, const char* what);

// The default limits with max_threads lowered to what the pipelines allow, in whole SIMD groups;
// fewer than `needed` threads is a device the kernels cannot run on (MTK_ERROR_DEVICE).
MetalLimits limits_for_pipeline(uint64_t pipeline_max_threads, uint64_t needed, const char* what);

// A byte offset into a buffer in whole elements; throws MTK_ERROR_INVALID_ARGUMENT naming
// `argument` for an offset that is not a multiple of the element size.
int64_t element_offset(size_t bytes, size_t element_size, const char* argument);

// Extent of `count` elements along each of the dims with the given sizes and strides.
ByteExtent extent(const int64_t* sizes, const int64_t* strides, int dims, int64_t dim_size,
                  int64_t dim_stride, size_t element);

}  // namespace metal_plan_support
}  // namespace mtk
