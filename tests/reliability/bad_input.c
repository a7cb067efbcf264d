/*
 * Every malformed call of the C ABI: each must return its documented status, name the offending
 * argument in mtk_last_error_message(), and leave the caller's outputs untouched. Descriptors
 * that must be rejected before any memory is read carry fabricated addresses on purpose: if
 * validation ever let one through, the test would crash instead of passing.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metaltopk.h"
#include "metaltopk_testing.h"

static int checks, failures;

static void expect(int line, const char* call, mtk_status got, mtk_status want,
                   const char* message_part) {
  const char* message = mtk_last_error_message();
  ++checks;
  if (got != want || (message_part != NULL && strstr(message, message_part) == NULL)) {
    ++failures;
    fprintf(stderr, "bad_input.c:%d: %s\n  status %d (%s), expected %d (%s)\n  message \"%s\"",
            line, call, (int)got, mtk_status_string(got), (int)want, mtk_status_string(want),
            message);
    if (message_part != NULL) fprintf(stderr, ", expected to contain \"%s\"", message_part);
    fputc('\n', stderr);
  }
}

static void expect_true(int line, const char* what, int ok) {
  ++checks;
  if (!ok) {
    ++failures;
    fprintf(stderr, "bad_input.c:%d: expected %s\n", line, what);
  }
}

#define EXPECT(call, status, part) expect(__LINE__, #call, (call), (status), (part))
#define EXPECT_OK(call) expect(__LINE__, #call, (call), MTK_SUCCESS, NULL)
#define EXPECT_TRUE(cond) expect_true(__LINE__, #cond, (cond))

/* A contiguous row-major descriptor. Strides wrap (unsigned) for sizes whose product overflows:
 * such descriptors exist only to be rejected. */
static mtk_tensor tensor(void* data, mtk_dtype dtype, int32_t ndim, const int64_t* sizes) {
  mtk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  uint64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.sizes[d] = sizes[d];
    t.strides[d] = (int64_t)stride;
    stride *= sizes[d] > 0 ? (uint64_t)sizes[d] : 1u;
  }
  return t;
}

static mtk_tensor tensor1(void* data, mtk_dtype dtype, int64_t n) {
  return tensor(data, dtype, 1, &n);
}

static mtk_tensor tensor2(void* data, mtk_dtype dtype, int64_t rows, int64_t cols) {
  const int64_t sizes[2] = {rows, cols};
  return tensor(data, dtype, 2, sizes);
}

/* An address no test may ever dereference; distinct, far apart and non-NULL. */
static void* fake(uintptr_t slot) { return (void*)(uintptr_t)(0x100000000000ull + slot * 0x10000000000ull); }

/* Sets an enum field to a value outside its enumeration without a conversion warning. */
#define SET_RAW(field, value)            \
  do {                                   \
    int raw_ = (value);                  \
    memcpy(&(field), &raw_, sizeof raw_); \
  } while (0)

enum { N = 8, K = 3 };
static float input_data[4 * N];
static float values_data[4 * K];
static int64_t indices_data[4 * K];
/* Outputs that overlap each other are carved out of this one array, both wholly inside it: a
 * tensor that ran past the end of its own array would reach whatever the compiler placed next
 * (the input, under gcc), and the library would rightly name that overlap instead. */
static int64_t overlapping_outputs[4 * K + 1];
_Static_assert(sizeof overlapping_outputs >= sizeof values_data &&
                   sizeof overlapping_outputs >= sizeof(int64_t) + sizeof indices_data,
               "both overlapping outputs fit inside overlapping_outputs");
static const unsigned char kSentinel = 0xA5;

static void fill_sentinels(void) {
  memset(values_data, kSentinel, sizeof values_data);
  memset(indices_data, kSentinel, sizeof indices_data);
  memset(overlapping_outputs, kSentinel, sizeof overlapping_outputs);
}

static int bytes_are_sentinels(const void* data, size_t bytes) {
  const unsigned char* b = (const unsigned char*)data;
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != kSentinel) return 0;
  return 1;
}

static int outputs_untouched(void) {
  return bytes_are_sentinels(values_data, sizeof values_data) &&
         bytes_are_sentinels(indices_data, sizeof indices_data) &&
         bytes_are_sentinels(overlapping_outputs, sizeof overlapping_outputs);
}

/* One malformed mtk_topk call at a time, each starting from the valid call below. */
typedef struct {
  mtk_tensor input, values, indices;
  int64_t k, dim;
} TopkCall;

static TopkCall valid_call(void) {
  TopkCall c;
  c.input = tensor2(input_data, MTK_FLOAT32, 4, N);
  c.values = tensor2(values_data, MTK_FLOAT32, 4, K);
  c.indices = tensor2(indices_data, MTK_INT64, 4, K);
  c.k = K;
  c.dim = 1;
  return c;
}

static mtk_context ctx;

static mtk_status run_topk(const TopkCall* c) {
  fill_sentinels();
  return mtk_topk(ctx, &c->input, c->k, c->dim, 1, 1, &c->values, &c->indices, NULL);
}

