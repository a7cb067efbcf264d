// The C ABI of the sampling filters and samplers: validate, then plan and run on the backend,
// as api.cpp does for top-k; `guarded` keeps every exception inside.
#include <memory>

#include "abi_enums.hpp"
#include "context.hpp"
#include "error.hpp"
#include "metaltopk.h"
#include "validate.hpp"

using mtk::Context;
using mtk::fail;
using mtk::guarded;

namespace {

void run_sampling(Context& ctx, const mtk::SamplingProblem& p,
                  const mtk::Workspace* caller_workspace, void* stream) {
  if (p.rows == 0 || p.n == 0) return;
  mtk::Backend& backend = ctx.backend();
  const std::shared_ptr<const mtk::PlannedTopk> plan = backend.plan_sampling(p);
  backend.run_sampling(*plan, p, mtk::checked_workspace(*plan, caller_workspace), stream);
}

mtk_status sampling_call(mtk_context ctx, mtk_sampling_op op, const mtk_tensor* input,
                         const mtk_sampling_params* params, const mtk_tensor* uniforms,
                         const mtk_tensor* output, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::SamplingProblem p =
        mtk::make_sampling_problem(op, input, params, uniforms, output);
    run_sampling(context, p, nullptr, stream);
  });
}

// Read as an int until checked (see mtk::abi_enum_value).
void require_known_dtype(const mtk_dtype& dtype, const char* name) {
  const int raw = mtk::abi_enum_value(dtype);
  if (!mtk::is_known_dtype(raw)) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, name, " = ", raw, " is not a known mtk_dtype");
  }
}

// A contiguous descriptor without data: [rows] or [rows, n].
mtk_tensor contiguous(mtk_dtype dtype, int64_t rows, int64_t n, bool per_row) {
  mtk_tensor t{};
  t.dtype = dtype;
  t.ndim = per_row ? 1 : 2;
  t.sizes[0] = rows;
  t.strides[0] = per_row ? 1 : n;
  t.sizes[1] = n;
  t.strides[1] = 1;
  return t;
}

}  // namespace

extern "C" {

MTK_API mtk_status mtk_top_k_mask_logits(mtk_context ctx, const mtk_tensor* logits,
                                         const mtk_sampling_params* params, const mtk_tensor* out,
                                         void* stream) {
  return sampling_call(ctx, MTK_SAMPLING_TOP_K_MASK_LOGITS, logits, params, nullptr, out, stream);
}

MTK_API mtk_status mtk_renorm_probs(mtk_context ctx, const mtk_tensor* probs,
                                    const mtk_sampling_params* params, const mtk_tensor* out,
                                    void* stream) {
  return sampling_call(ctx, MTK_SAMPLING_RENORM_PROBS, probs, params, nullptr, out, stream);
}

MTK_API mtk_status mtk_sample(mtk_context ctx, const mtk_tensor* probs,
                              const mtk_sampling_params* params, const mtk_tensor* uniforms,
                              const mtk_tensor* samples, void* stream) {
  return sampling_call(ctx, MTK_SAMPLING_SAMPLE, probs, params, uniforms, samples, stream);
}

MTK_API mtk_status mtk_sample_from_logits(mtk_context ctx, const mtk_tensor* logits,
                                          const mtk_sampling_params* params,
                                          const mtk_tensor* uniforms, const mtk_tensor* samples,
                                          void* stream) {
  return sampling_call(ctx, MTK_SAMPLING_SAMPLE_FROM_LOGITS, logits, params, uniforms, samples,
                       stream);
}

MTK_API mtk_status mtk_sampling_workspace_size(mtk_context ctx, mtk_sampling_op op,
                                               const mtk_tensor* input,
                                               const mtk_sampling_params* params,
                                               mtk_dtype output_dtype, size_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    if (bytes == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "bytes is NULL");
    mtk::check_sampling_op(op);
    if (input == nullptr) {
      fail(MTK_ERROR_INVALID_ARGUMENT, op == MTK_SAMPLING_RENORM_PROBS || op == MTK_SAMPLING_SAMPLE
                                           ? "probs is NULL" : "logits is NULL");
    }
    require_known_dtype(output_dtype, "output_dtype");
    const int64_t rows = input->ndim == 2 ? input->sizes[0] : 0;
    const int64_t n = input->ndim == 2 ? input->sizes[1] : 0;
    const bool samples = op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    const mtk_tensor output = contiguous(output_dtype, rows, n, samples);
    const mtk_tensor uniforms = contiguous(MTK_FLOAT32, rows, 1, true);
    const mtk::SamplingProblem p =
        mtk::make_sampling_problem(op, input, params, samples ? &uniforms : nullptr, &output,
                                   mtk::OutputMemory::NotYetAllocated);
    if (p.rows > 0 && p.n > 0) *bytes = context.backend().plan_sampling(p)->workspace_bytes;
  });
}

MTK_API mtk_status mtk_sampling_with_workspace(mtk_context ctx, mtk_sampling_op op,
                                               const mtk_tensor* input,
                                               const mtk_sampling_params* params,
                                               const mtk_tensor* uniforms,
                                               const mtk_tensor* output, void* workspace,
                                               size_t workspace_bytes, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::SamplingProblem p =
        mtk::make_sampling_problem(op, input, params, uniforms, output);
    const mtk::Workspace caller_workspace{workspace, workspace_bytes};
    run_sampling(context, p, &caller_workspace, stream);
  });
}

}  // extern "C"
