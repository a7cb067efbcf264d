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