#define EXPECT_TOPK(call_ptr, status, part)                                  \
  do {                                                                       \
    expect(__LINE__, "mtk_topk(" #call_ptr ")", run_topk(call_ptr), (status), (part)); \
    EXPECT_TRUE(outputs_untouched());                                        \
  } while (0)

static void test_topk_descriptors(void) {
  TopkCall c = valid_call();
  for (int i = 0; i < 4 * N; ++i) input_data[i] = (float)((i * 7) % 11);
  EXPECT_OK(run_topk(&c));
  EXPECT_TRUE(values_data[0] == 10.0f && indices_data[0] == 3);

  /* NULL values asks for indices only (docs/CONTRACT.md, "Ragged rows", rule 6). */
  indices_data[0] = -1;
  EXPECT_OK(mtk_topk(ctx, &c.input, K, 1, 1, 1, NULL, &c.indices, NULL));
  EXPECT_TRUE(indices_data[0] == 3);

  /* NULL descriptors and data. */
  fill_sentinels();
  EXPECT(mtk_topk(ctx, NULL, K, 1, 1, 1, &c.values, &c.indices, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "input is NULL");
  EXPECT(mtk_topk(ctx, &c.input, K, 1, 1, 1, &c.values, NULL, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "indices is NULL");
  c = valid_call(); c.input.data = NULL;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input.data is NULL");
  c = valid_call(); c.values.data = NULL;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values.data is NULL");
  c = valid_call(); c.indices.data = NULL;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.data is NULL");

  /* Rank out of range, in each descriptor. */
  c = valid_call(); c.input.ndim = -1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input.ndim = -1");
  c = valid_call(); c.input.ndim = MTK_MAX_NDIM + 1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input.ndim = 9");
  c = valid_call(); c.values.ndim = 100;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values.ndim = 100");
  c = valid_call(); c.indices.ndim = INT32_MIN;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.ndim = -2147483648");
  c = valid_call(); c.values.ndim = 1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values.ndim = 1 does not match");

  /* Negative sizes. */
  c = valid_call(); c.input.sizes[0] = -4;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input.sizes[0] = -4 is negative");
  c = valid_call(); c.values.sizes[1] = -1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values.sizes[1] = -1 is negative");
  c = valid_call(); c.indices.sizes[0] = INT64_MIN;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.sizes[0]");

  /* Size and stride products overflowing int64 (fabricated addresses: never read). */
  {
    const int64_t sizes[3] = {INT64_C(1) << 32, INT64_C(1) << 32, 2};
    c = valid_call();
    c.input = tensor(fake(1), MTK_FLOAT32, 3, sizes);
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: the product of sizes overflows int64");
  }
  c = valid_call(); c.input.data = fake(1); c.input.strides[0] = INT64_MAX / 2;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: strides[0]");
  c = valid_call(); c.input.data = fake(1);
  c.input.sizes[0] = 3; c.input.strides[0] = INT64_MAX / 2 - 4;
  c.input.strides[1] = INT64_MAX / 8;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: the element extent overflows int64");
  c = valid_call(); c.input.data = fake(1); c.input.strides[0] = INT64_MAX / 8;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: the byte extent overflows int64");
  c = valid_call(); c.input.data = fake(1); c.input.strides[0] = INT64_MIN / 2;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: strides[0]");
  c = valid_call(); c.values.data = fake(2); c.values.strides[1] = INT64_MAX;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values: strides[1]");
  c = valid_call(); c.input.data = (void*)(UINTPTR_MAX - 64);
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: the data address plus its extent wraps");
  c = valid_call(); c.input.data = (void*)(uintptr_t)64; c.input.strides[0] = -N;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "input: the data address plus its extent wraps");

  /* dim and k out of range. */
  c = valid_call(); c.dim = 2;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_DIM, "dim = 2 is out of range");
  c = valid_call(); c.dim = -3;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_DIM, "dim = -3 is out of range");
  c = valid_call(); c.dim = INT64_MIN;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_DIM, "dim = -9223372036854775808");
  c = valid_call(); c.dim = INT64_MAX;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_DIM, "dim = 9223372036854775807");
  c = valid_call(); c.k = -1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "k = -1 is out of range");
  c = valid_call(); c.k = N + 1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "k = 9 is out of range");
  c = valid_call(); c.k = INT64_MIN;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "k = -9223372036854775808");
  {
    /* 0-d input: dim in {0, -1}, k in {0, 1}. */
    c = valid_call();
    c.input = tensor(input_data, MTK_FLOAT32, 0, NULL);
    c.values = tensor(values_data, MTK_FLOAT32, 0, NULL);
    c.indices = tensor(indices_data, MTK_INT64, 0, NULL);
    c.k = 2; c.dim = 0;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "k = 2 is out of range for a dimension of size 1");
    c.k = 1; c.dim = 1;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_DIM, "dim = 1 is out of range for a 0-d input");
    c.dim = -2;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_DIM, "dim = -2");
  }
  {
    /* k = 1 on an empty dimension. */
    c = valid_call();
    c.input = tensor2(input_data, MTK_FLOAT32, 3, 0);
    c.values = tensor2(values_data, MTK_FLOAT32, 3, 1);
    c.indices = tensor2(indices_data, MTK_INT64, 3, 1);
    c.k = 1;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "k = 1 is out of range for a dimension of size 0");
  }

  /* Unknown enum values and wrong output dtypes. */
  c = valid_call(); SET_RAW(c.input.dtype, 42);
  EXPECT_TOPK(&c, MTK_ERROR_UNSUPPORTED_DTYPE, "input.dtype = 42 is not a known mtk_dtype");
  c = valid_call(); SET_RAW(c.input.dtype, -1);
  EXPECT_TOPK(&c, MTK_ERROR_UNSUPPORTED_DTYPE, "input.dtype = -1");
  c = valid_call(); SET_RAW(c.values.dtype, 9);
  EXPECT_TOPK(&c, MTK_ERROR_UNSUPPORTED_DTYPE, "values.dtype = 9");
  c = valid_call(); SET_RAW(c.indices.dtype, 1000);
  EXPECT_TOPK(&c, MTK_ERROR_UNSUPPORTED_DTYPE, "indices.dtype = 1000");
  c = valid_call(); c.values.dtype = MTK_FLOAT64;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values.dtype = float64 does not match input.dtype");
  c = valid_call(); c.indices.dtype = MTK_FLOAT32;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = float32 must be int64 or int32");
  c = valid_call(); c.indices.dtype = MTK_UINT8;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = uint8");

  /* Output shapes. */
  c = valid_call(); c.values.sizes[1] = K + 1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values.sizes[1] = 4 does not match the expected 3");
  c = valid_call(); c.indices.sizes[0] = 3;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.sizes[0] = 3 does not match the expected 4");
  c = valid_call(); c.indices.ndim = 3; c.indices.sizes[2] = 1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.ndim = 3 does not match the expected 2");

  /* Outputs overlapping the input, each other or themselves. */
  c = valid_call(); c.values.data = input_data + 2;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values and input overlap");
  c = valid_call(); c.indices.data = input_data;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices and input overlap");
  /* values (48 bytes) at the start of one array, indices (96 bytes) one int64 in: each lies
   * inside that array, so they overlap each other and nothing else. */
  c = valid_call(); c.values.data = overlapping_outputs; c.indices.data = overlapping_outputs + 1;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values and indices overlap");
  c = valid_call(); c.values.strides[0] = 0;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values has overlapping elements");
  c = valid_call(); c.indices.strides[0] = 2; /* rows of 3 elements two apart */
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices has overlapping elements");
  c = valid_call(); c.values.strides[1] = -1; c.values.strides[0] = 1;
  c.values.data = values_data + 2;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "values has overlapping elements");
  /* Strides whose reaches each fit int64 but whose sum does not: the self-overlap check must
   * not overflow (UBSan watches) before the later span checks reject the call. */
  c = valid_call(); c.values.data = fake(2); c.values.strides[0] = INT64_MAX / 3;
  c.values.strides[1] = -10; c.indices.data = input_data;
  c.input.dtype = c.values.dtype = MTK_INT8;
  EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "overlap in memory");
  /* Outputs may overlap the input only when one of them is empty: k = 0 writes nothing. */
  c = valid_call(); c.k = 0; c.values.sizes[1] = 0; c.indices.sizes[1] = 0;
  c.values.data = input_data; c.indices.data = input_data;
  EXPECT_TOPK(&c, MTK_SUCCESS, NULL);

  /* int32 indices need rows shorter than 2^31: descriptors only, nothing is ever read. */
  {
    const int64_t row = INT64_C(1) << 31;
    c = valid_call();
    c.input = tensor2(fake(1), MTK_INT8, 1, row);
    c.values = tensor2(fake(2), MTK_INT8, 1, 1);
    c.indices = tensor2(fake(3), MTK_INT32, 1, 1);
    c.k = 1;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = int32 cannot be used for a "
                                                "dimension of size 2147483648");
    c.input.sizes[1] = INT64_C(3) << 40;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = int32");
    /* The same size along dim 0, with int32 indices and dim = 0. */
    c.input = tensor2(fake(1), MTK_INT8, row + 5, 2);
    c.values = tensor2(fake(2), MTK_INT8, 1, 2);
    c.indices = tensor2(fake(3), MTK_INT32, 1, 2);
    c.dim = 0;
    EXPECT_TOPK(&c, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = int32");
  }
}

