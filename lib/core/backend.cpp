// What a backend without ragged or sampling kernels, or without foreign buffers, answers: a clear
// refusal naming it, never a result.
#include "backend.hpp"

#include "error.hpp"

namespace mtk {
namespace {

[[noreturn]] void refuse_ragged(mtk_backend kind) {
  fail(MTK_ERROR_BACKEND_UNAVAILABLE,
       "ragged top-k (mtk_topk_ragged) is not implemented on the ", mtk_backend_name(kind),
       " backend yet; the cpu backend implements it");
}

[[noreturn]] void refuse_sampling(mtk_backend kind) {
  fail(MTK_ERROR_BACKEND_UNAVAILABLE,
       "sampling (mtk_top_k_mask_logits, mtk_renorm_probs, mtk_sample, mtk_sample_from_logits) "
       "is not implemented on the ", mtk_backend_name(kind),
       " backend yet; the cpu backend implements it");
}

[[noreturn]] void refuse_registration(mtk_backend kind) {
  fail(MTK_ERROR_BACKEND_UNAVAILABLE, "the ", mtk_backend_name(kind),
       " backend registers no foreign buffers (mtk_register_buffer is for Metal and MPSGraph): "
       "pass the runtime's device pointers as they are");
}

}  // namespace

void* Backend::register_buffer(void*) { refuse_registration(kind()); }

void Backend::unregister_buffer(void*) { refuse_registration(kind()); }

std::shared_ptr<const PlannedTopk> Backend::plan_sampling(const SamplingProblem&) {
  refuse_sampling(kind());
}

void Backend::run_sampling(const PlannedTopk&, const SamplingProblem&, Workspace, void*) {
  refuse_sampling(kind());
}

std::shared_ptr<const PlannedTopk> Backend::plan_topk_ragged(const RaggedProblem&) {
  refuse_ragged(kind());
}

void Backend::run_topk_ragged(const PlannedTopk&, const RaggedProblem&, Workspace, void*) {
  refuse_ragged(kind());
}

}  // namespace mtk
