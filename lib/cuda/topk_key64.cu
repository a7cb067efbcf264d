// Top-k kernels for the dtypes with 64-bit keys.
#include "cuda/topk_launch.cuh"

namespace mtk {
namespace cuda {

void launch_topk_key64(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                       void* scratch, cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT64: launch_topk<double>(problem, ragged, plan, scratch, stream); return;
    case MTK_INT64: launch_topk<int64_t>(problem, ragged, plan, scratch, stream); return;
    default:
      fail(MTK_ERROR_INTERNAL, "launch_topk_key64 called for dtype ", int(problem.dtype));
  }
}

// In the file that sorts 128-bit composites anyway; sizing the 64-bit ones' sort instantiates
// that sort here as well.
size_t winner_sort_temp_bytes(int key_bytes, int64_t rows, int64_t k) {
  return key_bytes == 8 ? winner_sort_temp_bytes_for<Composite<uint64_t>>(rows, k)
                        : winner_sort_temp_bytes_for<Composite<uint32_t>>(rows, k);
}

}  // namespace cuda
}  // namespace mtk
