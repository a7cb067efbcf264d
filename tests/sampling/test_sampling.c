/*
 * The sampling entries of the C ABI from a C11 program, against results worked out by hand from
 * the contract (docs/CONTRACT.md, "Sampling filters"): the four operations, per-row tensors and
 * scalars, exact boundaries, greedy and rows without mass, the workspace pair, versioned
 * parameter structs, and every error with the argument its message names.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../c/abi_test_support.h"
#include "metaltopk.h"

/* Every matrix here is dense and row-major. */
static mtk_tensor mat(void* data, mtk_dtype dtype, int64_t rows, int64_t cols) {
  return tensor2d(data, dtype, rows, cols, cols, 1);
}

static mtk_context ctx;

static void test_mask_logits(void) {
  float logits[2][5] = {{1, NAN, 2, 3, 3}, {0, 0, 0, 0, 1}};
  float out[2][5];
  int32_t top_k[2] = {2, 4};
  const mtk_tensor in = mat(logits, MTK_FLOAT32, 2, 5), out_t = mat(out, MTK_FLOAT32, 2, 5);
  const mtk_tensor top_k_t = vec(top_k, MTK_INT32, 2);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_k = &top_k_t;
  EXPECT_STATUS(mtk_top_k_mask_logits(ctx, &in, &params, &out_t, NULL), MTK_SUCCESS, NULL);
  /* Row 0: NaN ranks first, then the first 3; row 1: 1, then the 0s at the lower indices. */
  CHECK(isinf(out[0][0]) && isnan(out[0][1]) && isinf(out[0][2]) && out[0][3] == 3 &&
            isinf(out[0][4]),
        "row 0: %g %g %g %g %g", out[0][0], out[0][1], out[0][2], out[0][3], out[0][4]);
  CHECK(out[1][0] == 0 && out[1][1] == 0 && out[1][2] == 0 && isinf(out[1][3]) && out[1][4] == 1,
        "row 1: %g %g %g %g %g", out[1][0], out[1][1], out[1][2], out[1][3], out[1][4]);
  /* NULL params: no filter, every logit copied. */
  EXPECT_STATUS(mtk_top_k_mask_logits(ctx, &in, NULL, &out_t, NULL), MTK_SUCCESS, NULL);
  CHECK(out[0][0] == 1 && isnan(out[0][1]) && out[1][4] == 1, "unfiltered copy");
}

static void test_renorm(void) {
  float probs[2][4] = {{0.5f, 0.25f, 0.25f, 0}, {1, NAN, -1, 3}};
  float out[2][4];
  const mtk_tensor in = mat(probs, MTK_FLOAT32, 2, 4), out_t = mat(out, MTK_FLOAT32, 2, 4);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_p_value = 0.75f;
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, &params, &out_t, NULL), MTK_SUCCESS, NULL);
  /* 0.5 + 0.25 reaches 0.75 exactly: two tokens. Row 1's masses are 1, 0, 0, 3: 3 alone is
   * 0.75 of 4. */
  CHECK(out[0][0] == (float)(2.0 / 3.0) && out[0][1] == (float)(1.0 / 3.0) && out[0][2] == 0 &&
            out[0][3] == 0,
        "top-p row 0: %a %a %a %a", out[0][0], out[0][1], out[0][2], out[0][3]);
  CHECK(out[1][0] == 0 && out[1][1] == 0 && out[1][2] == 0 && out[1][3] == 1,
        "top-p row 1: %a %a %a %a", out[1][0], out[1][1], out[1][2], out[1][3]);
  /* top-k 1 then min-p: only the largest is left. */
  params = (mtk_sampling_params)MTK_SAMPLING_PARAMS_INIT;
  params.top_k_value = 3;
  params.min_p_value = 0.5f;
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, &params, &out_t, NULL), MTK_SUCCESS, NULL);
  CHECK(out[0][0] == 0.5f && out[0][1] == 0.25f && out[0][2] == 0.25f && out[0][3] == 0,
        "top-k, min-p row 0: %a %a %a %a", out[0][0], out[0][1], out[0][2], out[0][3]);
  CHECK(out[1][0] == 0 && out[1][3] == 1, "top-k, min-p row 1: %a %a", out[1][0], out[1][3]);
}

