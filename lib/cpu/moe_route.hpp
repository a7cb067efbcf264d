// The fused MoE router on the CPU (moe_route.cpp): the CPU backend's moe_route calls this with
// its thread pool.
#pragma once

#include "core/problem.hpp"
#include "cpu/thread_pool.hpp"

namespace mtk::cpu {

void cpu_moe_route(const RouterProblem& problem, ThreadPool& pool);

}  // namespace mtk::cpu
