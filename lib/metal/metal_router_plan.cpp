#include "metal_router_plan.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace mtk {

using namespace metal_plan_support;

namespace {
// Must match lib/metal/router_kernels.h (router_reduce_words).
uint32_t router_reduce_words(uint32_t threads) { return 2 * kSimdWidth + 2 * threads; }

uint64_t router_threadgroup_total(const uint64_t (&bytes)[kRouterThreadgroupBuffers]) {
  uint64_t sum = 0;
  for (uint64_t b : bytes) sum += threadgroup_buffer_bytes(b);
  return sum;
}
}  // namespace

std::string metal_router_function(mtk_dtype dtype) {
  return std::string("mtk_moe_route_") + metal_dtype_suffix(dtype);
}

MetalLimits metal_router_limits_for_pipeline(uint64_t pipeline_max_threads) {
  return limits_for_pipeline(pipeline_max_threads, kSimdWidth, "router");
}

MetalRouterPlan make_metal_router_plan(const RouterProblem& problem, const MetalLimits& limits) {
  if (limits.max_threads < kSimdWidth || limits.max_threads > kSimdWidth * kSimdWidth ||
      limits.max_threads % kSimdWidth != 0) {
    fail(MTK_ERROR_INTERNAL, "Metal max_threads = ", limits.max_threads, " must be a multiple of 32 in [32, 1024]");
  }
  const uint64_t experts = static_cast<uint64_t>(problem.experts);
  const uint64_t k = static_cast<uint64_t>(problem.k);
  const uint64_t groups = static_cast<uint64_t>(problem.n_group);

  MetalRouterPlan plan{};
  plan.function = metal_router_function(problem.dtype);
  plan.threadgroups_y = to_u32(static_cast<uint64_t>(problem.tokens), "tokens");

  // One thread per expert up to the limit; fewer (the most that fit) only if their reduction
  // scratch is what keeps a token's experts out of threadgroup memory.
  uint64_t threads = std::min<uint64_t>(round_up(experts, kSimdWidth), limits.max_threads);
  uint64_t bytes[kRouterThreadgroupBuffers] = {};
  for (;;) {
    bytes[kRouterTgScores] = experts * 4;
    bytes[kRouterTgKeys] = experts * 4;
    bytes[kRouterTgReduce] = router_reduce_words(static_cast<uint32_t>(threads)) * 4;
    bytes[kRouterTgRoute] = (2 * groups + 2 * k) * 4;
    if (router_threadgroup_total(bytes) <= limits.threadgroup_memory_bytes) break;
    if (threads == kSimdWidth) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "the Metal router keeps a token's experts in threadgroup memory: ", experts,
           " experts with k = ", k, " need ", router_threadgroup_total(bytes), " bytes, over the limit of ",
           limits.threadgroup_memory_bytes);
    }
    threads -= kSimdWidth;
  }
  plan.threads = static_cast<uint32_t>(threads);
  for (int i = 0; i < kRouterThreadgroupBuffers; ++i) {
    plan.threadgroup_bytes[i] = static_cast<uint32_t>(threadgroup_buffer_bytes(bytes[i]));
  }

  MtkRouterParams& p = plan.params;
  p.logits_token_stride = problem.logits_token_stride;
  p.logits_expert_stride = problem.logits_expert_stride;
  p.bias_stride = problem.bias != nullptr ? problem.bias_stride : 0;
  p.weights_token_stride = problem.weights_token_stride;
  p.weights_k_stride = problem.weights_k_stride;
  p.ids_token_stride = problem.ids_token_stride;
  p.ids_k_stride = problem.ids_k_stride;
  p.experts = static_cast<mtk_u32>(experts);
  p.k = static_cast<mtk_u32>(k);
  p.scoring = static_cast<mtk_u32>(problem.scoring);
  p.n_group = static_cast<mtk_u32>(groups);
  p.topk_group = static_cast<mtk_u32>(problem.topk_group);
  p.has_bias = problem.bias != nullptr ? 1u : 0u;
  p.renormalize = problem.renormalize ? 1u : 0u;
  p.index_is_64 = problem.index_dtype == MTK_INT64 ? 1u : 0u;
  p.scale = problem.scale;
  return plan;
}

void set_metal_router_buffer_offsets(MetalRouterPlan& plan, const RouterProblem& problem, size_t logits_bytes,
                                     size_t bias_bytes, size_t weights_bytes, size_t ids_bytes) {
  MtkRouterParams& p = plan.params;
  p.logits_base = element_offset(logits_bytes, require_dtype(problem.dtype, "logits").size, "logits");
  p.bias_base = problem.bias != nullptr ? element_offset(bias_bytes, sizeof(float), "bias") : 0;
  p.weights_base = element_offset(weights_bytes, sizeof(float), "weights");
  p.ids_base = element_offset(ids_bytes, require_dtype(problem.index_dtype, "ids").size, "ids");
}

MetalRouterExtents metal_router_extents(const RouterProblem& p) {
  const size_t index = require_dtype(p.index_dtype, "ids").size;
  MetalRouterExtents out;
  out.logits = extent(&p.tokens, &p.logits_token_stride, 1, p.experts, p.logits_expert_stride,
                      require_dtype(p.dtype, "logits").size);
  out.bias = p.bias != nullptr ? extent(nullptr, nullptr, 0, p.experts, p.bias_stride, sizeof(float)) : ByteExtent{0, 0};
  out.weights = extent(&p.tokens, &p.weights_token_stride, 1, p.k, p.weights_k_stride, sizeof(float));
  out.ids = extent(&p.tokens, &p.ids_token_stride, 1, p.k, p.ids_k_stride, index);
  return out;
}

}  // namespace mtk
