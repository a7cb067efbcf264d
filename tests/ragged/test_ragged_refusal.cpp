// Backends without ragged kernels must refuse mtk_topk_ragged (and mtk_topk without values)
// with MTK_ERROR_BACKEND_UNAVAILABLE and a message naming them, never run it: checked on the
// stand-ins of tests/core/stand_in_backends.hpp, since this machine may have no GPU to refuse.
#include <cstdio>

#include "../core/stand_in_backends.hpp"
#include "metaltopk.h"

using stand_in::expect_refusal;

int main() {
  float scores[2][4] = {{1, 2, 3, 4}, {4, 3, 2, 1}};
  int32_t lengths[2] = {3, 4};
  int64_t indices[2][2] = {{-7, -7}, {-7, -7}};
  float values[2][2] = {};
  const mtk_tensor input = stand_in::dense_tensor(scores, MTK_FLOAT32, 2, 4);
  const mtk_tensor values_t = stand_in::dense_tensor(values, MTK_FLOAT32, 2, 2);
  const mtk_tensor indices_t = stand_in::dense_tensor(indices, MTK_INT64, 2, 2);
  const mtk_tensor lengths_t = stand_in::dense_tensor(lengths, MTK_INT32, 2, 0);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;

  const bool created = stand_in::for_each([&](mtk_context ctx, const char* name) {
    expect_refusal(mtk_topk_ragged(ctx, &input, 2, 1, 1, &params, &values_t, &indices_t, nullptr),
                   name, "mtk_topk_ragged");
    size_t bytes = 0;
    expect_refusal(
        mtk_topk_ragged_workspace_size(ctx, &input, 2, 1, 1, &params, MTK_INT64, &bytes), name,
        "mtk_topk_ragged_workspace_size");
    char workspace[64];
    expect_refusal(mtk_topk_ragged_with_workspace(ctx, &input, 2, 1, 1, &params, &values_t,
                                                  &indices_t, workspace, sizeof workspace,
                                                  nullptr),
                   name, "mtk_topk_ragged_with_workspace");
    expect_refusal(mtk_topk(ctx, &input, 2, 1, 1, 1, nullptr, &indices_t, nullptr), name,
                   "mtk_topk without values");
    // Bad arguments are still reported as such, before the refusal.
    if (mtk_topk_ragged(ctx, &input, -1, 1, 1, &params, &values_t, &indices_t, nullptr) !=
        MTK_ERROR_INVALID_ARGUMENT) {
      std::fprintf(stderr, "%s: k = -1 was not an invalid argument\n", name);
      ++stand_in::failures;
    }
  });
  if (!created) return 1;
  const bool outputs_untouched = indices[0][0] == -7 && indices[1][1] == -7;
  return stand_in::exit_status("test_ragged_refusal", outputs_untouched, "ragged rows");
}
