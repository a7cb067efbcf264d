// The Metal backend's top-k dispatch plan, in portable C++ so it is unit-tested on any machine:
// for one TopkProblem, which kernels run in which order, their grids, threadgroup sizes and
// threadgroup memory, the parameter blocks they receive and the workspace they need. The
// Objective-C++ glue (lib/metal/metal_backend.mm) only turns a plan into Metal calls, and the
// PoCL harness (tests/metal/pocl_harness.cpp) runs the same plan on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "metal/metal_plan_common.hpp"
#include "metal/topk_params.h"

namespace mtk {

static_assert(sizeof(MtkRowVector) == 24, "layout shared with MSL");
static_assert(sizeof(MtkTopkParams) == 8 * 8 + 4 * 7 * 8 + 4 * 24 + 5 * 8 + 5 * 8 + 12 * 4, "layout shared with MSL");
static_assert(sizeof(MtkPassParams) == 32, "layout shared with MSL");
static_assert(sizeof(MtkRowState) == 32, "layout shared with MSL");
static_assert(MTK_METAL_MAX_BATCH_DIMS == kMaxBatchDims, "one batch-dim limit");

enum class MetalShapeClass { ShortRows, LongRows, HugeRows };

// The kernels of lib/metal/topk_kernels.h; each is instantiated for every supported dtype.
enum class MetalKernel {
  RowsShort,
  RowsLong,
  RadixHistogram,
  RadixChoose,
  SelectCount,
  SelectOffsets,
  SelectScatter,
  SortRows,
  SortLoad,
  BitonicTile,
  BitonicStep,
  SortStore,
  RaggedFinish,
  Last = RaggedFinish,
};

const char* metal_kernel_name(MetalKernel kernel);  // "mtk_rows_short", ...

// Threadgroup buffers every kernel declares, in [[threadgroup(i)]] order.
enum MetalThreadgroupBuffer {
  kTgSelectionWords = 0,
  kTgScanScratch = 1,
  kTgSortKeys = 2,
  kTgSortIndices = 3,
  kTgKeyCache = 4,
  kMetalThreadgroupBuffers = 5,
};

// The per-row tensors of a ragged call, bound at [[buffer(kMetalFirstRaggedBuffer + i)]] for
// every kernel; a dense call, or an absent tensor, binds the input's buffer there (never read).
enum MetalRaggedBuffer {
  kRaggedLengths = 0,
  kRaggedStarts = 1,
  kRaggedOffsets = 2,
  kRaggedPageTable = 3,
  kRaggedRowToBatch = 4,
  kMetalRaggedBuffers = 5,
};
constexpr int kMetalFirstRaggedBuffer = 6;

// Apple's defaults with the threadgroup size capped by what the device's pipelines allow (their
// smallest maxTotalThreadsPerThreadgroup). Throws MTK_ERROR_DEVICE below the kernels' minimum
// of 256 threads.
MetalLimits metal_limits_for_pipelines(uint64_t pipeline_max_threads);

struct MetalDispatch {
  MetalKernel kernel;
  std::string function;  // pipeline function name, "<kernel>_<dtype suffix>"
  uint32_t threadgroups_x;
  uint32_t threadgroups_y;
  uint32_t threads;  // per threadgroup, along x
  uint32_t threadgroup_bytes[kMetalThreadgroupBuffers];  // each a multiple of 16, at least 16
  MtkPassParams pass;
};

struct MetalPlan {
  MetalShapeClass shape_class;
  MtkTopkParams params;
  std::vector<MetalDispatch> dispatches;
  size_t workspace_bytes;  // device scratch for the whole plan (0 if none)
};

// Plans a valid problem (rows, n, k > 0; values may be null). Throws
// MTK_ERROR_UNSUPPORTED_DTYPE for float64 and MTK_ERROR_INVALID_ARGUMENT for rows the kernels'
// 32-bit counters cannot address.
MetalPlan make_metal_plan(const TopkProblem& problem, const MetalLimits& limits = MetalLimits());

// Plans a valid ragged problem (rows, k > 0; n may be 0 and k may exceed it) as the dense
// problem's plan for min(k, n) winners, each row's kernels reading its window, followed by
// mtk_ragged_finish. Throws as make_metal_plan.
MetalPlan make_metal_ragged_plan(const RaggedProblem& problem, const MetalLimits& limits = MetalLimits());

// Records where element 0 of the input and outputs sits in its bound buffer, given byte offsets
// from each buffer's start. Throws MTK_ERROR_INVALID_ARGUMENT for an offset that is not a
// multiple of its element size (the kernels index whole elements).
void set_metal_buffer_offsets(MetalPlan& plan, mtk_dtype dtype, mtk_dtype index_dtype,
                              size_t input_bytes, size_t values_bytes, size_t indices_bytes);

// The bytes each tensor of the problem touches (ByteExtent, metal_plan_common.hpp).
struct MetalExtents {
  ByteExtent input, values, indices;
};
MetalExtents metal_tensor_extents(const TopkProblem& problem);  // values: none when null

// The per-row tensors of a ragged call, in MetalRaggedBuffer order: each one's data (null when
// absent) and the bytes it touches.
struct MetalRaggedTensors {
  const void* data[kMetalRaggedBuffers];
  ByteExtent extents[kMetalRaggedBuffers];
};
MetalRaggedTensors metal_ragged_tensors(const RaggedProblem& problem);

// Records where entry 0 of each present per-row tensor sits in its bound buffer, given byte
// offsets from each buffer's start (MetalRaggedBuffer order; absent ones are ignored). Throws
// MTK_ERROR_INVALID_ARGUMENT for an offset that is not a multiple of its element size.
void set_metal_ragged_buffer_offsets(MetalPlan& plan, const RaggedProblem& problem,
                                     const size_t (&bytes)[kMetalRaggedBuffers]);

// Checks caller-provided scratch for a plan: large enough, and at a 256-byte offset in its
// buffer (the plan's regions are aligned relative to it). Throws MTK_ERROR_INVALID_ARGUMENT.
void check_metal_workspace(const MetalPlan& plan, size_t bytes, size_t offset_in_buffer);

// The longest row the kernels address with 32-bit positions and counts (2^32 - 1 is the sort
// padding index).
constexpr int64_t kMetalMaxRowLength = int64_t(UINT32_MAX) - 1;

}  // namespace mtk
