// Per-dtype instantiations of the top-k kernels. The host looks pipelines up by these names:
// "<kernel>_<dtype suffix>" (lib/metal/metal_topk_plan.cpp builds the same strings).
#include "topk_kernels.h"

#define MTK_INSTANTIATE(kernel_name, DT, suffix) \
  template MTK_KERNEL_INSTANCE(#kernel_name "_" #suffix) decltype(kernel_name<DT>) kernel_name<DT>;

#define MTK_INSTANTIATE_DTYPE(DT, suffix)             \
  MTK_INSTANTIATE(mtk_rows_short, DT, suffix)         \
  MTK_INSTANTIATE(mtk_rows_long, DT, suffix)          \
  MTK_INSTANTIATE(mtk_radix_histogram, DT, suffix)    \
  MTK_INSTANTIATE(mtk_radix_choose, DT, suffix)       \
  MTK_INSTANTIATE(mtk_select_count, DT, suffix)       \
  MTK_INSTANTIATE(mtk_select_offsets, DT, suffix)     \
  MTK_INSTANTIATE(mtk_select_scatter, DT, suffix)     \
  MTK_INSTANTIATE(mtk_sort_rows, DT, suffix)          \
  MTK_INSTANTIATE(mtk_sort_load, DT, suffix)          \
  MTK_INSTANTIATE(mtk_bitonic_tile, DT, suffix)       \
  MTK_INSTANTIATE(mtk_bitonic_step, DT, suffix)       \
  MTK_INSTANTIATE(mtk_sort_store, DT, suffix)         \
  MTK_INSTANTIATE(mtk_ragged_finish, DT, suffix)

MTK_INSTANTIATE_DTYPE(DtF32, f32)
MTK_INSTANTIATE_DTYPE(DtF16, f16)
MTK_INSTANTIATE_DTYPE(DtBF16, bf16)
MTK_INSTANTIATE_DTYPE(DtI8, i8)
MTK_INSTANTIATE_DTYPE(DtU8, u8)
MTK_INSTANTIATE_DTYPE(DtI16, i16)
MTK_INSTANTIATE_DTYPE(DtI32, i32)
MTK_INSTANTIATE_DTYPE(DtI64, i64)
