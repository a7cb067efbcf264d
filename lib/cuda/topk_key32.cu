// Top-k kernels for the dtypes with 32-bit keys.
#include "cuda/topk_launch.cuh"

namespace mtk {
namespace cuda {

void launch_topk_key32(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                       void* scratch, cudaStream_t stream) {
  switch (problem.dtype) {
    case MTK_FLOAT32: launch_topk<float>(problem, ragged, plan, scratch, stream); return;
    case MTK_INT32: launch_topk<int32_t>(problem, ragged, plan, scratch, stream); return;
    default:
      fail(MTK_ERROR_INTERNAL, "launch_topk_key32 called for dtype ", int(problem.dtype));
  }
}

// Asks the occupancy of the largest cluster kernel, which the others match closely enough for the
// plan (the same block, cluster and static shared memory).
int max_active_select_clusters() {
  constexpr auto kernel = cluster_select_kernel<float, kClusterMaxItems>;
  cudaLaunchAttribute cluster = cluster_dimension(kClusterBlocks);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(kClusterBlocks);
  config.blockDim = dim3(kBlockThreads);
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess ||
      cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

}  // namespace cuda
}  // namespace mtk
