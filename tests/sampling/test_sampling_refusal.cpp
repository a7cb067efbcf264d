// Backends without sampling kernels must refuse every sampling entry with
// MTK_ERROR_BACKEND_UNAVAILABLE and a message naming them, never run it: checked on the
// stand-ins of tests/core/stand_in_backends.hpp, as tests/ragged/test_ragged_refusal.cpp is.
#include <cstdio>

#include "../core/stand_in_backends.hpp"
#include "metaltopk.h"

using stand_in::expect_refusal;

int main() {
  float probs[2][4] = {{0.1f, 0.2f, 0.3f, 0.4f}, {0.4f, 0.3f, 0.2f, 0.1f}};
  float out[2][4] = {{-7, -7, -7, -7}, {-7, -7, -7, -7}};
  float uniforms[2] = {0.5f, 0.5f};
  int64_t samples[2] = {-7, -7};
  const mtk_tensor input = stand_in::dense_tensor(probs, MTK_FLOAT32, 2, 4);
  const mtk_tensor out_t = stand_in::dense_tensor(out, MTK_FLOAT32, 2, 4);
  const mtk_tensor uniforms_t = stand_in::dense_tensor(uniforms, MTK_FLOAT32, 2, 0);
  const mtk_tensor samples_t = stand_in::dense_tensor(samples, MTK_INT64, 2, 0);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_k_value = 2;

  const bool created = stand_in::for_each([&](mtk_context ctx, const char* name) {
    expect_refusal(mtk_top_k_mask_logits(ctx, &input, &params, &out_t, nullptr), name,
                   "mtk_top_k_mask_logits");
    expect_refusal(mtk_renorm_probs(ctx, &input, &params, &out_t, nullptr), name,
                   "mtk_renorm_probs");
    expect_refusal(mtk_sample(ctx, &input, &params, &uniforms_t, &samples_t, nullptr), name,
                   "mtk_sample");
    expect_refusal(mtk_sample_from_logits(ctx, &input, &params, &uniforms_t, &samples_t, nullptr),
                   name, "mtk_sample_from_logits");
    size_t bytes = 0;
    expect_refusal(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &input, &params,
                                               MTK_INT64, &bytes),
                   name, "mtk_sampling_workspace_size");
    char workspace[64];
    expect_refusal(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_RENORM_PROBS, &input, &params,
                                               nullptr, &out_t, workspace, sizeof workspace,
                                               nullptr),
                   name, "mtk_sampling_with_workspace");
    // Bad arguments are still reported as such, before the refusal.
    if (mtk_sample(ctx, &input, &params, nullptr, &samples_t, nullptr) !=
        MTK_ERROR_INVALID_ARGUMENT) {
      std::fprintf(stderr, "%s: missing uniforms were not an invalid argument\n", name);
      ++stand_in::failures;
    }
  });
  if (!created) return 1;
  const bool outputs_untouched = out[0][0] == -7 && samples[0] == -7;
  return stand_in::exit_status("test_sampling_refusal", outputs_untouched, "sampling");
}
