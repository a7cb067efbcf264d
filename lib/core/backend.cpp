// What a backend without ragged kernels answers: a clear refusal naming it, never a result.
#include "backend.hpp"

#include "error.hpp"

namespace mtk {
namespace {

[[noreturn]] void refuse_ragged(mtk_backend kind) {
  fail(MTK_ERROR_BACKEND_UNAVAILABLE,
       "ragged top-k (mtk_topk_ragged) is not implemented on the ", mtk_backend_name(kind),
       " backend yet; the cpu backend implements it");
}

}  // namespace

std::shared_ptr<const PlannedTopk> Backend::plan_topk_ragged(const RaggedProblem&) {
  refuse_ragged(kind());
}

void Backend::run_topk_ragged(const PlannedTopk&, const RaggedProblem&, Workspace, void*) {
  refuse_ragged(kind());
}

}  // namespace mtk
