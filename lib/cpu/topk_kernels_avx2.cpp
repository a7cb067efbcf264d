// The kernels again, every function compiled for AVX2 (chosen at run time where the CPU has it):
// the block scans then compare 8 keys of 32 bits, or 32 of 8 bits, per instruction.
#include "cpu/topk_kernels.hpp"

#if defined(MTK_CPU_HAVE_AVX2_KERNELS)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,fma"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,bmi,bmi2,popcnt,lzcnt,fma")
#endif

#define MTK_CPU_ISA avx2
#include "cpu/topk_kernels_body.hpp"
#undef MTK_CPU_ISA

#if defined(__clang__)
#pragma clang attribute pop
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif

#endif  // MTK_CPU_HAVE_AVX2_KERNELS
