/*
 * mtk_topk_ragged from a C11 program, against results worked out by hand from the contract
 * (docs/CONTRACT.md, "Ragged rows"): windows, clipping, padding, both index transforms and
 * their 64-bit wrap, NaN and ties inside windows, strided inputs, indices only (here and in
 * mtk_topk), the workspace variant, and every error with the argument its message names.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../c/abi_test_support.h"
#include "metaltopk.h"

static mtk_context ctx;

/* The two rows every case below starts from. */
static float scores[2][5] = {{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}};

enum { K_MAX = 8 };
static float out_values[2][K_MAX];
static int64_t out_indices[2][K_MAX];
static int32_t out_indices32[2][K_MAX];

static void fill_outputs(void) {
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < K_MAX; ++i) {
      out_values[r][i] = -777.0f;
      out_indices[r][i] = -777;
      out_indices32[r][i] = -777;
    }
  }
}

/* Runs rows [2, 5] of `scores` (or `input` when given) with int64 indices and float values. */
static mtk_status run(const mtk_tensor* input, int64_t k, int largest, int sorted,
                      const mtk_ragged_params* params) {
  const mtk_tensor scores_t = tensor2d(scores, MTK_FLOAT32, 2, 5, 5, 1);
  const mtk_tensor values = tensor2d(out_values, MTK_FLOAT32, 2, k, K_MAX, 1);
  const mtk_tensor indices = tensor2d(out_indices, MTK_INT64, 2, k, K_MAX, 1);
  fill_outputs();
  return mtk_topk_ragged(ctx, input != NULL ? input : &scores_t, k, largest, sorted, params,
                         &values, &indices, NULL);
}

static void expect_row(int row, int64_t k, const float* values, const int64_t* indices,
                       int line) {
  for (int64_t i = 0; i < k; ++i) {
    uint32_t got_bits, want_bits;
    memcpy(&got_bits, &out_values[row][i], 4);
    memcpy(&want_bits, &values[i], 4);
    if (got_bits != want_bits || out_indices[row][i] != indices[i]) {
      fprintf(stderr, "%s:%d: row %d position %lld: got (%g, %lld), want (%g, %lld)\n", __FILE__,
              line, row, (long long)i, out_values[row][i], (long long)out_indices[row][i],
              values[i], (long long)indices[i]);
      ++failures;
    }
  }
  for (int64_t i = k; i < K_MAX; ++i) {
    CHECK(out_indices[row][i] == -777, "row %d position %lld past k was written", row,
          (long long)i);
  }
}

