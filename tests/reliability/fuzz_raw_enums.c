/* C may pass any int as an enum argument; C++ code cannot even form such a value without
 * undefined behaviour. The fuzzer makes its calls with raw enum arguments through here. */
#include "metaltopk.h"

mtk_status fuzz_topk_alloc_raw(mtk_context ctx, const mtk_tensor* input, int64_t k, int64_t dim,
                               int largest, int sorted, int index_dtype, mtk_tensor* values_out,
                               mtk_tensor* indices_out);

mtk_status fuzz_topk_alloc_raw(mtk_context ctx, const mtk_tensor* input, int64_t k, int64_t dim,
                               int largest, int sorted, int index_dtype, mtk_tensor* values_out,
                               mtk_tensor* indices_out) {
  return mtk_topk_alloc(ctx, input, k, dim, largest, sorted, (mtk_dtype)index_dtype, values_out,
                        indices_out, NULL);
}

mtk_status fuzz_sampling_raw(mtk_context ctx, int op, const mtk_tensor* input,
                             const mtk_sampling_params* params, const mtk_tensor* uniforms,
                             const mtk_tensor* output, void* workspace, size_t workspace_bytes);

mtk_status fuzz_sampling_raw(mtk_context ctx, int op, const mtk_tensor* input,
                             const mtk_sampling_params* params, const mtk_tensor* uniforms,
                             const mtk_tensor* output, void* workspace, size_t workspace_bytes) {
  return mtk_sampling_with_workspace(ctx, (mtk_sampling_op)op, input, params, uniforms, output,
                                     workspace, workspace_bytes, NULL);
}

mtk_status fuzz_sampling_workspace_size_raw(mtk_context ctx, int op, const mtk_tensor* input,
                                            const mtk_sampling_params* params, int output_dtype,
                                            size_t* bytes);

mtk_status fuzz_sampling_workspace_size_raw(mtk_context ctx, int op, const mtk_tensor* input,
                                            const mtk_sampling_params* params, int output_dtype,
                                            size_t* bytes) {
  return mtk_sampling_workspace_size(ctx, (mtk_sampling_op)op, input, params,
                                     (mtk_dtype)output_dtype, bytes);
}