static void test_sample(void) {
  float probs[3][2] = {{0.5f, 0.5f}, {0.5f, 0.5f}, {NAN, NAN}};
  float uniforms[3] = {0.5f, 0.49999997f, 0.25f};
  int32_t samples[3] = {-1, -1, -1};
  const mtk_tensor in = mat(probs, MTK_FLOAT32, 3, 2), u = vec(uniforms, MTK_FLOAT32, 3);
  const mtk_tensor samples_t = vec(samples, MTK_INT32, 3);
  EXPECT_STATUS(mtk_sample(ctx, &in, NULL, &u, &samples_t, NULL), MTK_SUCCESS, NULL);
  /* 0.5 does not exceed 0.5 * 1; a row without mass gives token 0. */
  CHECK(samples[0] == 1 && samples[1] == 0 && samples[2] == 0, "samples %d %d %d", samples[0],
        samples[1], samples[2]);
}

static void test_sample_from_logits(void) {
  float logits[3][4] = {{0, 0, 0, 100}, {1, NAN, 2, 3}, {-INFINITY, INFINITY, 0, INFINITY}};
  float temperature[3] = {1, 0, 1};
  float uniforms[3] = {0.5f, 0.5f, 0.75f};
  int64_t samples[3] = {-1, -1, -1};
  const mtk_tensor in = mat(logits, MTK_FLOAT32, 3, 4), u = vec(uniforms, MTK_FLOAT32, 3);
  const mtk_tensor t = vec(temperature, MTK_FLOAT32, 3), samples_t = vec(samples, MTK_INT64, 3);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.temperature = &t;
  EXPECT_STATUS(mtk_sample_from_logits(ctx, &in, &params, &u, &samples_t, NULL), MTK_SUCCESS,
                NULL);
  /* exp(-100) leaves token 3 almost all the mass; temperature 0 is greedy (NaN is the top);
   * two +inf share the mass: 0.75 of it falls in the second. */
  CHECK(samples[0] == 3 && samples[1] == 1 && samples[2] == 3, "samples %lld %lld %lld",
        (long long)samples[0], (long long)samples[1], (long long)samples[2]);
  /* bf16 logits [1, 3] at top_k 1: the 3. */
  uint16_t bf16[2] = {0x3f80, 0x4040};
  const mtk_tensor in16 = mat(bf16, MTK_BFLOAT16, 1, 2), u1 = vec(uniforms, MTK_FLOAT32, 1);
  const mtk_tensor one = vec(samples, MTK_INT64, 1);
  params = (mtk_sampling_params)MTK_SAMPLING_PARAMS_INIT;
  params.top_k_value = 1;
  EXPECT_STATUS(mtk_sample_from_logits(ctx, &in16, &params, &u1, &one, NULL), MTK_SUCCESS, NULL);
  CHECK(samples[0] == 1, "bf16 top-1: %lld", (long long)samples[0]);
}

static void test_workspace(void) {
  float probs[2][8];
  for (int i = 0; i < 16; ++i) probs[i / 8][i % 8] = (float)(i % 5) / 10.0f;
  float out_a[2][8], out_b[2][8];
  const mtk_tensor in = mat(probs, MTK_FLOAT32, 2, 8);
  const mtk_tensor a = mat(out_a, MTK_FLOAT32, 2, 8), b = mat(out_b, MTK_FLOAT32, 2, 8);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_p_value = 0.6f;
  size_t bytes = 0;
  EXPECT_STATUS(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_RENORM_PROBS, &in, &params,
                                            MTK_FLOAT32, &bytes),
                MTK_SUCCESS, NULL);
  CHECK(bytes > 0, "workspace bytes %zu", bytes);
  static unsigned char workspace[1 << 20];
  CHECK(bytes <= sizeof workspace, "workspace of %zu bytes", bytes);
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, &params, &a, NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_RENORM_PROBS, &in, &params, NULL,
                                            &b, workspace, bytes, NULL),
                MTK_SUCCESS, NULL);
  CHECK(memcmp(out_a, out_b, sizeof out_a) == 0, "with and without a workspace differ");
  EXPECT_STATUS(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_RENORM_PROBS, &in, &params, NULL,
                                            &b, workspace, bytes - 1, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes");
  EXPECT_STATUS(mtk_sampling_workspace_size(ctx, (mtk_sampling_op)9, &in, &params, MTK_FLOAT32,
                                            &bytes),
                MTK_ERROR_INVALID_ARGUMENT, "op = 9");
  EXPECT_STATUS(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &in, &params,
                                            (mtk_dtype)42, &bytes),
                MTK_ERROR_UNSUPPORTED_DTYPE, "output_dtype = 42");
  EXPECT_STATUS(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &in, &params, MTK_INT32,
                                            &bytes),
                MTK_SUCCESS, NULL);
}