static void test_topk_variants(void) {
  const TopkCall c = valid_call();
  size_t bytes = 12345;

  /* mtk_topk_workspace_size */
  EXPECT(mtk_topk_workspace_size(ctx, &c.input, K, 1, 1, 1, MTK_INT64, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "bytes is NULL");
  EXPECT(mtk_topk_workspace_size(ctx, NULL, K, 1, 1, 1, MTK_INT64, &bytes),
         MTK_ERROR_INVALID_ARGUMENT, "input is NULL");
  EXPECT_TRUE(bytes == 0);
  EXPECT(mtk_topk_workspace_size(ctx, &c.input, N + 1, 1, 1, 1, MTK_INT64, &bytes),
         MTK_ERROR_INVALID_ARGUMENT, "k = 9");
  EXPECT(mtk_topk_workspace_size(ctx, &c.input, K, 5, 1, 1, MTK_INT64, &bytes),
         MTK_ERROR_INVALID_DIM, "dim = 5");
  EXPECT(mtk_topk_workspace_size(ctx, &c.input, K, 1, 1, 1, MTK_FLOAT32, &bytes),
         MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = float32");
  EXPECT(mtk_topk_workspace_size(ctx, &c.input, K, 1, 1, 1, (mtk_dtype)77, &bytes),
         MTK_ERROR_UNSUPPORTED_DTYPE, "indices.dtype = 77");
  EXPECT_OK(mtk_topk_workspace_size(ctx, &c.input, K, 1, 1, 1, MTK_INT64, &bytes));

  /* mtk_topk_with_workspace: the descriptor checks are shared; the workspace is its own. */
  fill_sentinels();
  EXPECT(mtk_topk_with_workspace(ctx, &c.input, N + 1, 1, 1, 1, &c.values, &c.indices, NULL, 0,
                                 NULL),
         MTK_ERROR_INVALID_ARGUMENT, "k = 9");
  EXPECT(mtk_topk_with_workspace(ctx, &c.input, K, 1, 1, 1, &c.values, NULL, NULL, 0, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "indices is NULL");
  if (bytes > 0) {
    EXPECT(mtk_topk_with_workspace(ctx, &c.input, K, 1, 1, 1, &c.values, &c.indices, fake(4),
                                   bytes - 1, NULL),
           MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes");
    EXPECT(mtk_topk_with_workspace(ctx, &c.input, K, 1, 1, 1, &c.values, &c.indices, NULL, bytes,
                                   NULL),
           MTK_ERROR_INVALID_ARGUMENT, "workspace is NULL");
  }
  EXPECT_TRUE(outputs_untouched());

  /* mtk_topk_alloc: on failure both outputs' data are NULL. */
  mtk_tensor values_out, indices_out;
#define RESET_OUTS() (values_out.data = fake(5), indices_out.data = fake(6))
#define EXPECT_OUTS_NULL() EXPECT_TRUE(values_out.data == NULL && indices_out.data == NULL)
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, &c.input, K, 1, 1, 1, MTK_INT64, NULL, &indices_out, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "values_out is NULL");
  EXPECT_TRUE(indices_out.data == NULL);
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, &c.input, K, 1, 1, 1, MTK_INT64, &values_out, NULL, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "indices_out is NULL");
  EXPECT_TRUE(values_out.data == NULL);
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, NULL, K, 1, 1, 1, MTK_INT64, &values_out, &indices_out, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "input is NULL");
  EXPECT_OUTS_NULL();
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, &c.input, -2, 1, 1, 1, MTK_INT64, &values_out, &indices_out, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "k = -2");
  EXPECT_OUTS_NULL();
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, &c.input, K, -3, 1, 1, MTK_INT64, &values_out, &indices_out, NULL),
         MTK_ERROR_INVALID_DIM, "dim = -3");
  EXPECT_OUTS_NULL();
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, &c.input, K, 1, 1, 1, MTK_INT16, &values_out, &indices_out, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = int16");
  EXPECT_OUTS_NULL();
  RESET_OUTS();
  EXPECT(mtk_topk_alloc(ctx, &c.input, K, 1, 1, 1, (mtk_dtype)-7, &values_out, &indices_out, NULL),
         MTK_ERROR_UNSUPPORTED_DTYPE, "indices.dtype = -7");
  EXPECT_OUTS_NULL();
  {
    mtk_tensor bad = c.input;
    SET_RAW(bad.dtype, 31);
    RESET_OUTS();
    EXPECT(mtk_topk_alloc(ctx, &bad, K, 1, 1, 1, MTK_INT64, &values_out, &indices_out, NULL),
           MTK_ERROR_UNSUPPORTED_DTYPE, "input.dtype = 31");
    EXPECT_OUTS_NULL();
    /* Outputs whose byte size overflows: zero-stride input of 2^61 elements, never read. */
    const int64_t huge = INT64_C(1) << 61;
    bad = tensor1(fake(1), MTK_FLOAT64, huge);
    bad.strides[0] = 0;
    RESET_OUTS();
    EXPECT(mtk_topk_alloc(ctx, &bad, huge, 0, 1, 1, MTK_INT64, &values_out, &indices_out, NULL),
           MTK_ERROR_INVALID_ARGUMENT, "values: the byte extent overflows int64");
    EXPECT_OUTS_NULL();
    bad = tensor1(fake(1), MTK_INT8, INT64_C(1) << 31);
    RESET_OUTS();
    EXPECT(mtk_topk_alloc(ctx, &bad, 1, 0, 1, 1, MTK_INT32, &values_out, &indices_out, NULL),
           MTK_ERROR_INVALID_ARGUMENT, "indices.dtype = int32 cannot be used");
    EXPECT_OUTS_NULL();
  }
  /* k = 0: empty outputs, whose contiguous strides hold zeros, are not self-overlapping. */
  EXPECT_OK(mtk_topk_alloc(ctx, &c.input, 0, 1, 1, 1, MTK_INT64, &values_out, &indices_out, NULL));
  EXPECT_TRUE(values_out.sizes[1] == 0 && indices_out.sizes[1] == 0);
  EXPECT_OK(mtk_tensor_free(ctx, &values_out));
  EXPECT_OK(mtk_tensor_free(ctx, &indices_out));
  EXPECT_OK(mtk_topk_alloc(ctx, &c.input, K, 1, 1, 1, MTK_INT64, &values_out, &indices_out, NULL));
  EXPECT_TRUE(values_out.data != NULL && indices_out.data != NULL);

  /* mtk_tensor_free / mtk_free of foreign, freed and NULL pointers. */
  EXPECT(mtk_tensor_free(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "tensor is NULL");
  mtk_tensor foreign = c.values;
  EXPECT(mtk_tensor_free(ctx, &foreign), MTK_ERROR_INVALID_ARGUMENT, "was not allocated by this context");
  EXPECT_TRUE(foreign.data == c.values.data);
  void* freed = values_out.data;
  EXPECT_OK(mtk_tensor_free(ctx, &values_out));
  EXPECT_TRUE(values_out.data == NULL);
  EXPECT_OK(mtk_tensor_free(ctx, &values_out)); /* NULL data is ignored */
  EXPECT(mtk_free(ctx, freed), MTK_ERROR_INVALID_ARGUMENT, "was not allocated by this context");
  EXPECT(mtk_free(ctx, (char*)indices_out.data + 8), MTK_ERROR_INVALID_ARGUMENT,
         "was not allocated by this context");
  EXPECT_OK(mtk_tensor_free(ctx, &indices_out));
#undef RESET_OUTS
#undef EXPECT_OUTS_NULL
}

