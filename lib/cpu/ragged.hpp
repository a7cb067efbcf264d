// Ragged rows on the CPU (mtk_topk_ragged): each row's window is searched by the same top-k
// kernels as a one-row problem of its own, then padded and its indices transformed.
#pragma once

#include <cstddef>

#include "core/problem.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/topk_plan.hpp"

namespace mtk::cpu {

using TopkKernel = void (*)(const TopkProblem&, const TopkPlan&, ThreadPool&, const ScratchView&);

// Scratch each worker needs for any row of the problem, whatever the lengths and starts hold.
size_t ragged_worker_bytes(const RaggedProblem& problem);

// Rows are spread over `pool`; worker w uses worker_scratch[w], ragged_worker_bytes long.
void run_ragged(const RaggedProblem& problem, TopkKernel kernel, ThreadPool& pool,
                std::byte* const* worker_scratch);

}  // namespace mtk::cpu
