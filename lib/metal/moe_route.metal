// Per-dtype instantiations of the MoE router kernel. The host looks pipelines up by these names:
// "mtk_moe_route_<dtype suffix>" (lib/metal/metal_router_plan.cpp builds the same strings).
#include "router_kernels.h"

#define MTK_INSTANTIATE_ROUTER(DT, suffix) \
  template MTK_KERNEL_INSTANCE("mtk_moe_route_" #suffix) decltype(mtk_moe_route<DT>) mtk_moe_route<DT>;

MTK_INSTANTIATE_ROUTER(DtF32, f32)
MTK_INSTANTIATE_ROUTER(DtF16, f16)
MTK_INSTANTIATE_ROUTER(DtBF16, bf16)
