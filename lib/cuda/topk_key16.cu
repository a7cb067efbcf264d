// Top-k kernels for the dtypes with 16-bit keys.
#include "cuda/topk_launch.cuh"

namespace mtk {
namespace cuda {

void launch_topk_key16(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                       void* scratch, cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT16: launch_topk<f16_bits>(problem, ragged, plan, scratch, stream); return;
    case MTK_BFLOAT16: launch_topk<bf16_bits>(problem, ragged, plan, scratch, stream); return;
    case MTK_INT16: launch_topk<int16_t>(problem, ragged, plan, scratch, stream); return;
    default:
      fail(MTK_ERROR_INTERNAL, "launch_topk_key16 called for dtype ", int(problem.dtype));
  }
}

}  // namespace cuda
}  // namespace mtk
