// Parameter block of the MoE router kernel, shared bit for bit by the host plan (C++) and the
// kernel (MSL). Only fixed-width fields, largest first; the host static_asserts the size
// (lib/metal/metal_router_plan.hpp).
#pragma once

#include "topk_params.h"

// The router's scorings, numbered as mtk_scoring in include/metaltopk.h.
#define MTK_ROUTER_SOFTMAX 0
#define MTK_ROUTER_SIGMOID 1
#define MTK_ROUTER_NONE 2

// One mtk_moe_route call (lib/core/problem.hpp RouterProblem). Offsets and strides count
// elements of each tensor's own type; *_base is element 0's offset from the start of its bound
// buffer, so negative strides never index below a binding.
struct MtkRouterParams {
  mtk_i64 logits_base;
  mtk_i64 logits_token_stride;
  mtk_i64 logits_expert_stride;
  mtk_i64 bias_base;
  mtk_i64 bias_stride;
  mtk_i64 weights_base;
  mtk_i64 weights_token_stride;
  mtk_i64 weights_k_stride;
  mtk_i64 ids_base;
  mtk_i64 ids_token_stride;
  mtk_i64 ids_k_stride;
  mtk_u32 experts;      // E
  mtk_u32 k;
  mtk_u32 scoring;      // MTK_ROUTER_*
  mtk_u32 n_group;      // 1 when not grouped
  mtk_u32 topk_group;
  mtk_u32 has_bias;
  mtk_u32 renormalize;
  mtk_u32 index_is_64;  // ids are int64 (else int32)
  float scale;
  mtk_u32 reserved;
};
