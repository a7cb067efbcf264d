// Top-k kernels for the dtypes with 32-bit keys.
#include "cuda/topk_launch.cuh"

namespace mtk {
namespace cuda {

void launch_topk_key32(const TopkProblem& problem, const TopkPlan& plan, void* scratch,
                       cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT32: launch_topk<float>(problem, plan, scratch, stream); return;
    case MTK_INT32: launch_topk<int32_t>(problem, plan, scratch, stream); return;
    default:
      fail(MTK_ERROR_INTERNAL, "launch_topk_key32 called for dtype ", int(problem.dtype));
  }
}

}  // namespace cuda
}  // namespace mtk
