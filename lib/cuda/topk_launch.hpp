// Entry points of the per-key-width kernel files (topk_key*.cu), one per width so the nine
// dtypes compile in parallel and each file holds only the instantiations of its width.
#pragma once

#include <cuda_runtime.h>

#include "core/problem.hpp"
#include "core/ragged_rows.hpp"
#include "cuda/topk_plan.hpp"

namespace mtk {
namespace cuda {

// Enqueues the whole top-k on `stream`; `scratch` holds plan.workspace_bytes bytes. `ragged`
// gives the rows' windows and index transform (a default RaggedRows for mtk_topk); only plans
// made for ragged rows take ragged ones.
void launch_topk_key8(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                      void* scratch, cudaStream_t stream);
void launch_topk_key16(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                      void* scratch, cudaStream_t stream);
void launch_topk_key32(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                      void* scratch, cudaStream_t stream);
void launch_topk_key64(const TopkProblem& problem, const RaggedRows& ragged, const TopkPlan& plan,
                      void* scratch, cudaStream_t stream);

// How many rows' select clusters (cluster_select_kernel) the current device runs at once; 0
// where it runs none (before sm_90, or where it cannot say).
int max_active_select_clusters();

// The scratch of CUB's segmented sort of `rows` rows of `k` composites of keys of `key_bytes`
// bytes (1, 2, 4, 8): the plan's WinnerSortBytes. CUB may ask the current device.
size_t winner_sort_temp_bytes(int key_bytes, int64_t rows, int64_t k);

}  // namespace cuda
}  // namespace mtk
