// The CUDA sampling filters and samplers (sampling.cu), as the backend calls them.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "core/sampling_problem.hpp"

namespace mtk {
namespace cuda {

// Workspace a sampling call needs: the masses of every row that does not finish on its top-k
// candidates in shared memory; none when a scalar top_k keeps few enough tokens, or for
// top_k_mask_logits.
size_t sampling_workspace_bytes(const SamplingProblem& problem);

// How many rows the split-row kernels run at once on the current device, a cluster of 2, 4, 8
// or 16 blocks each (rows_at_once[log2 of the blocks]; 0 where the device runs no such cluster).
struct SplitCapacity {
  int rows_at_once[5] = {};
};
SplitCapacity sampling_split_capacity();

// Enqueues the call on `stream`: one kernel, parameters and uniforms read on the device, no
// allocation and no host synchronisation (graph-capturable). `workspace` holds at least
// sampling_workspace_bytes(problem); `capacity` (the device's) sizes the split of small batches.
void launch_sampling(const SamplingProblem& problem, void* workspace,
                     const SplitCapacity& capacity, cudaStream_t stream);

}  // namespace cuda
}  // namespace mtk
