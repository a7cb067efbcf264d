// The sampling filters and samplers on the CPU (docs/CONTRACT.md, "Sampling filters"): rows
// spread over the pool, each row computed alone with the shared exact arithmetic of
// core/sampling_math.hpp, so a row's result never depends on the batch around it.
#pragma once

#include <cstddef>

#include "core/sampling_problem.hpp"
#include "cpu/thread_pool.hpp"

namespace mtk::cpu {

// Scratch each worker needs for one row of the problem.
size_t sampling_worker_bytes(const SamplingProblem& problem);

// Worker w uses worker_scratch[w], sampling_worker_bytes long and 64-byte aligned.
void run_sampling(const SamplingProblem& problem, ThreadPool& pool,
                  std::byte* const* worker_scratch);

}  // namespace mtk::cpu
