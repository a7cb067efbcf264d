// The MPSGraph backend's routing, in portable C++ so it is unit-tested on any machine: MPSGraph's
// top-k is used only where it is documented to work; everything else goes to the Metal kernels
// (docs/METAL.md lists the rules).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"

namespace mtk {

struct MpsGraphCapabilities {
  bool macos14 = false;  // axis:/bottomK forms of top-k and bfloat16 (macOS 14)
};

// Where the arguments live: byte offsets in their MTLBuffers, and whether `stream` is a
// caller's command buffer (MPSGraph may commit it, so it is never given one).
struct MpsGraphBinding {
  size_t input_offset = 0, values_offset = 0, indices_offset = 0;
  bool caller_command_buffer = false;
};

struct MpsGraphTopk {
  bool use_graph = false;
  const char* route_reason = "";  // why the Metal kernels run instead (when !use_graph)
  // The input as a dense 2-D tensor [shape0, shape1] with the top-k along `axis`.
  int64_t shape[2] = {0, 0};
  int axis = 1;
  bool axis_form = false;  // topK/bottomK with axis: (macOS 14); else transposes to the last axis
  bool transpose = false;  // without axis_form, axis 0 is moved last and back
  bool negate = false;     // without axis_form, smallest = -topK(-x) (floats only)
  bool indices_int64 = false;  // cast MPSGraph's int32 indices to int64 inside the graph
};

// MPSGraph's top-k caps k here: values past 16 came back as zeros on macOS 12/13 and no later
// fix is documented.
constexpr int64_t kMpsGraphMaxK = 16;

MpsGraphTopk plan_mpsgraph_topk(const TopkProblem& problem, const MpsGraphCapabilities& caps,
                                const MpsGraphBinding& binding);

}  // namespace mtk
