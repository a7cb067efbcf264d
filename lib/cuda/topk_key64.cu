// Top-k kernels for the dtypes with 64-bit keys.
#include "cuda/topk_launch.cuh"

namespace mtk {
namespace cuda {

void launch_topk_key64(const TopkProblem& problem, const TopkPlan& plan, void* scratch,
                       cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT64: launch_topk<double>(problem, plan, scratch, stream); return;
    case MTK_INT64: launch_topk<int64_t>(problem, plan, scratch, stream); return;
    default:
      fail(MTK_ERROR_INTERNAL, "launch_topk_key64 called for dtype ", int(problem.dtype));
  }
}

}  // namespace cuda
}  // namespace mtk
