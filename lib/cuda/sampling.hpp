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

// Enqueues the call on `stream`: one kernel, parameters and uniforms read on the device, no
// allocation and no host synchronisation (graph-capturable). `workspace` holds at least
// sampling_workspace_bytes(problem); sm_count (the device's) sizes the split of small batches.
void launch_sampling(const SamplingProblem& problem, void* workspace, int sm_count,
                     cudaStream_t stream);

}  // namespace cuda
}  // namespace mtk
