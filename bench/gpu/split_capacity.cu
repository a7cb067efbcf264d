// How many clusters of the split sampling kernels' shape an H100 or H200 runs at once
// (lib/cuda/sampling.cu's sampling_split_capacity asks the same of the kernel itself, for its
// one padding): 512 threads a block, the sampling kernels' static shared memory, and dynamic
// shared memory of 80 KB (one block an SM), 40 KB (two) or none, for clusters of 2 to 16.
// bench/CUDA_NOTES.md lead 12 reads it. Exit 2 where there is no CUDA device.
#include <cooperative_groups.h>

#include <cstdio>

#include "cuda/sampling_block.cuh"

using mtk::cuda::sampling::SharedState;

// The split kernels' block as the occupancy query sees it; its work is beside the point, but
// the shared state must be used for its size to count.
__global__ __launch_bounds__(512, 2) void split_shaped_kernel(int* out) {
  __shared__ SharedState s;
  s.counts[threadIdx.x & 255] = threadIdx.x;
  __syncthreads();
  cooperative_groups::this_cluster().sync();
  if (out != nullptr) out[blockIdx.x] = s.counts[(threadIdx.x + 1) & 255];
}

int main() {
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess) {
    std::fprintf(stderr, "split_capacity: no CUDA device\n");
    return 2;
  }
  cudaFuncAttributes attributes{};
  cudaFuncGetAttributes(&attributes, split_shaped_kernel);
  std::printf("SMs %d, static shared memory %zu B, registers %d\n", sms,
              attributes.sharedSizeBytes, attributes.numRegs);
  cudaFuncSetAttribute(split_shaped_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaFuncSetAttribute(split_shaped_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       120 * 1024);
  for (const int padding_kb : {80, 40, 0}) {
    int per_sm = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, split_shaped_kernel, 512,
                                                  size_t(padding_kb) * 1024);
    std::printf("padding %d KB: %d blocks an SM; clusters at once:", padding_kb, per_sm);
    for (unsigned size = 2; size <= 16; size *= 2) {
      cudaLaunchAttribute cluster{};
      cluster.id = cudaLaunchAttributeClusterDimension;
      cluster.val.clusterDim.x = size;
      cluster.val.clusterDim.y = 1;
      cluster.val.clusterDim.z = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(size);
      config.blockDim = dim3(512);
      config.dynamicSmemBytes = size_t(padding_kb) * 1024;
      config.attrs = &cluster;
      config.numAttrs = 1;
      int clusters = -1;
      const cudaError_t status =
          cudaOccupancyMaxActiveClusters(&clusters, split_shaped_kernel, &config);
      std::printf(" %u: %d%s", size, clusters, status != cudaSuccess ? " (error)" : "");
    }
    std::printf("\n");
  }
  return 0;
}