static void test_versioned_params(void) {
  float probs[1][2] = {{0.25f, 0.75f}};
  float out[1][2];
  const mtk_tensor in = mat(probs, MTK_FLOAT32, 1, 2), out_t = mat(out, MTK_FLOAT32, 1, 2);
  /* An older caller's struct of struct_size alone: every member takes its default. */
  struct {
    size_t struct_size;
  } older = {sizeof older};
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, (const mtk_sampling_params*)(const void*)&older,
                                 &out_t, NULL),
                MTK_SUCCESS, NULL);
  CHECK(out[0][0] == 0.25f && out[0][1] == 0.75f, "defaults: %a %a", out[0][0], out[0][1]);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.struct_size = 0;
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, &params, &out_t, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "params.struct_size = 0");
  struct {
    mtk_sampling_params known;
    uint64_t later;
  } newer = {MTK_SAMPLING_PARAMS_INIT, 1};
  newer.known.struct_size = sizeof newer;
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, &newer.known, &out_t, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "is not zero");
  newer.later = 0;
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, &newer.known, &out_t, NULL), MTK_SUCCESS, NULL);
}

static void test_errors(void) {
  float probs[2][3] = {{0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}};
  float out[2][3];
  float uniforms[2] = {0.5f, 0.5f};
  float top_p3[3] = {0.5f, 0.5f, 0.5f};
  float float_k[2] = {1, 2};
  double wide_u[2] = {0.5, 0.5};
  int32_t samples[2];
  int16_t samples16[2];
  const mtk_tensor in = mat(probs, MTK_FLOAT32, 2, 3), out_t = mat(out, MTK_FLOAT32, 2, 3);
  const mtk_tensor u = vec(uniforms, MTK_FLOAT32, 2), s = vec(samples, MTK_INT32, 2);
  const mtk_tensor top_p_t = vec(top_p3, MTK_FLOAT32, 3), k_t = vec(float_k, MTK_FLOAT32, 2);
  const mtk_tensor u64 = vec(wide_u, MTK_FLOAT64, 2), s16 = vec(samples16, MTK_INT16, 2);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;

  params.top_p_value = 0.5f;
  EXPECT_STATUS(mtk_top_k_mask_logits(ctx, &in, &params, &out_t, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "params.top_p is set but mtk_top_k_mask_logits");
  params = (mtk_sampling_params)MTK_SAMPLING_PARAMS_INIT;
  params.temperature_value = 0.5f;
  EXPECT_STATUS(mtk_sample(ctx, &in, &params, &u, &s, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "params.temperature is set but mtk_sample");
  params = (mtk_sampling_params)MTK_SAMPLING_PARAMS_INIT;
  params.top_p = &top_p_t;
  EXPECT_STATUS(mtk_sample(ctx, &in, &params, &u, &s, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "params.top_p.sizes[0] = 3");
  params = (mtk_sampling_params)MTK_SAMPLING_PARAMS_INIT;
  params.top_k = &k_t;
  EXPECT_STATUS(mtk_sample(ctx, &in, &params, &u, &s, NULL), MTK_ERROR_UNSUPPORTED_DTYPE,
                "params.top_k.dtype = float32");
  EXPECT_STATUS(mtk_sample(ctx, &in, NULL, NULL, &s, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "uniforms is NULL");
  EXPECT_STATUS(mtk_sample(ctx, &in, NULL, &u64, &s, NULL), MTK_ERROR_UNSUPPORTED_DTYPE,
                "uniforms.dtype = float64");
  EXPECT_STATUS(mtk_sample(ctx, &in, NULL, &u, &s16, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "samples.dtype = int16");
  EXPECT_STATUS(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_RENORM_PROBS, &in, NULL, &u,
                                            &out_t, NULL, 0, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "uniforms is set but mtk_renorm_probs");
  const mtk_tensor half = mat(probs, MTK_FLOAT16, 2, 3);
  EXPECT_STATUS(mtk_renorm_probs(ctx, &half, NULL, &out_t, NULL), MTK_ERROR_UNSUPPORTED_DTYPE,
                "probs.dtype = float16");
  const mtk_tensor ints = mat(probs, MTK_INT32, 2, 3);
  EXPECT_STATUS(mtk_top_k_mask_logits(ctx, &ints, NULL, &out_t, NULL),
                MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype = int32");
  const mtk_tensor wrong_out = mat(samples, MTK_INT32, 2, 1);
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, NULL, &wrong_out, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "out.sizes[1] = 1");
  EXPECT_STATUS(mtk_renorm_probs(ctx, &in, NULL, &in, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "overlap");
  const mtk_tensor flat = vec(probs, MTK_FLOAT32, 6);
  EXPECT_STATUS(mtk_renorm_probs(ctx, &flat, NULL, &out_t, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "probs.ndim = 1");
  const mtk_tensor empty_rows = mat(probs, MTK_FLOAT32, 2, 0);
  EXPECT_STATUS(mtk_sample(ctx, &empty_rows, NULL, &u, &s, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "probs.sizes[1] = 0");
  const mtk_tensor empty_out = mat(out, MTK_FLOAT32, 2, 0);
  EXPECT_STATUS(mtk_renorm_probs(ctx, &empty_rows, NULL, &empty_out, NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_renorm_probs(NULL, &in, NULL, &out_t, NULL), MTK_ERROR_INVALID_CONTEXT, NULL);
}

/* The same call on one worker thread and on several gives the same bits: rows never share. */
static void test_thread_counts(void) {
  enum { ROWS = 48, N = 700 };
  static float logits[ROWS][N];
  static float uniforms[ROWS];
  static int64_t one[ROWS], many[ROWS];
  static float renorm_one[ROWS][N], renorm_many[ROWS][N];
  uint32_t state = 12345u;
  for (int r = 0; r < ROWS; ++r) {
    for (int i = 0; i < N; ++i) {
      state = state * 1664525u + 1013904223u;
      logits[r][i] = (float)(state >> 8) / 16777216.0f * 20.0f - 10.0f;
    }
    uniforms[r] = (float)r / ROWS;
  }
  mtk_context serial, parallel;
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &serial) != MTK_SUCCESS ||
      mtk_context_create(MTK_BACKEND_CPU, 0, &parallel) != MTK_SUCCESS) {
    CHECK(0, "contexts: %s", mtk_last_error_message());
    return;
  }
  EXPECT_STATUS(mtk_context_set_num_threads(serial, 1), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_context_set_num_threads(parallel, 5), MTK_SUCCESS, NULL);
  const mtk_tensor in = mat(logits, MTK_FLOAT32, ROWS, N), u = vec(uniforms, MTK_FLOAT32, ROWS);
  const mtk_tensor s1 = vec(one, MTK_INT64, ROWS), s2 = vec(many, MTK_INT64, ROWS);
  const mtk_tensor r1 = mat(renorm_one, MTK_FLOAT32, ROWS, N);
  const mtk_tensor r2 = mat(renorm_many, MTK_FLOAT32, ROWS, N);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_k_value = 300;
  params.top_p_value = 0.8f;
  params.temperature_value = 1.5f;
  EXPECT_STATUS(mtk_sample_from_logits(serial, &in, &params, &u, &s1, NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_sample_from_logits(parallel, &in, &params, &u, &s2, NULL), MTK_SUCCESS, NULL);
  CHECK(memcmp(one, many, sizeof one) == 0, "samples differ between 1 and 5 threads");
  /* The logits in [-10, 10) read as probabilities: negatives have no mass. */
  params.temperature_value = 1.0f;
  EXPECT_STATUS(mtk_renorm_probs(serial, &in, &params, &r1, NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_renorm_probs(parallel, &in, &params, &r2, NULL), MTK_SUCCESS, NULL);
  CHECK(memcmp(renorm_one, renorm_many, sizeof renorm_one) == 0,
        "renormalised probabilities differ between 1 and 5 threads");
  mtk_context_destroy(serial);
  mtk_context_destroy(parallel);
}

int main(void) {
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) != MTK_SUCCESS) {
    fprintf(stderr, "no CPU context: %s\n", mtk_last_error_message());
    return 1;
  }
  test_mask_logits();
  test_renorm();
  test_sample();
  test_sample_from_logits();
  test_workspace();
  test_versioned_params();
  test_errors();
  test_thread_counts();
  mtk_context_destroy(ctx);
  if (failures != 0) {
    fprintf(stderr, "test_sampling: %d failures\n", failures);
    return 1;
  }
  printf("test_sampling: all passed\n");
  return 0;
}