static void test_moe_route(void) {
  enum { T = 4, E = 16, KE = 4 };
  static float logits_data[T * E], bias_data[E], weights_data[T * KE];
  static int32_t ids_data[T * KE];
  /* weights and ids that overlap each other come out of this one array, both wholly inside it
   * (see overlapping_outputs above: past its end, ids could reach the logits). */
  static float overlapping_route[T * KE + 1];
  for (int i = 0; i < T * E; ++i) logits_data[i] = (float)((i * 5) % 13) * 0.25f;
  const mtk_tensor logits = tensor2(logits_data, MTK_FLOAT32, T, E);
  const mtk_tensor weights = tensor2(weights_data, MTK_FLOAT32, T, KE);
  const mtk_tensor ids = tensor2(ids_data, MTK_INT32, T, KE);
  mtk_tensor bias = tensor1(bias_data, MTK_FLOAT32, E);
  mtk_router_params p = MTK_ROUTER_PARAMS_INIT;
  p.k = KE;
  p.renormalize = 1;
  EXPECT_OK(mtk_moe_route(ctx, &logits, &p, &weights, &ids, NULL));

  mtk_tensor l, w, i;
  mtk_router_params q;
  /* &q, or a struct of another size that a case builds. */
  const mtk_router_params* qp;
#define ROUTE(status, part)                                                            \
  do {                                                                                 \
    memset(weights_data, kSentinel, sizeof weights_data);                             \
    memset(ids_data, kSentinel, sizeof ids_data);                                     \
    memset(overlapping_route, kSentinel, sizeof overlapping_route);                   \
    expect(__LINE__, "mtk_moe_route", mtk_moe_route(ctx, &l, qp, &w, &i, NULL), (status), (part)); \
    const unsigned char* wb = (const unsigned char*)weights_data;                     \
    const unsigned char* ib = (const unsigned char*)ids_data;                         \
    int untouched = 1;                                                                 \
    for (size_t b = 0; b < sizeof weights_data; ++b) untouched &= wb[b] == kSentinel; \
    for (size_t b = 0; b < sizeof ids_data; ++b) untouched &= ib[b] == kSentinel;     \
    untouched &= bytes_are_sentinels(overlapping_route, sizeof overlapping_route);    \
    EXPECT_TRUE(untouched);                                                            \
  } while (0)
#define RESET() (l = logits, w = weights, i = ids, q = p, qp = &q)

  EXPECT(mtk_moe_route(ctx, NULL, &p, &weights, &ids, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "logits is NULL");
  EXPECT(mtk_moe_route(ctx, &logits, NULL, &weights, &ids, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "params is NULL");
  EXPECT(mtk_moe_route(ctx, &logits, &p, NULL, &ids, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "weights is NULL");
  EXPECT(mtk_moe_route(ctx, &logits, &p, &weights, NULL, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "ids is NULL");
  /* The versioned struct's size (metaltopk.h's opening comment). */
  RESET(); q.struct_size = 0;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.struct_size = 0 was never set");
  RESET(); q.struct_size = sizeof(size_t);
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.struct_size = 8 cannot hold the 16 bytes");
  RESET(); q.struct_size = sizeof q - 4;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "is not a multiple of 8, the alignment of mtk_router_params");
  RESET(); q.struct_size = SIZE_MAX;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "is not a multiple of 8");
  RESET(); q.struct_size = 1032;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.struct_size = 1032 exceeds 1024 bytes");
  struct {
    mtk_router_params params;
    uint32_t future_members[2];
  } newer;
  memset(&newer, 0, sizeof newer);
  newer.params = p;
  newer.params.struct_size = sizeof newer;
  newer.future_members[1] = 1;
  RESET(); qp = &newer.params;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.struct_size = 64 is larger than the mtk_router_params");
  RESET(); qp = &newer.params;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "knows, and its byte 60 is not zero");
  newer.future_members[1] = 0;
  EXPECT_OK(mtk_moe_route(ctx, &logits, &newer.params, &weights, &ids, NULL));
  /* An older caller's struct, exactly its size on the heap: ASan sees a read past it. */
  const size_t older_size = 16;
  const int64_t older_k = KE;
  unsigned char* older = malloc(older_size);
  memcpy(older, &older_size, sizeof older_size);
  memcpy(older + sizeof older_size, &older_k, sizeof older_k);
  EXPECT_OK(mtk_moe_route(ctx, &logits, (const mtk_router_params*)(void*)older, &weights, &ids,
                          NULL));
  free(older);
  RESET(); l.ndim = 3; l.sizes[2] = 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "logits.ndim = 3");
  RESET(); l.ndim = 9;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "logits.ndim = 9");
  RESET(); l.sizes[0] = -1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "logits.sizes[0] = -1");
  RESET(); l.data = NULL;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "logits.data is NULL");
  RESET(); l.dtype = MTK_INT32;
  ROUTE(MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype = int32");
  RESET(); l.dtype = MTK_FLOAT64;
  ROUTE(MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype = float64");
  RESET(); SET_RAW(l.dtype, 12345);
  ROUTE(MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype = 12345");
  RESET(); l.sizes[1] = 0; l.data = fake(1);
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "logits.sizes[1] = 0");
  RESET(); q.k = 0;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.k = 0");
  RESET(); q.k = E + 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.k = 17");
  RESET(); SET_RAW(q.scoring, 3);
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.scoring = 3");
  RESET(); SET_RAW(q.scoring, -100);
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.scoring = -100");
  RESET(); q.n_group = -2;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.n_group = -2");
  RESET(); q.n_group = 3; q.topk_group = 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.n_group = 3 does not divide 16");
  RESET(); q.n_group = 4; q.topk_group = 0;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.topk_group = 0");
  RESET(); q.n_group = 4; q.topk_group = 5;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.topk_group = 5");
  RESET(); q.n_group = 8; q.topk_group = 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.k = 4 exceeds the 2 experts");
  RESET(); bias.sizes[0] = E - 1; q.bias = &bias;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.bias must have shape [16]");
  bias = tensor1(bias_data, MTK_FLOAT16, E);
  RESET(); q.bias = &bias;
  ROUTE(MTK_ERROR_UNSUPPORTED_DTYPE, "params.bias.dtype = float16");
  bias = tensor1(NULL, MTK_FLOAT32, E);
  RESET(); q.bias = &bias;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "params.bias.data is NULL");
  bias = tensor1(bias_data, MTK_FLOAT32, E);
  RESET(); w.sizes[1] = KE + 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "weights.sizes[1] = 5");
  RESET(); i.sizes[0] = T + 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "ids.sizes[0] = 5");
  RESET(); w.dtype = MTK_FLOAT16;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "weights.dtype = float16 must be float32");
  RESET(); i.dtype = MTK_FLOAT32;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "ids.dtype = float32 must be int64 or int32");
  RESET(); SET_RAW(i.dtype, 99);
  ROUTE(MTK_ERROR_UNSUPPORTED_DTYPE, "ids.dtype = 99");
  RESET(); w.data = logits_data + 3;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "weights and logits overlap");
  RESET(); i.data = logits_data;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "ids and logits overlap");
  RESET(); w.data = overlapping_route; i.data = overlapping_route + 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "weights and ids overlap");
  RESET(); q.bias = &bias; w.data = bias_data;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "weights and params.bias overlap");
  RESET(); q.bias = &bias; i.data = bias_data;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "ids and params.bias overlap");
  RESET(); w.strides[0] = 1;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "weights has overlapping elements");
  RESET(); i.strides[1] = 0;
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "ids has overlapping elements");
  RESET(); l.strides[0] = INT64_MAX; l.data = fake(1);
  ROUTE(MTK_ERROR_INVALID_ARGUMENT, "logits: strides[0]");
