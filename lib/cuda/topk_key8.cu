// Top-k kernels for the dtypes with 8-bit keys.
#include "cuda/topk_launch.cuh"

namespace mtk {
namespace cuda {

void launch_topk_key8(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                      void* scratch, cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_INT8: launch_topk<int8_t>(problem, ragged, plan, scratch, stream); return;
    case MTK_UINT8: launch_topk<uint8_t>(problem, ragged, plan, scratch, stream); return;
    default:
      fail(MTK_ERROR_INTERNAL, "launch_topk_key8 called for dtype ", int(problem.dtype));
  }
}

}  // namespace cuda
}  // namespace mtk
