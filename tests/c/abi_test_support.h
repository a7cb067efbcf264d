/*
 * What the C ABI test programs (tests/c/test_abi.c, tests/ragged/test_ragged.c,
 * tests/sampling/test_sampling.c) share: checks that count their failures instead of stopping,
 * so that one run reports every broken case, and the tensor descriptors their cases build.
 * Each program is one translation unit, so the counter below is that program's own.
 */
#ifndef METALTOPK_TESTS_ABI_TEST_SUPPORT_H
#define METALTOPK_TESTS_ABI_TEST_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "metaltopk.h"

static int failures = 0;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                          \
      fprintf(stderr, "\n");                                                 \
      ++failures;                                                            \
    }                                                                        \
  } while (0)

/* The call must return `want`; a failure must leave a message containing `needle` (the
 * argument's name or value). */
#define EXPECT_STATUS(call, want, needle) expect_status((call), (want), (needle), #call, __LINE__)

static inline void expect_status(mtk_status got, mtk_status want, const char* needle,
                                 const char* call, int line) {
  const char* message = mtk_last_error_message();
  if (got != want) {
    fprintf(stderr, "%s:%d: %s returned %d (%s), want %d (%s); message: %s\n", __FILE__, line,
            call, (int)got, mtk_status_string(got), (int)want, mtk_status_string(want), message);
    ++failures;
    return;
  }
  if (want != MTK_SUCCESS && needle != NULL && strstr(message, needle) == NULL) {
    fprintf(stderr, "%s:%d: %s: message '%s' does not contain '%s'\n", __FILE__, line, call,
            message, needle);
    ++failures;
  }
}

static inline mtk_tensor tensor1d(void* data, mtk_dtype dtype, int64_t n, int64_t stride) {
  mtk_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.sizes[0] = n;
  t.strides[0] = stride;
  return t;
}

static inline mtk_tensor tensor2d(void* data, mtk_dtype dtype, int64_t rows, int64_t cols,
                                  int64_t row_stride, int64_t col_stride) {
  mtk_tensor t = tensor1d(data, dtype, rows, row_stride);
  t.ndim = 2;
  t.sizes[1] = cols;
  t.strides[1] = col_stride;
  return t;
}

/* Most cases pass a contiguous vector. */
static inline mtk_tensor vec(void* data, mtk_dtype dtype, int64_t n) {
  return tensor1d(data, dtype, n, 1);
}

#endif
