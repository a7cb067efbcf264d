// The fused MoE router on CUDA (softmax/sigmoid scoring, optional bias and grouping, top-k,
// renormalisation), stream-ordered on `stream`; `sm_count` is the device's, which sizes the plan.
#pragma once

#include <cuda_runtime.h>

#include "core/problem.hpp"

namespace mtk {

void cuda_moe_route(const mtk::RouterProblem& problem, int sm_count, cudaStream_t stream);

}  // namespace mtk
