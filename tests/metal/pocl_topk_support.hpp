// What the two top-k PoCL harnesses (pocl_harness.cpp, dense rows; pocl_ragged_harness.cpp,
// ragged rows and indices only) share: limits that reach the multi-pass and device-memory-sort
// paths with small inputs, the plan's dispatches bound and run as the Metal glue runs them, the
// loop over cases and dtypes, and the report of which kernels ran in which dtype, since a kernel
// that never ran was never checked.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "metal/metal_topk_plan.hpp"
#include "metaltopk.h"
#include "pocl_runtime.hpp"
#include "pocl_test_data.hpp"

namespace mtk_pocl {

// Limits small enough to reach the multi-pass and device-memory-sort paths with small inputs.
inline mtk::MetalLimits small_limits() {
  mtk::MetalLimits l;
  l.max_threads = 256;
  l.huge_row_min_n = 2000;
  l.huge_row_max_rows = 4;
  l.huge_block_min_elems = 256;
  l.huge_max_blocks = 16;
  l.sort_tile_max = 64;
  return l;
}

// Runs the plan's dispatches in order on buffers bound as the glue binds them: the input, values,
// indices, the plan's parameters, the dispatch's pass and the workspace; then threadgroup memory;
// then the ragged tensors' slots. The queue keeps what it still needs of the buffers made here.
inline void run_dispatches(PoclRuntime& pocl, const mtk::MetalPlan& plan, cl_mem in, cl_mem values,
                           cl_mem indices, cl_mem params,
                           const cl_mem (&ragged_slots)[mtk::kMetalRaggedBuffers]) {
  ClBuffer workspace;
  if (plan.workspace_bytes > 0) {
    // Garbage in the workspace must not matter: the plan never reads what it did not write.
    const std::vector<unsigned char> garbage(plan.workspace_bytes, 0x5a);
    workspace = pocl.buffer(plan.workspace_bytes, garbage.data());
  }
  std::vector<ClBuffer> passes;
  for (const mtk::MetalDispatch& d : plan.dispatches) {
    cl_kernel kernel = pocl.kernel(d.function);
    passes.push_back(pocl.buffer(sizeof d.pass, &d.pass));
    const cl_mem buffers[6] = {in, values, indices, params, passes.back().get(), workspace.get()};
    for (cl_uint a = 0; a < 6; ++a) check_cl(clSetKernelArg(kernel, a, sizeof(cl_mem), &buffers[a]), "clSetKernelArg");
    for (cl_uint t = 0; t < mtk::kMetalThreadgroupBuffers; ++t) {
      check_cl(clSetKernelArg(kernel, 6 + t, d.threadgroup_bytes[t], nullptr), "clSetKernelArg(local)");
    }
    for (cl_uint r = 0; r < mtk::kMetalRaggedBuffers; ++r) {
      check_cl(clSetKernelArg(kernel, 6 + mtk::kMetalThreadgroupBuffers + r, sizeof(cl_mem), &ragged_slots[r]),
               "clSetKernelArg(ragged)");
    }
    const size_t global[2] = {size_t(d.threadgroups_x) * d.threads, d.threadgroups_y};
    const size_t local[2] = {d.threads, 1};
    check_cl(clEnqueueNDRangeKernel(pocl.queue(), kernel, 2, nullptr, global, local, 0, nullptr, nullptr),
             ("clEnqueueNDRangeKernel " + d.function).c_str());
  }
}

struct Tally {
  int ran = 0, failures = 0;
};

// Runs every case in every dtype, each run with the next seed from `seed` on.
template <class Harness, class Case>
Tally run_in_every_dtype(Harness& harness, const std::vector<Case>& cases, uint32_t seed) {
  Tally tally;
  for (const Case& c : cases) {
    for (mtk_dtype dtype : kDtypes) {
      ++tally.ran;
      if (!harness.run(c, dtype, seed++)) ++tally.failures;
    }
  }
  return tally;
}

// Prints the dispatches in matching cases per kernel, from the first up to `last`, and dtype;
// returns how many kernel/dtype pairs never ran.
inline int report_kernel_runs(const std::map<std::string, int>& kernel_runs, mtk::MetalKernel last) {
  std::printf("per kernel and dtype (dispatches in matching cases):\n");
  int missing = 0;
  for (int kernel = 0; kernel <= int(last); ++kernel) {
    std::printf("  %-20s", mtk::metal_kernel_name(mtk::MetalKernel(kernel)));
    for (mtk_dtype dtype : kDtypes) {
      const std::string name = std::string(mtk::metal_kernel_name(mtk::MetalKernel(kernel))) + "_" + mtk::metal_dtype_suffix(dtype);
      const auto found = kernel_runs.find(name);
      const int count = found == kernel_runs.end() ? 0 : found->second;
      std::printf(" %s:%d", mtk::metal_dtype_suffix(dtype), count);
      if (count == 0) ++missing;
    }
    std::printf("\n");
  }
  return missing;
}

}  // namespace mtk_pocl
