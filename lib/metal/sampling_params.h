// The parameter block of the sampling kernel (lib/metal/sampling_kernels.h), shared bit for bit
// by the host plan (lib/metal/metal_sampling_plan.cpp) and the kernel: fixed-width fields,
// largest first; the host static_asserts the size.
#pragma once

#include "topk_params.h"

// The operations (mtk_sampling_op's values): the sampling kernel's Op template parameter.
#define MTK_METAL_SAMPLING_MASK_LOGITS 0
#define MTK_METAL_SAMPLING_RENORM_PROBS 1
#define MTK_METAL_SAMPLING_SAMPLE 2
#define MTK_METAL_SAMPLING_SAMPLE_FROM_LOGITS 3

// The threads of the sampling kernel's threadgroup: a power of two (the exact-sum reductions
// halve it), a multiple of the SIMD width, and what every Apple GPU allows. Results do not
// depend on it: every sum is exact.
#define MTK_SAMPLING_THREADS 256

// A per-row float32 parameter (top_p, min_p, temperature, uniforms): its [rows] tensor, read
// from its own bound buffer, or one value for every row.
struct MtkRowFloat {
  mtk_i64 base;         // element offset of entry 0 in the bound buffer
  mtk_i64 stride;       // elements
  mtk_u32 present;      // 0: `value_bits` for every row (the buffer slot holds another tensor)
  mtk_u32 value_bits;   // the scalar's float32 bits
};

struct MtkSamplingParams {
  mtk_i64 n;
  // Element offsets of element 0 of the input and output in their bound buffers, and strides.
  mtk_i64 input_base;
  mtk_i64 input_row_stride;
  mtk_i64 input_stride;
  mtk_i64 output_base;
  mtk_i64 output_row_stride;  // the samples' stride for the samplers
  mtk_i64 output_stride;
  mtk_i64 top_k_value;        // when top_k is absent
  MtkRowVector top_k;
  MtkRowFloat top_p;
  MtkRowFloat min_p;
  MtkRowFloat temperature;
  MtkRowFloat uniforms;
  mtk_u32 output_is_64;       // samples are int64 (else int32)
  mtk_u32 reserved[3];
};
