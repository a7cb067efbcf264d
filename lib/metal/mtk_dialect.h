// The small Metal dialect every metaltopk kernel is written in. Kernels use only what this file,
// <metal_stdlib> and lib/core/float_formats.hpp (the float keys and widenings every backend
// shares) provide, so the same sources parse as C++ for OpenCL against
// tests/metal/compat/metal_stdlib and run on the CPU through PoCL (see docs/METAL.md).
//
// Rules: threadgroup memory arrives only as kernel parameters (`[[threadgroup(i)]]`); SIMD-group
// operations and threadgroup atomics go through the helpers below, which on PoCL are emulated
// with threadgroup memory; values are never converted to floating point (keys are computed from
// raw bits), so no math mode can change a result.
#pragma once

#include <metal_stdlib>

using namespace metal;

// Apple GPUs execute SIMD-groups of 32 threads. Threadgroup sizes are multiples of it, and the
// scan below groups threads by it.
enum : uint { kSimdWidth = 32 };

// Attributes of an explicitly instantiated kernel template: its pipeline name on the Mac.
#if defined(MTK_COMPAT_STDLIB)
#define MTK_KERNEL_INSTANCE(host_name_string)
#else
#define MTK_KERNEL_INSTANCE(host_name_string) [[host_name(host_name_string)]] [[kernel]]
#endif

inline void tg_barrier() { threadgroup_barrier(mem_flags::mem_threadgroup); }

// Relaxed threadgroup atomic add on a plain uint (zeroed and read with ordinary accesses
// between barriers).
inline void tg_atomic_add(threadgroup uint* counter, uint value) {
#if defined(MTK_METAL_EMULATION)
  atomic_add((volatile threadgroup uint*)counter, value);
#else
  atomic_fetch_add_explicit((threadgroup atomic_uint*)counter, value, memory_order_relaxed);
#endif
}

// Exclusive prefix sum across the SIMD-group of the calling thread. Must be called by every
// thread of the threadgroup (the emulation synchronises the whole threadgroup); `lane_scratch`
// is this SIMD-group's kSimdWidth words of threadgroup memory, unused by the native version.
// The host defines MTK_SIMD_VIA_THREADGROUP for GPUs whose SIMD width is not kSimdWidth (Macs
// with Intel or AMD graphics), which then run the threadgroup-memory version PoCL tests.
inline uint simd_exclusive_sum(uint value, uint lane, threadgroup uint* lane_scratch) {
#if defined(MTK_METAL_EMULATION) || defined(MTK_SIMD_VIA_THREADGROUP)
  lane_scratch[lane] = value;
  tg_barrier();
  uint sum = 0;
  for (uint i = 0; i < lane; ++i) sum += lane_scratch[i];
  tg_barrier();
  return sum;
#else
  (void)lane;
  (void)lane_scratch;
  return simd_prefix_exclusive_sum(value);
#endif
}

// Words of threadgroup memory threadgroup_exclusive_sum needs for `threads` threads (the host
// plan mirrors this in scan_scratch_words, lib/metal/metal_topk_plan.cpp).
inline uint scan_scratch_words(uint threads) { return 2 * kSimdWidth + threads; }

// Exclusive prefix sum of one value per thread over the whole threadgroup, in thread order;
// `total` receives the sum of all values. `threads` is a multiple of kSimdWidth, at most
// kSimdWidth * kSimdWidth. Every thread must call it; `scratch` is reusable on return.
inline uint threadgroup_exclusive_sum(uint value, uint tid, uint threads,
                                      threadgroup uint* scratch, thread uint& total) {
  const uint lane = tid % kSimdWidth;
  const uint group = tid / kSimdWidth;
  const uint groups = threads / kSimdWidth;
  threadgroup uint* group_sums = scratch;                     // kSimdWidth words
  threadgroup uint* total_slot = scratch + kSimdWidth;        // 1 word (of kSimdWidth)
  threadgroup uint* lanes = scratch + 2 * kSimdWidth + group * kSimdWidth;

  const uint within = simd_exclusive_sum(value, lane, lanes);
  if (lane == kSimdWidth - 1) group_sums[group] = within + value;
  tg_barrier();
  // Second level: the first SIMD-group scans the per-group sums; the others scan zeros.
  const uint group_sum = tid < groups ? group_sums[tid] : 0u;
  const uint group_prefix = simd_exclusive_sum(group_sum, lane, lanes);
  tg_barrier();
  if (tid < groups) group_sums[tid] = group_prefix;
  if (tid == groups - 1) total_slot[0] = group_prefix + group_sum;
  tg_barrier();
  const uint result = within + group_sums[group];
  total = total_slot[0];
  tg_barrier();
  return result;
}