static void test_windows(void) {
  int32_t lengths[2] = {3, 0};
  mtk_tensor lengths_t = vec(lengths, MTK_INT32, 2);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;

  /* Row 0 ranks [3, 1, 4]; row 1 has no candidates: index -1, value +0.0. */
  EXPECT_STATUS(run(NULL, 2, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 2, (const float[]){4, 3}, (const int64_t[]){2, 0}, __LINE__);
  expect_row(1, 2, (const float[]){0, 0}, (const int64_t[]){-1, -1}, __LINE__);

  /* A caller built when the struct ended after `lengths` gets every later member's default. */
  struct {
    size_t struct_size;
    const mtk_tensor* lengths;
  } older = {sizeof older, &lengths_t};
  EXPECT_STATUS(run(NULL, 2, 1, 1, (const mtk_ragged_params*)(const void*)&older), MTK_SUCCESS,
                NULL);
  expect_row(0, 2, (const float[]){4, 3}, (const int64_t[]){2, 0}, __LINE__);

  /* Starts: indices count from the window start; a length past the end is the rest. */
  int64_t starts[2] = {1, 3};
  mtk_tensor starts_t = vec(starts, MTK_INT64, 2);
  lengths[0] = 9;
  lengths[1] = 2;
  params.starts = &starts_t;
  EXPECT_STATUS(run(NULL, 2, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 2, (const float[]){5, 4}, (const int64_t[]){3, 1}, __LINE__);
  expect_row(1, 2, (const float[]){5, 3}, (const int64_t[]){0, 1}, __LINE__);
  EXPECT_STATUS(run(NULL, 2, 0, 1, &params), MTK_SUCCESS, NULL);  /* smallest */
  expect_row(0, 2, (const float[]){1, 1}, (const int64_t[]){0, 2}, __LINE__);
  expect_row(1, 2, (const float[]){3, 5}, (const int64_t[]){1, 0}, __LINE__);

  /* Negative lengths and starts count as 0; a start past the end leaves nothing. */
  lengths[0] = -4;
  lengths[1] = 2;
  starts[0] = -7;
  starts[1] = 10;
  EXPECT_STATUS(run(NULL, 1, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 1, (const float[]){0}, (const int64_t[]){-1}, __LINE__);
  expect_row(1, 1, (const float[]){0}, (const int64_t[]){-1}, __LINE__);
  starts[0] = -7;
  lengths[0] = 2;
  EXPECT_STATUS(run(NULL, 1, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 1, (const float[]){3}, (const int64_t[]){0}, __LINE__);

  /* k past n: every element, ties to the lower index, then padding; sorted = 0 the same set
   * with the winners first. */
  params.starts = NULL;
  lengths[0] = 5;
  lengths[1] = 4;
  EXPECT_STATUS(run(NULL, 7, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 7, (const float[]){5, 4, 3, 1, 1, 0, 0},
             (const int64_t[]){4, 2, 0, 1, 3, -1, -1}, __LINE__);
  expect_row(1, 7, (const float[]){9, 6, 5, 2, 0, 0, 0},
             (const int64_t[]){0, 2, 3, 1, -1, -1, -1}, __LINE__);
  EXPECT_STATUS(run(NULL, 7, 1, 0, &params), MTK_SUCCESS, NULL);
  int seen = 0;
  for (int i = 0; i < 4; ++i) seen |= 1 << out_indices[1][i];
  CHECK(seen == 0xF && out_indices[1][4] == -1 && out_indices[1][6] == -1,
        "sorted = 0: row 1 holds the wrong set");

  /* k = 0 writes nothing. */
  EXPECT_STATUS(run(NULL, 0, 1, 1, &params), MTK_SUCCESS, NULL);
  CHECK(out_indices[0][0] == -777, "k = 0 wrote an index");
}

static void test_nan_strides_and_values_null(void) {
  /* Column-major: the same two rows with a row stride of 1 and an element stride of 2. */
  float columns[5][2];
  for (int r = 0; r < 2; ++r)
    for (int i = 0; i < 5; ++i) columns[i][r] = scores[r][i];
  columns[1][0] = NAN;
  columns[3][0] = NAN;
  int64_t lengths[2] = {5, 5};
  mtk_tensor lengths_t = vec(lengths, MTK_INT64, 2);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;
  const mtk_tensor input = tensor2d(columns, MTK_FLOAT32, 2, 5, 1, 2);
  EXPECT_STATUS(run(&input, 3, 1, 1, &params), MTK_SUCCESS, NULL);
  CHECK(out_indices[0][0] == 1 && out_indices[0][1] == 3 && out_indices[0][2] == 4,
        "NaN ranks above everything, ties to the lower index: got %lld %lld %lld",
        (long long)out_indices[0][0], (long long)out_indices[0][1], (long long)out_indices[0][2]);
  CHECK(isnan(out_values[0][0]) && isnan(out_values[0][1]) && out_values[0][2] == 5,
        "NaN values not copied");
  EXPECT_STATUS(run(&input, 3, 0, 1, &params), MTK_SUCCESS, NULL);
  CHECK(out_indices[0][0] == 0 && out_indices[0][1] == 2 && out_indices[0][2] == 4,
        "smallest with NaN");

  /* Indices only, int32, with a window. */
  const mtk_tensor indices32 = tensor2d(out_indices32, MTK_INT32, 2, 2, K_MAX, 1);
  lengths[0] = 1;
  fill_outputs();
  EXPECT_STATUS(mtk_topk_ragged(ctx, &input, 2, 1, 1, &params, NULL, &indices32, NULL),
                MTK_SUCCESS, NULL);
  CHECK(out_indices32[0][0] == 0 && out_indices32[0][1] == -1 && out_indices32[1][0] == 0 &&
            out_indices32[1][1] == 2 && out_values[0][0] == -777.0f,
        "indices only: %d %d %d %d", out_indices32[0][0], out_indices32[0][1],
        out_indices32[1][0], out_indices32[1][1]);

  /* Indices only in mtk_topk. */
  const mtk_tensor dense = tensor2d(scores, MTK_FLOAT32, 2, 5, 5, 1);
  const mtk_tensor indices = tensor2d(out_indices, MTK_INT64, 2, 2, K_MAX, 1);
  fill_outputs();
  EXPECT_STATUS(mtk_topk(ctx, &dense, 2, 1, 1, 1, NULL, &indices, NULL), MTK_SUCCESS, NULL);
  CHECK(out_indices[0][0] == 4 && out_indices[0][1] == 2 && out_indices[1][0] == 0 &&
            out_indices[1][1] == 2 && out_values[0][0] == -777.0f,
        "mtk_topk indices only");
}

static void test_transforms(void) {
  int32_t lengths[2] = {5, 1};
  mtk_tensor lengths_t = vec(lengths, MTK_INT32, 2);
  int64_t offsets[2] = {100, 200};
  mtk_tensor offsets_t = vec(offsets, MTK_INT64, 2);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;
  params.transform = MTK_INDEX_TRANSFORM_RAGGED;
  params.offsets = &offsets_t;
  EXPECT_STATUS(run(NULL, 2, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 2, (const float[]){5, 4}, (const int64_t[]){104, 102}, __LINE__);
  expect_row(1, 2, (const float[]){9, 0}, (const int64_t[]){200, -1}, __LINE__);

  /* 64-bit two's complement, and int32 indices keep the low 32 bits. */
  offsets[0] = INT64_MAX;
  offsets[1] = 0x100000005LL;
  EXPECT_STATUS(run(NULL, 1, 1, 1, &params), MTK_SUCCESS, NULL);
  CHECK(out_indices[0][0] == INT64_MIN + 3, "wrap: %lld", (long long)out_indices[0][0]);
  const mtk_tensor input = tensor2d(scores, MTK_FLOAT32, 2, 5, 5, 1);
  const mtk_tensor indices32 = tensor2d(out_indices32, MTK_INT32, 2, 1, K_MAX, 1);
  EXPECT_STATUS(mtk_topk_ragged(ctx, &input, 1, 1, 1, &params, NULL, &indices32, NULL),
                MTK_SUCCESS, NULL);
  CHECK(out_indices32[0][0] == 3 && out_indices32[1][0] == 5, "int32 low bits: %d %d",
        out_indices32[0][0], out_indices32[1][0]);

  /* Page table, pages of 2: window index i -> table[b, i / 2] * 2 + i % 2. */
  int32_t table[2][3] = {{7, 3, 5}, {1, 8, 4}};
  mtk_tensor table_t = tensor2d(table, MTK_INT32, 2, 3, 3, 1);
  params.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
  params.offsets = NULL;
  params.page_table = &table_t;
  params.page_size = 2;
  lengths[1] = 5;
  EXPECT_STATUS(run(NULL, 3, 1, 1, &params), MTK_SUCCESS, NULL);
  /* Row 0 ranks indices 4, 2, 0 on batch 0; row 1 ranks 0, 2, 3 on batch 1. */
  expect_row(0, 3, (const float[]){5, 4, 3}, (const int64_t[]){10, 6, 14}, __LINE__);
  expect_row(1, 3, (const float[]){9, 6, 5}, (const int64_t[]){2, 16, 17}, __LINE__);
  int64_t row_to_batch[2] = {1, 2};  /* batch 2 does not exist: row 1 has no candidates */
  mtk_tensor row_to_batch_t = vec(row_to_batch, MTK_INT64, 2);
  params.row_to_batch = &row_to_batch_t;
  EXPECT_STATUS(run(NULL, 3, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 3, (const float[]){5, 4, 3}, (const int64_t[]){8, 16, 2}, __LINE__);
  expect_row(1, 3, (const float[]){0, 0, 0}, (const int64_t[]){-1, -1, -1}, __LINE__);
  /* Pages of 1 and a strided table (its transpose): index i -> tableT[b, i]. */
  int64_t wide_table[5][2] = {{10, 20}, {11, 21}, {12, 22}, {13, 23}, {14, 24}};
  mtk_tensor wide_t = tensor2d(wide_table, MTK_INT64, 2, 5, 1, 2);
  params.page_table = &wide_t;
  params.page_size = 1;
  row_to_batch[0] = 1;
  row_to_batch[1] = 0;
  EXPECT_STATUS(run(NULL, 2, 1, 1, &params), MTK_SUCCESS, NULL);
  expect_row(0, 2, (const float[]){5, 4}, (const int64_t[]){24, 22}, __LINE__);
  expect_row(1, 2, (const float[]){9, 6}, (const int64_t[]){10, 12}, __LINE__);
}

static void test_workspace(void) {
  int32_t lengths[2] = {4, 5};
  mtk_tensor lengths_t = vec(lengths, MTK_INT32, 2);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;
  const mtk_tensor input = tensor2d(scores, MTK_FLOAT32, 2, 5, 5, 1);
  const mtk_tensor values = tensor2d(out_values, MTK_FLOAT32, 2, 2, K_MAX, 1);
  const mtk_tensor indices = tensor2d(out_indices, MTK_INT64, 2, 2, K_MAX, 1);
  size_t bytes = 0;
  EXPECT_STATUS(mtk_topk_ragged_workspace_size(ctx, &input, 2, 1, 1, &params, MTK_INT64, &bytes),
                MTK_SUCCESS, NULL);
  CHECK(bytes > 0, "a CPU workspace holds at least its alignment slack");
  static unsigned char workspace[1 << 20];
  CHECK(bytes <= sizeof workspace, "workspace of %zu bytes", bytes);
  fill_outputs();
  EXPECT_STATUS(mtk_topk_ragged_with_workspace(ctx, &input, 2, 1, 1, &params, &values, &indices,
                                               workspace, bytes, NULL),
                MTK_SUCCESS, NULL);
  expect_row(0, 2, (const float[]){4, 3}, (const int64_t[]){2, 0}, __LINE__);
  expect_row(1, 2, (const float[]){9, 6}, (const int64_t[]){0, 2}, __LINE__);
  EXPECT_STATUS(mtk_topk_ragged_with_workspace(ctx, &input, 2, 1, 1, &params, &values, &indices,
                                               workspace, bytes - 1, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes");
}

static void test_errors(void) {
  int32_t lengths[2] = {5, 5};
  float lengths_f[2] = {5, 5};
  int32_t table[1][3] = {{0, 1, 2}};
  int64_t offsets[2] = {0, 0};
  mtk_tensor lengths_t = vec(lengths, MTK_INT32, 2);
  mtk_tensor lengths_float = vec(lengths_f, MTK_FLOAT32, 2);
  mtk_tensor lengths_short = vec(lengths, MTK_INT32, 1);
  mtk_tensor offsets_t = vec(offsets, MTK_INT64, 2);
  mtk_tensor table_t = tensor2d(table, MTK_INT32, 1, 3, 3, 1);
  mtk_tensor input_1d = vec(scores, MTK_FLOAT32, 5);
  const mtk_tensor input = tensor2d(scores, MTK_FLOAT32, 2, 5, 5, 1);
  const mtk_tensor values = tensor2d(out_values, MTK_FLOAT32, 2, 2, K_MAX, 1);
  const mtk_tensor values_i8 = tensor2d(out_values, MTK_INT8, 2, 2, K_MAX, 1);
  const mtk_tensor indices = tensor2d(out_indices, MTK_INT64, 2, 2, K_MAX, 1);
  const mtk_tensor indices_f = tensor2d(out_indices, MTK_FLOAT32, 2, 2, K_MAX, 1);
  const mtk_tensor indices_on_lengths = tensor2d(lengths, MTK_INT32, 1, 2, 2, 1);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;

#define EXPECT_RAGGED(k, p, v, i, status, needle)                                         \
  do {                                                                                    \
    fill_outputs();                                                                       \
    EXPECT_STATUS(mtk_topk_ragged(ctx, &input, (k), 1, 1, (p), (v), (i), NULL), (status), \
                  (needle));                                                              \
    CHECK(out_indices[0][0] == -777 && out_values[0][0] == -777.0f,                       \
          "a failed call wrote its outputs");                                             \
  } while (0)

  EXPECT_RAGGED(2, NULL, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params is NULL");
  mtk_ragged_params bad = params;
  bad.struct_size = 0;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.struct_size");
  bad = params;
  bad.lengths = NULL;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.lengths is NULL");
  bad.lengths = &lengths_float;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_UNSUPPORTED_DTYPE, "params.lengths.dtype");
  bad.lengths = &lengths_short;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.lengths.sizes[0]");
  bad = params;
  bad.starts = &lengths_float;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_UNSUPPORTED_DTYPE, "params.starts.dtype");
  EXPECT_RAGGED(-1, &params, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "k = -1");
  fill_outputs();
  EXPECT_STATUS(mtk_topk_ragged(ctx, &input_1d, 2, 1, 1, &params, &values, &indices, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "input.ndim");
  EXPECT_RAGGED(2, &params, &values_i8, &indices, MTK_ERROR_INVALID_ARGUMENT, "values.dtype");
  EXPECT_RAGGED(2, &params, &values, &indices_f, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype");
  EXPECT_RAGGED(3, &params, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "values.sizes[1]");
  EXPECT_RAGGED(2, &params, NULL, NULL, MTK_ERROR_INVALID_ARGUMENT, "indices is NULL");
  EXPECT_RAGGED(2, &params, NULL, &indices_on_lengths, MTK_ERROR_INVALID_ARGUMENT,
                "indices.sizes[0]");
  {
    int32_t both[2][2] = {{5, 5}, {0, 0}};
    mtk_tensor lengths_in_place = vec(both, MTK_INT32, 2);
    mtk_tensor indices_over = tensor2d(both, MTK_INT32, 2, 2, 2, 1);
    mtk_ragged_params overlapping = params;
    overlapping.lengths = &lengths_in_place;
    EXPECT_RAGGED(2, &overlapping, NULL, &indices_over, MTK_ERROR_INVALID_ARGUMENT,
                  "indices and params.lengths overlap");
  }

  bad = params;
  bad.transform = (mtk_index_transform)7;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.transform = 7");
  bad.transform = MTK_INDEX_TRANSFORM_NONE;
  bad.offsets = &offsets_t;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.offsets is set");
  bad.transform = MTK_INDEX_TRANSFORM_RAGGED;
  bad.offsets = NULL;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.offsets is NULL");
  bad.offsets = &lengths_short;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.offsets.sizes[0]");

  bad = params;
  bad.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.page_table is NULL");
  bad.page_table = &table_t;
  bad.page_size = 0;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.page_size = 0");
  bad.page_size = 1;  /* 3 pages of 1 cannot hold rows of 5 */
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.page_table.sizes[1]");
  bad.page_size = 2;  /* one batch for two rows, without row_to_batch */
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.page_table.sizes[0]");
  bad.row_to_batch = &lengths_float;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_UNSUPPORTED_DTYPE, "params.row_to_batch.dtype");
  bad.row_to_batch = &offsets_t;
  bad.page_table = &lengths_t;
  EXPECT_RAGGED(2, &bad, &values, &indices, MTK_ERROR_INVALID_ARGUMENT, "params.page_table.ndim");
  bad.page_table = &table_t;
  fill_outputs();
  EXPECT_STATUS(mtk_topk_ragged(ctx, &input, 2, 1, 1, &bad, &values, &indices, NULL), MTK_SUCCESS,
                NULL);
  CHECK(out_indices[0][0] == 4 && out_indices[1][0] == 0, "row_to_batch 0: %lld %lld",
        (long long)out_indices[0][0], (long long)out_indices[1][0]);
  EXPECT_STATUS(mtk_topk_ragged(NULL, &input, 2, 1, 1, &params, &values, &indices, NULL),
                MTK_ERROR_INVALID_CONTEXT, NULL);
  size_t bytes = 1;
  EXPECT_STATUS(mtk_topk_ragged_workspace_size(ctx, &input, 2, 1, 1, NULL, MTK_INT64, &bytes),
                MTK_ERROR_INVALID_ARGUMENT, "params is NULL");
  CHECK(bytes == 0, "a failed workspace query leaves 0");
}

int main(void) {
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) != MTK_SUCCESS) {
    fprintf(stderr, "no CPU context: %s\n", mtk_last_error_message());
    return 1;
  }
  test_windows();
  test_nan_strides_and_values_null();
  test_transforms();
  test_workspace();
  test_errors();
  mtk_context_destroy(ctx);
  if (failures != 0) {
    fprintf(stderr, "test_ragged: %d failures\n", failures);
    return 1;
  }
  printf("test_ragged: all checks passed\n");
  return 0;
}
