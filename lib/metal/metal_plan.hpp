// The Metal backend's dispatch plan, in portable C++ so it is unit-tested on any machine: for
// one TopkProblem, which kernels run in which order, their grids, threadgroup sizes and
// threadgroup memory, the parameter blocks they receive and the workspace they need. The
// Objective-C++ glue (lib/metal/metal_backend.mm) only turns a plan into Metal calls, and the
// PoCL harness (tests/metal/pocl_harness.cpp) runs the same plan on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/problem.hpp"
#include "metal/router_params.h"
#include "metal/topk_params.h"

namespace mtk {

static_assert(sizeof(MtkTopkParams) == 8 * 8 + 4 * 7 * 8 + 5 * 8 + 8 * 4, "layout shared with MSL");
static_assert(sizeof(MtkPassParams) == 32, "layout shared with MSL");
static_assert(sizeof(MtkRowState) == 32, "layout shared with MSL");
static_assert(sizeof(MtkRouterParams) == 11 * 8 + 10 * 4, "layout shared with MSL");
static_assert(MTK_ROUTER_SOFTMAX == MTK_SCORING_SOFTMAX && MTK_ROUTER_SIGMOID == MTK_SCORING_SIGMOID &&
                  MTK_ROUTER_NONE == MTK_SCORING_NONE,
              "the kernel numbers scorings as the C ABI does");
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
};

const char* metal_kernel_name(MetalKernel kernel);  // "mtk_rows_short", ...
// "f32", "bf16", ...; throws MTK_ERROR_UNSUPPORTED_DTYPE for float64 (Metal has none).
const char* metal_dtype_suffix(mtk_dtype dtype);

// Threadgroup buffers every kernel declares, in [[threadgroup(i)]] order.
enum MetalThreadgroupBuffer {
  kTgSelectionWords = 0,
  kTgScanScratch = 1,
  kTgSortKeys = 2,
  kTgSortIndices = 3,
  kTgKeyCache = 4,
  kMetalThreadgroupBuffers = 5,
};

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

// Plans a valid problem (rows, n, k > 0). Throws MTK_ERROR_UNSUPPORTED_DTYPE for float64 and
// MTK_ERROR_INVALID_ARGUMENT for rows the kernels' 32-bit counters cannot address.
MetalPlan make_metal_plan(const TopkProblem& problem, const MetalLimits& limits = MetalLimits());

// Records where element 0 of the input and outputs sits in its bound buffer, given byte offsets
// from each buffer's start. Throws MTK_ERROR_INVALID_ARGUMENT for an offset that is not a
// multiple of its element size (the kernels index whole elements).
void set_metal_buffer_offsets(MetalPlan& plan, mtk_dtype dtype, mtk_dtype index_dtype,
                              size_t input_bytes, size_t values_bytes, size_t indices_bytes);

// The bytes a strided tensor of the problem touches, relative to its element 0: from
// `first` (<= 0, for negative strides) for `bytes` bytes. The glue checks that this whole range
// lies inside one of the context's buffers before any kernel may read or write it.
struct ByteExtent {
  int64_t first;
  uint64_t bytes;
};
struct MetalExtents {
  ByteExtent input, values, indices;
};
MetalExtents metal_tensor_extents(const TopkProblem& problem);

// Checks caller-provided scratch for a plan: large enough, and at a 256-byte offset in its
// buffer (the plan's regions are aligned relative to it). Throws MTK_ERROR_INVALID_ARGUMENT.
void check_metal_workspace(const MetalPlan& plan, size_t bytes, size_t offset_in_buffer);

// ---- MPSGraph routing -------------------------------------------------------------------
// MPSGraph's top-k is used only where it is documented to work; everything else goes to the
// Metal kernels. The decision is portable so it is unit-tested here (docs/METAL.md lists it).

struct MpsGraphCapabilities {
  bool macos14 = false;  // axis:/bottomK forms of top-k and bfloat16 (macOS 14)
};