#undef ROUTE
#undef RESET
}

/* The sampling entries (docs/CONTRACT.md, "Sampling filters"), each through mtk_sample or
 * mtk_renorm_probs or mtk_top_k_mask_logits or their workspace variant. Per-row tensors and
 * uniforms that must be rejected before they are read carry fabricated addresses. */
static void test_sampling(void) {
  enum { R = 4, V = 16 };
  static float probs_data[R * V], uniforms_data[R], out_data[R * V];
  static int64_t samples_data[R];
  static int32_t top_k_data[R];
  for (int i = 0; i < R * V; ++i) probs_data[i] = (float)((i * 7) % 11) / 64.0f;
  for (int r = 0; r < R; ++r) uniforms_data[r] = 0.25f * (float)r, top_k_data[r] = r + 1;
  const mtk_tensor probs = tensor2(probs_data, MTK_FLOAT32, R, V);
  const mtk_tensor uniforms = tensor1(uniforms_data, MTK_FLOAT32, R);
  const mtk_tensor samples = tensor1(samples_data, MTK_INT64, R);
  const mtk_tensor out = tensor2(out_data, MTK_FLOAT32, R, V);
  const mtk_tensor top_k = tensor1(top_k_data, MTK_INT32, R);
  mtk_sampling_params p = MTK_SAMPLING_PARAMS_INIT;
  p.top_k = &top_k;
  p.top_p_value = 0.9f;
  EXPECT_OK(mtk_sample(ctx, &probs, &p, &uniforms, &samples, NULL));
  EXPECT_OK(mtk_renorm_probs(ctx, &probs, &p, &out, NULL));

  mtk_tensor in, u, s, o, per_row;
  mtk_sampling_params q;
#define UNTOUCHED()                                                                 \
  EXPECT_TRUE(bytes_are_sentinels(samples_data, sizeof samples_data) &&             \
              bytes_are_sentinels(out_data, sizeof out_data))
#define SAMPLE(status, part)                                                         \
  do {                                                                               \
    memset(samples_data, kSentinel, sizeof samples_data);                            \
    memset(out_data, kSentinel, sizeof out_data);                                    \
    expect(__LINE__, "mtk_sample", mtk_sample(ctx, &in, &q, &u, &s, NULL), (status), (part)); \
    UNTOUCHED();                                                                     \
  } while (0)
#define RENORM(status, part)                                                         \
  do {                                                                               \
    memset(samples_data, kSentinel, sizeof samples_data);                            \
    memset(out_data, kSentinel, sizeof out_data);                                    \
    expect(__LINE__, "mtk_renorm_probs", mtk_renorm_probs(ctx, &in, &q, &o, NULL), (status), \
           (part));                                                                  \
    UNTOUCHED();                                                                     \
  } while (0)
#define RESET() (in = probs, u = uniforms, s = samples, o = out, q = p)

  EXPECT(mtk_sample(NULL, &probs, &p, &uniforms, &samples, NULL), MTK_ERROR_INVALID_CONTEXT, NULL);
  EXPECT(mtk_sample(ctx, NULL, &p, &uniforms, &samples, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "probs is NULL");
  EXPECT(mtk_sample(ctx, &probs, &p, NULL, &samples, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "uniforms is NULL");
  EXPECT(mtk_sample(ctx, &probs, &p, &uniforms, NULL, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "samples is NULL");
  EXPECT(mtk_renorm_probs(ctx, &probs, &p, NULL, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "out is NULL");
  EXPECT(mtk_top_k_mask_logits(ctx, NULL, &p, &out, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "logits is NULL");
  EXPECT(mtk_sample_from_logits(ctx, &probs, &p, NULL, &samples, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "uniforms is NULL");

  /* The versioned struct. */
  RESET(); q.struct_size = 0;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "params.struct_size = 0 was never set");
  RESET(); q.struct_size = sizeof q - 4;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "is not a multiple of 8, the alignment of mtk_sampling");
  RESET(); q.struct_size = 2048;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "params.struct_size = 2048 exceeds 1024 bytes");

  /* The input. */
  RESET(); in.ndim = 1;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "probs.ndim = 1 must be 2");
  RESET(); in.ndim = 3; in.sizes[2] = 1;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "probs.ndim = 3 must be 2");
  RESET(); in.dtype = MTK_FLOAT16;
  SAMPLE(MTK_ERROR_UNSUPPORTED_DTYPE, "probs.dtype = float16 must be float32");
  RESET(); SET_RAW(in.dtype, 4242);
  RENORM(MTK_ERROR_UNSUPPORTED_DTYPE, "probs.dtype = 4242");
  RESET(); in.data = NULL;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "probs.data is NULL");
  RESET(); in.sizes[1] = 0; in.data = fake(1);
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "probs.sizes[1] = 0: a row without tokens has none to sample");
  RESET(); in.sizes[1] = INT64_C(1) << 31; in.strides[0] = 0; in.strides[1] = 0; in.data = fake(1);
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "probs.sizes[1] = 2147483648 is too long");
  RESET(); in.sizes[0] = -1;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "probs.sizes[0] = -1");
  RESET(); in.strides[0] = INT64_MAX; in.data = fake(1);
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "probs: strides[0]");

  /* Per-row tensors: dtype, rank, length, data; each never read. */
  RESET(); per_row = tensor1(fake(2), MTK_FLOAT32, R); q.top_k = &per_row;
  SAMPLE(MTK_ERROR_UNSUPPORTED_DTYPE, "params.top_k.dtype = float32 must be int32 or int64");
  RESET(); per_row = tensor1(fake(2), MTK_FLOAT32, R - 1); q.top_p = &per_row;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "params.top_p.sizes[0] = 3 does not match the 4 rows");
  RESET(); per_row = tensor2(fake(2), MTK_FLOAT32, R, 1); q.min_p = &per_row;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "params.min_p.ndim = 2 must be 1");
  RESET(); per_row = tensor1(fake(2), MTK_FLOAT64, R); q.min_p = &per_row;
  RENORM(MTK_ERROR_UNSUPPORTED_DTYPE, "params.min_p.dtype = float64 must be float32");
  RESET(); per_row = tensor1(NULL, MTK_INT64, R); q.top_k = &per_row;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "params.top_k.data is NULL");
  RESET(); per_row = tensor1(fake(2), MTK_INT64, R); per_row.strides[0] = INT64_MAX;
  q.top_k = &per_row;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "params.top_k: strides[0]");

  /* What an operation does not read is an error, not ignored. */
  RESET(); q.temperature_value = 0.5f;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "params.temperature is set but mtk_sample takes");
  RESET(); per_row = tensor1(fake(2), MTK_FLOAT32, R); q.temperature = &per_row;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "params.temperature is set but mtk_renorm_probs");
  RESET();
  memset(out_data, kSentinel, sizeof out_data);
  EXPECT(mtk_top_k_mask_logits(ctx, &in, &q, &o, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "params.top_p is set but mtk_top_k_mask_logits reads params.top_k only");
  UNTOUCHED();
  RESET(); q.top_p_value = 1.0f; q.min_p_value = -0.0f;
  memset(out_data, kSentinel, sizeof out_data);
  EXPECT(mtk_top_k_mask_logits(ctx, &in, &q, &o, NULL), MTK_ERROR_INVALID_ARGUMENT,
         "params.min_p is set but mtk_top_k_mask_logits");
  UNTOUCHED();
  RESET();
  EXPECT(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_RENORM_PROBS, &in, &q, &u, &o, NULL, 0,
                                     NULL),
         MTK_ERROR_INVALID_ARGUMENT, "uniforms is set but mtk_renorm_probs does not sample");
  UNTOUCHED();

  /* The uniforms and the outputs. */
  RESET(); u.dtype = MTK_FLOAT64; u.data = fake(3);
  SAMPLE(MTK_ERROR_UNSUPPORTED_DTYPE, "uniforms.dtype = float64 must be float32");
  RESET(); u.sizes[0] = R + 1; u.data = fake(3);
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "uniforms.sizes[0] = 5 does not match the 4 rows");
  RESET(); u.data = NULL;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "uniforms.data is NULL");
  RESET(); s.dtype = MTK_INT16;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "samples.dtype = int16 must be int32 or int64");
  RESET(); s.sizes[0] = R - 1;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "samples");
  RESET(); o.dtype = MTK_FLOAT16;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "out.dtype = float16 must be float32");
  RESET(); o.sizes[1] = V - 1;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "out");
  RESET(); o.data = probs_data + 1;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "overlap");
  RESET(); s.data = uniforms_data;
  SAMPLE(MTK_ERROR_INVALID_ARGUMENT, "overlap");
  RESET(); o.strides[0] = 1;
  RENORM(MTK_ERROR_INVALID_ARGUMENT, "out has overlapping elements");

  /* The workspace variants. */
  size_t bytes = 12345;
  RESET();
  EXPECT(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &in, &q, MTK_INT64, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "bytes is NULL");
  EXPECT(mtk_sampling_workspace_size(ctx, (mtk_sampling_op)9, &in, &q, MTK_INT64, &bytes),
         MTK_ERROR_INVALID_ARGUMENT, "op = 9 is not a known mtk_sampling_op");
  EXPECT_TRUE(bytes == 0);
  EXPECT(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &in, &q, MTK_FLOAT32, &bytes),
         MTK_ERROR_INVALID_ARGUMENT, "samples.dtype = float32");
  EXPECT_OK(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &in, &q, MTK_INT64, &bytes));
  memset(samples_data, kSentinel, sizeof samples_data);
  EXPECT(mtk_sampling_with_workspace(ctx, (mtk_sampling_op)-1, &in, &q, &u, &s, NULL, 0, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "op = -1 is not a known mtk_sampling_op");
  if (bytes > 0) {
    EXPECT(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_SAMPLE, &in, &q, &u, &s, fake(4),
                                       bytes - 1, NULL),
           MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes");
    EXPECT(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_SAMPLE, &in, &q, &u, &s, NULL, bytes,
                                       NULL),
           MTK_ERROR_INVALID_ARGUMENT, "workspace is NULL");
  }
  UNTOUCHED();
