// Entry points of the CPU top-k kernels, one per instruction set they are compiled for; the
// backend picks one at run time, so the library runs on any x86-64 and uses AVX2 where present.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#include "core/error.hpp"
#include "core/ordered_key.hpp"
#include "core/problem.hpp"
#include "cpu/thread_pool.hpp"
#include "cpu/topk_plan.hpp"

namespace mtk::cpu {

#define MTK_CPU_DECLARE_TOPK(isa)                                                            \
  namespace isa {                                                                            \
  void run_topk(const TopkProblem& problem, const TopkPlan& plan, ThreadPool& pool,          \
                const ScratchView& scratch);                                                 \
  }

MTK_CPU_DECLARE_TOPK(generic)
#if defined(__x86_64__)
#define MTK_CPU_HAVE_AVX2_KERNELS 1
MTK_CPU_DECLARE_TOPK(avx2)
#endif
#undef MTK_CPU_DECLARE_TOPK

}  // namespace mtk::cpu