// Where the arguments live: byte offsets in their MTLBuffers, and whether `stream` is a
// caller's command buffer (MPSGraph may commit it, so it is never given one).
struct MpsGraphBinding {
  size_t input_offset = 0, values_offset = 0, indices_offset = 0;
  bool caller_command_buffer = false;
};

struct MpsGraphTopk {
  bool use_graph = false;
  const char* route_reason = "";  // why the Metal kernels run instead (when !use_graph)
  // The input as a dense 2-D tensor [shape0, shape1] with the top-k along `axis`.
  int64_t shape[2] = {0, 0};
  int axis = 1;
  bool axis_form = false;  // topK/bottomK with axis: (macOS 14); else transposes to the last axis
  bool transpose = false;  // without axis_form, axis 0 is moved last and back
  bool negate = false;     // without axis_form, smallest = -topK(-x) (floats only)
  bool indices_int64 = false;  // cast MPSGraph's int32 indices to int64 inside the graph
};

// MPSGraph's top-k caps k here: values past 16 came back as zeros on macOS 12/13 and no later
// fix is documented.
constexpr int64_t kMpsGraphMaxK = 16;

MpsGraphTopk plan_mpsgraph_topk(const TopkProblem& problem, const MpsGraphCapabilities& caps,
                                const MpsGraphBinding& binding);

// ---- MoE router ---------------------------------------------------------------------------
// One dispatch of mtk_moe_route_<dtype> (lib/metal/router_kernels.h): one threadgroup per token
// holding the token's E scores and keys in threadgroup memory.

// Threadgroup buffers of the router kernel, in [[threadgroup(i)]] order.
enum MetalRouterBuffer {
  kRouterTgScores = 0,   // E floats
  kRouterTgKeys = 1,     // E words
  kRouterTgReduce = 2,   // arg-max and sum scratch for the threadgroup's threads
  kRouterTgRoute = 3,    // group keys and ranks, chosen ids and u
  kRouterThreadgroupBuffers = 4,
};

struct MetalRouterPlan {
  MtkRouterParams params;
  std::string function;  // "mtk_moe_route_<dtype suffix>"
  uint32_t threadgroups_y;  // one threadgroup per token (x is 1)
  uint32_t threads;         // per threadgroup: a multiple of 32, at most limits.max_threads
  uint32_t threadgroup_bytes[kRouterThreadgroupBuffers];  // each a multiple of 16, at least 16
};

// "mtk_moe_route_<dtype suffix>": the router pipeline for logits of `dtype`.
std::string metal_router_function(mtk_dtype dtype);

// The router kernel's limits for a device whose router pipeline allows `pipeline_max_threads`
// threads per threadgroup (it needs only one SIMD-group). Throws MTK_ERROR_DEVICE below 32.
MetalLimits metal_router_limits_for_pipeline(uint64_t pipeline_max_threads);

// Plans a valid router problem (tokens > 0; the core has checked k, groups and dtypes). Throws
// MTK_ERROR_INVALID_ARGUMENT when one token's experts do not fit in threadgroup memory (about
// 4000 experts for small k under Apple's 32 KB) or there are more tokens than a grid holds.
MetalRouterPlan make_metal_router_plan(const RouterProblem& problem, const MetalLimits& limits = MetalLimits());

// Element 0's offset of each tensor in its bound buffer, from byte offsets (as
// set_metal_buffer_offsets). `bias_bytes` is ignored without a bias.
void set_metal_router_buffer_offsets(MetalRouterPlan& plan, const RouterProblem& problem, size_t logits_bytes,
                                     size_t bias_bytes, size_t weights_bytes, size_t ids_bytes);

// The bytes each router tensor touches, relative to its element 0 (bias: 0 bytes without one).
struct MetalRouterExtents {
  ByteExtent logits, bias, weights, ids;
};
MetalRouterExtents metal_router_extents(const RouterProblem& problem);

// The longest row the kernels address with 32-bit positions and counts (2^32 - 1 is the sort
// padding index).
constexpr int64_t kMetalMaxRowLength = int64_t(UINT32_MAX) - 1;

}  // namespace mtk
