// The Metal backend's plan of a sampling call (mtk_top_k_mask_logits, mtk_renorm_probs,
// mtk_sample, mtk_sample_from_logits), in portable C++ so it is tested on any machine: the
// kernel's parameter block, its one dispatch (a threadgroup per row), threadgroup memory and
// workspace. The Objective-C++ glue (lib/metal/metal_backend.mm) binds what it says, and the PoCL
// harness (tests/metal/pocl_sampling_harness.cpp) runs the same plan on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/sampling_problem.hpp"
#include "metal/metal_plan_common.hpp"
#include "metal/sampling_params.h"

namespace mtk {

static_assert(sizeof(MtkRowFloat) == 24, "layout shared with MSL");
static_assert(sizeof(MtkSamplingParams) == 8 * 8 + 24 + 4 * 24 + 4 * 4, "layout shared with MSL");

// The tensors the sampling kernel binds, at [[buffer(i)]]; the parameter block is buffer 2 and
// the workspace buffer 3. A per-row parameter given as a scalar binds the input's buffer.
enum MetalSamplingBuffer {
  kSamplingInput = 0,
  kSamplingOutput = 1,
  kSamplingTopK = 2,
  kSamplingTopP = 3,
  kSamplingMinP = 4,
  kSamplingTemperature = 5,
  kSamplingUniforms = 6,
  kMetalSamplingTensors = 7,
};
// The [[buffer(i)]] index of each MetalSamplingBuffer.
constexpr int kMetalSamplingBinding[kMetalSamplingTensors] = {0, 1, 4, 5, 6, 7, 8};
constexpr int kMetalSamplingParamsBinding = 2;
constexpr int kMetalSamplingWorkspaceBinding = 3;

// Threadgroup buffers of the kernel, in [[threadgroup(i)]] order.
enum MetalSamplingThreadgroupBuffer {
  kTgSamplingSums = 0,
  kTgSamplingHistogram = 1,
  kTgSamplingState = 2,
  kMetalSamplingThreadgroupBuffers = 3,
};

struct MetalSamplingPlan {
  MtkSamplingParams params;
  std::string function;  // "mtk_sampling_<operation>_<dtype suffix>"
  uint32_t threadgroups_y;  // one threadgroup per row
  uint32_t threads;         // per threadgroup, along x
  uint32_t threadgroup_bytes[kMetalSamplingThreadgroupBuffers];
  size_t workspace_bytes;   // the samplers' masses, [rows, n] float32; 0 for the filters
};

// "mask_logits", "renorm_probs", "sample", "sample_from_logits": the pipeline names' middle.
const char* metal_sampling_operation_name(mtk_sampling_op op);

// Plans a valid problem (rows, n > 0). Throws MTK_ERROR_UNSUPPORTED_DTYPE for an input the
// kernel has no instance for, MTK_ERROR_INVALID_ARGUMENT for rows past the grid, and
// MTK_ERROR_DEVICE when `limits` allow fewer threads or less threadgroup memory than it needs.
MetalSamplingPlan make_metal_sampling_plan(const SamplingProblem& problem, const MetalLimits& limits = MetalLimits());

// Each tensor's data (null for a per-row parameter given as a scalar, and for uniforms of the
// filters) and the bytes it touches, in MetalSamplingBuffer order.
struct MetalSamplingTensors {
  const void* data[kMetalSamplingTensors];
  ByteExtent extents[kMetalSamplingTensors];
};
MetalSamplingTensors metal_sampling_tensors(const SamplingProblem& problem);

// Records where element 0 of each present tensor sits in its bound buffer, given byte offsets
// from each buffer's start (MetalSamplingBuffer order; absent ones are ignored). Throws
// MTK_ERROR_INVALID_ARGUMENT for an offset that is not a multiple of the element size.
void set_metal_sampling_buffer_offsets(MetalSamplingPlan& plan, const SamplingProblem& problem,
                                       const size_t (&bytes)[kMetalSamplingTensors]);

// Checks caller-provided scratch: large enough, and at a float32-aligned offset in its buffer.
// Throws MTK_ERROR_INVALID_ARGUMENT.
void check_metal_sampling_workspace(const MetalSamplingPlan& plan, size_t bytes, size_t offset_in_buffer);

}  // namespace mtk
