/* The library's own share of one mtk_topk call: what the ABI, validation and the context add
 * around the backend. Calls the CPU backend CALLS times on one short row (1x128 bf16, k = 8);
 * bench/core_call_instructions.sh runs it under callgrind and subtracts the backend's
 * instructions from mtk_topk's. Instruction counts do not depend on the machine's load, so
 * versions compare exactly (bench/CUDA_NOTES.md). */
#include <stdio.h>
#include <stdlib.h>

#include "metaltopk.h"

enum { CALLS = 10000, N = 128, K = 8 };

int main(void) {
  static unsigned short input[N], values[K];
  static long long indices[K];
  for (int i = 0; i < N; ++i) input[i] = (unsigned short)(0x3f80 + 37 * i % 251);
  mtk_context ctx;
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) != MTK_SUCCESS) {
    fprintf(stderr, "core_call_instructions: %s\n", mtk_last_error_message());
    return 1;
  }
  mtk_tensor in = {0};
  in.data = input;
  in.dtype = MTK_BFLOAT16;
  in.ndim = 2;
  in.sizes[0] = 1;
  in.sizes[1] = N;
  in.strides[0] = N;
  in.strides[1] = 1;
  mtk_tensor out_values = in, out_indices = in;
  out_values.data = values;
  out_values.sizes[1] = K;
  out_values.strides[0] = K;
  out_indices = out_values;
  out_indices.data = indices;
  out_indices.dtype = MTK_INT64;
  for (int call = 0; call < CALLS; ++call) {
    if (mtk_topk(ctx, &in, K, -1, 1, 1, &out_values, &out_indices, NULL) != MTK_SUCCESS) {
      fprintf(stderr, "core_call_instructions: %s\n", mtk_last_error_message());
      return 1;
    }
  }
  printf("calls %d\n", CALLS);
  mtk_context_destroy(ctx);
  return 0;
}
