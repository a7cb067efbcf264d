// The Metal backend's MoE router plan, in portable C++ so it is unit-tested on any machine and
// the PoCL harness (tests/metal/pocl_router_harness.cpp) runs what the glue runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/problem.hpp"
#include "metal/metal_plan_common.hpp"
#include "metal/router_params.h"

namespace mtk {

static_assert(sizeof(MtkRouterParams) == 11 * 8 + 10 * 4, "layout shared with MSL");
static_assert(MTK_ROUTER_SOFTMAX == MTK_SCORING_SOFTMAX && MTK_ROUTER_SIGMOID == MTK_SCORING_SIGMOID &&
                  MTK_ROUTER_NONE == MTK_SCORING_NONE,
              "the kernel numbers scorings as the C ABI does");

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

}  // namespace mtk
