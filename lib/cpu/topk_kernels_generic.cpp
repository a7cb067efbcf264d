// The kernels for the baseline instruction set of the target (SSE2 on x86-64).
#include "cpu/topk_kernels.hpp"

#define MTK_CPU_ISA generic
#include "cpu/topk_kernels_body.hpp"
#undef MTK_CPU_ISA