#undef SAMPLE
#undef RENORM
#undef RESET
#undef UNTOUCHED
}

/* Every context-taking function, with NULL, destroyed and foreign handles. */
static void test_contexts(void) {
  mtk_context out = (mtk_context)fake(9);
  int compiled = -1, available = -1;
  mtk_backend backend;
  mtk_cache_stats stats;
  void* ptr = fake(9);

  EXPECT(mtk_context_create(MTK_BACKEND_CPU, 0, NULL), MTK_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(mtk_context_create((mtk_backend)17, 0, &out), MTK_ERROR_INVALID_ARGUMENT,
         "backend = 17 is not a known mtk_backend");
  EXPECT_TRUE(out == NULL);
  EXPECT(mtk_context_create((mtk_backend)-1, 0, &out), MTK_ERROR_INVALID_ARGUMENT, "backend = -1");
  EXPECT(mtk_context_create(MTK_BACKEND_CPU, -1, &out), MTK_ERROR_INVALID_ARGUMENT,
         "device_index = -1");
  EXPECT(mtk_context_create(MTK_BACKEND_CPU, 1, &out), MTK_ERROR_INVALID_ARGUMENT,
         "device_index = 1");
  EXPECT_TRUE(out == NULL);
  EXPECT(mtk_backend_query((mtk_backend)5, &compiled, &available), MTK_ERROR_INVALID_ARGUMENT,
         "backend = 5");
  EXPECT_TRUE(mtk_backend_name((mtk_backend)5) == NULL);
  EXPECT_TRUE(strcmp(mtk_status_string((mtk_status)99), "unknown status") == 0);
  const mtk_backend gpu_backends[3] = {MTK_BACKEND_CUDA, MTK_BACKEND_METAL, MTK_BACKEND_MPSGRAPH};
  for (int b = 0; b < 3; ++b) {
    EXPECT_OK(mtk_backend_query(gpu_backends[b], &compiled, &available));
    if (!available) {
      expect(__LINE__, "mtk_context_create(unavailable backend)",
             mtk_context_create(gpu_backends[b], 0, &out), MTK_ERROR_BACKEND_UNAVAILABLE,
             mtk_backend_name(gpu_backends[b]));
      EXPECT_TRUE(out == NULL);
    }
  }

  mtk_context dead;
  EXPECT_OK(mtk_context_create(MTK_BACKEND_CPU, 0, &dead));
  EXPECT_OK(mtk_context_destroy(dead));
  /* No context is created below, so `dead` cannot be reused by the allocator for a new one. */
  int not_a_context = 0;
  const mtk_context foreign = (mtk_context)(void*)&not_a_context;
  const mtk_context bad[3] = {NULL, dead, foreign};
  const char* expected[3] = {"ctx is NULL", "is not a live context", "is not a live context"};
  const TopkCall c = valid_call();
  mtk_router_params p = MTK_ROUTER_PARAMS_INIT;
  p.k = 1;
  mtk_tensor values_out, indices_out;
  for (int b = 0; b < 3; ++b) {
    const mtk_context x = bad[b];
    const char* m = expected[b];
    EXPECT(mtk_context_backend(x, &backend), MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT(mtk_context_cache_stats(x, &stats), MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT(mtk_context_set_num_threads(x, 1), MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT(mtk_malloc(x, 64, &ptr), MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT_TRUE(ptr == NULL);
    EXPECT(mtk_free(x, fake(3)), MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT(mtk_memcpy(x, values_data, input_data, 4, MTK_COPY_HOST_TO_DEVICE, NULL),
           MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT(mtk_synchronize(x, NULL), MTK_ERROR_INVALID_CONTEXT, m);
    void* registered = fake(7);
    EXPECT(mtk_register_buffer(x, fake(4), &registered), MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT_TRUE(registered == NULL);
    EXPECT(mtk_unregister_buffer(x, fake(4)), MTK_ERROR_INVALID_CONTEXT, m);
    fill_sentinels();
    EXPECT(mtk_topk(x, &c.input, K, 1, 1, 1, &c.values, &c.indices, NULL),
           MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT(mtk_topk_with_workspace(x, &c.input, K, 1, 1, 1, &c.values, &c.indices, NULL, 0, NULL),
           MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT_TRUE(outputs_untouched());
    size_t bytes = 7;
    EXPECT(mtk_topk_workspace_size(x, &c.input, K, 1, 1, 1, MTK_INT64, &bytes),
           MTK_ERROR_INVALID_CONTEXT, m);
    values_out.data = fake(5);
    indices_out.data = fake(6);
    EXPECT(mtk_topk_alloc(x, &c.input, K, 1, 1, 1, MTK_INT64, &values_out, &indices_out, NULL),
           MTK_ERROR_INVALID_CONTEXT, m);
    EXPECT_TRUE(values_out.data == NULL && indices_out.data == NULL);
    EXPECT(mtk_tensor_free(x, &values_out), MTK_ERROR_INVALID_CONTEXT, m);
    {
      const mtk_tensor logits = tensor2(input_data, MTK_FLOAT32, 4, N);
      const mtk_tensor weights = tensor2(values_data, MTK_FLOAT32, 4, 1);
      const mtk_tensor ids = tensor2(indices_data, MTK_INT64, 4, 1);
      EXPECT(mtk_moe_route(x, &logits, &p, &weights, &ids, NULL), MTK_ERROR_INVALID_CONTEXT, m);
    }
    if (x != NULL) EXPECT(mtk_context_destroy(x), MTK_ERROR_INVALID_CONTEXT, m);
  }
  EXPECT_OK(mtk_context_destroy(NULL));

  /* Arguments of the remaining functions on a live context. */
  EXPECT(mtk_context_backend(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(mtk_context_cache_stats(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(mtk_context_set_num_threads(ctx, -1), MTK_ERROR_INVALID_ARGUMENT, "num_threads = -1");
  EXPECT(mtk_malloc(ctx, 64, NULL), MTK_ERROR_INVALID_ARGUMENT, "out is NULL");
  EXPECT(mtk_memcpy(ctx, values_data, input_data, 4, (mtk_copy_kind)3, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "kind = 3 is not a known mtk_copy_kind");
  EXPECT(mtk_memcpy(ctx, values_data, input_data, 4, (mtk_copy_kind)-1, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "kind = -1");
  EXPECT(mtk_memcpy(ctx, NULL, input_data, 4, MTK_COPY_DEVICE_TO_DEVICE, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "dst is NULL");
  EXPECT(mtk_memcpy(ctx, values_data, NULL, 4, MTK_COPY_DEVICE_TO_DEVICE, NULL),
         MTK_ERROR_INVALID_ARGUMENT, "src is NULL");
  /* Buffer registration is Metal's and MPSGraph's: the CPU backend refuses it by name once the
   * arguments pass, for fabricated handles (never read) and its own memory alike. */
  {
    void* registered = fake(7);
    EXPECT(mtk_register_buffer(ctx, fake(4), &registered), MTK_ERROR_BACKEND_UNAVAILABLE,
           "the cpu backend registers no foreign buffers");
    EXPECT_TRUE(registered == NULL);
    registered = fake(7);
    EXPECT(mtk_register_buffer(ctx, NULL, &registered), MTK_ERROR_INVALID_ARGUMENT,
           "buffer is NULL");
    EXPECT_TRUE(registered == NULL);
    EXPECT(mtk_register_buffer(ctx, fake(4), NULL), MTK_ERROR_INVALID_ARGUMENT,
           "data_out is NULL");
    EXPECT(mtk_register_buffer(ctx, NULL, NULL), MTK_ERROR_INVALID_ARGUMENT, "data_out is NULL");
    EXPECT(mtk_unregister_buffer(ctx, fake(4)), MTK_ERROR_BACKEND_UNAVAILABLE,
           "the cpu backend registers no foreign buffers");
    EXPECT(mtk_unregister_buffer(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "data is NULL");
    void* own = NULL;
    EXPECT_OK(mtk_malloc(ctx, 64, &own));
    EXPECT(mtk_register_buffer(ctx, own, &registered), MTK_ERROR_BACKEND_UNAVAILABLE, "cpu");
    EXPECT(mtk_unregister_buffer(ctx, own), MTK_ERROR_BACKEND_UNAVAILABLE, "cpu");
    EXPECT_OK(mtk_free(ctx, own)); /* the refusals left the allocation as it was */
  }
  /* Memory of one context is foreign to another. */
  mtk_context other;
  EXPECT_OK(mtk_context_create(MTK_BACKEND_CPU, 0, &other));
  EXPECT_OK(mtk_malloc(other, 64, &ptr));
  EXPECT(mtk_free(ctx, ptr), MTK_ERROR_INVALID_ARGUMENT, "was not allocated by this context");
  EXPECT_OK(mtk_free(other, ptr));
  EXPECT_OK(mtk_context_destroy(other));
}

int main(void) {
  const int64_t live_before = mtk_testing_live_allocations();
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) != MTK_SUCCESS) {
    fprintf(stderr, "cannot create a CPU context: %s\n", mtk_last_error_message());
    return 1;
  }
  test_topk_descriptors();
  test_topk_variants();
  test_moe_route();
  test_sampling();
  test_contexts();
  EXPECT_OK(mtk_context_destroy(ctx));
  EXPECT_TRUE(mtk_testing_live_allocations() == live_before);
  printf("bad_input: %d checks, %d failures\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
