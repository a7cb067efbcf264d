// Checks raw ABI arguments against the contract and turns them into canonical problems. Every
// error a caller can cause is detected here, before any backend or allocation is involved.
#pragma once

#include <cstdint>
#include <cstring>

#include "metaltopk.h"
#include "problem.hpp"
#include "sampling_problem.hpp"

namespace mtk {

// C callers may store any int in an enum-typed field; in C++ loading an enum outside its
// enumeration's range is undefined behaviour, so ABI enums are read as ints until checked.
template <class Enum>
int abi_enum_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "ABI enums are int-sized");
  int raw;
  std::memcpy(&raw, &field, sizeof raw);
  return raw;
}

// The contract's output shape: the input's with size k at the (normalised) dim.
struct OutputShape {
  int32_t ndim;
  int64_t sizes[MTK_MAX_NDIM];
};

// Validates the input descriptor, dim and k; returns the normalised dim (0 for a 0-d input).
int validate_input_dim_k(const mtk_tensor* input, int64_t k, int64_t dim);
OutputShape topk_output_shape(const mtk_tensor& input, int64_t k, int normalized_dim);

// Whether the outputs' memory exists yet: descriptors built by the library before it allocates
// (mtk_topk_alloc, workspace queries) carry no addresses to check.
enum class OutputMemory { CallerProvided, NotYetAllocated };

// Full validation of a top-k call.
TopkProblem make_topk_problem(const mtk_tensor* input, int64_t k, int64_t dim, int largest,
                              int sorted, const mtk_tensor* values, const mtk_tensor* indices,
                              OutputMemory outputs = OutputMemory::CallerProvided);

// Full validation of a ragged top-k call (mtk_topk_ragged); `values` may be NULL.
RaggedProblem make_ragged_problem(const mtk_tensor* input, int64_t k, int largest, int sorted,
                                  const mtk_ragged_params* params, const mtk_tensor* values,
                                  const mtk_tensor* indices,
                                  OutputMemory outputs = OutputMemory::CallerProvided);

// Full validation of a sampling call; `uniforms` is NULL for the two filters and `output` is
// their `out` or the samples. An `op` outside the enum is rejected first.
void check_sampling_op(const mtk_sampling_op& op);
SamplingProblem make_sampling_problem(const mtk_sampling_op& op, const mtk_tensor* input,
                                      const mtk_sampling_params* params,
                                      const mtk_tensor* uniforms, const mtk_tensor* output,
                                      OutputMemory outputs = OutputMemory::CallerProvided);

struct PlannedTopk;
// The caller's scratch checked against what `plan` needs (api.cpp), or an empty Workspace (the
// backend takes its own) where the caller gave none.
Workspace checked_workspace(const PlannedTopk& plan, const Workspace* caller_workspace);

RouterProblem make_router_problem(const mtk_tensor* logits, const mtk_router_params* params,
                                  const mtk_tensor* weights, const mtk_tensor* ids);

}  // namespace mtk
