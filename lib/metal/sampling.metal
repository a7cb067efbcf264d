// Instantiations of the sampling kernel, one per operation and input dtype. The host looks
// pipelines up by these names, "mtk_sampling_<operation>_<dtype suffix>"
// (lib/metal/metal_sampling_plan.cpp builds the same strings).
#include "sampling_kernels.h"

#define MTK_INSTANTIATE_SAMPLING(DT, op, name, suffix)                                      \
  template MTK_KERNEL_INSTANCE("mtk_sampling_" #name "_" #suffix)                           \
      decltype(mtk_sampling_rows<DT, op>) mtk_sampling_rows<DT, op>;

MTK_INSTANTIATE_SAMPLING(SampleF32, MTK_METAL_SAMPLING_MASK_LOGITS, mask_logits, f32)
MTK_INSTANTIATE_SAMPLING(SampleF16, MTK_METAL_SAMPLING_MASK_LOGITS, mask_logits, f16)
MTK_INSTANTIATE_SAMPLING(SampleBF16, MTK_METAL_SAMPLING_MASK_LOGITS, mask_logits, bf16)
MTK_INSTANTIATE_SAMPLING(SampleF32, MTK_METAL_SAMPLING_RENORM_PROBS, renorm_probs, f32)
MTK_INSTANTIATE_SAMPLING(SampleF32, MTK_METAL_SAMPLING_SAMPLE, sample, f32)
MTK_INSTANTIATE_SAMPLING(SampleF32, MTK_METAL_SAMPLING_SAMPLE_FROM_LOGITS, sample_from_logits, f32)
MTK_INSTANTIATE_SAMPLING(SampleF16, MTK_METAL_SAMPLING_SAMPLE_FROM_LOGITS, sample_from_logits, f16)
MTK_INSTANTIATE_SAMPLING(SampleBF16, MTK_METAL_SAMPLING_SAMPLE_FROM_LOGITS, sample_from_logits, bf16)
