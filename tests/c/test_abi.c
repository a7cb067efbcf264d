/*
 * The C ABI from a C11 program: every public function of metaltopk.h, every status a caller can
 * provoke (with the message naming the argument and its value), "nothing is written on failure",
 * the allocating variant and its frees, int32 indices, strided outputs and overlap detection,
 * and the versioned parameter structs' size rule.
 * Uses the testing hooks only to count live allocations and to make one allocation fail.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi_test_support.h"
#include "metaltopk.h"
#include "metaltopk_testing.h"

static mtk_context make_context(mtk_backend backend) {
  mtk_context ctx = NULL;
  EXPECT_STATUS(mtk_context_create(backend, 0, &ctx), MTK_SUCCESS, NULL);
  CHECK(ctx != NULL, "no context");
  return ctx;
}

/* ---- library-level functions ----------------------------------------------------------- */

static void test_library_functions(void) {
  CHECK(mtk_version() == MTK_VERSION, "mtk_version() = %d, header %d", mtk_version(),
        MTK_VERSION);
  for (int s = MTK_SUCCESS; s <= MTK_ERROR_INTERNAL; ++s) {
    const char* text = mtk_status_string((mtk_status)s);
    CHECK(text != NULL && text[0] != '\0', "status %d has no string", s);
    for (int t = MTK_SUCCESS; t < s; ++t) {
      CHECK(strcmp(text, mtk_status_string((mtk_status)t)) != 0, "statuses %d and %d share '%s'",
            s, t, text);
    }
  }
  CHECK(mtk_status_string((mtk_status)99) != NULL, "unknown status gives NULL");

  const char* names[] = {"default", "cpu", "cuda", "metal", "mpsgraph"};
  for (int b = MTK_BACKEND_DEFAULT; b <= MTK_BACKEND_MPSGRAPH; ++b) {
    const char* name = mtk_backend_name((mtk_backend)b);
    CHECK(name != NULL && strcmp(name, names[b]) == 0, "backend %d named %s", b,
          name ? name : "NULL");
    int compiled = -1, available = -1;
    EXPECT_STATUS(mtk_backend_query((mtk_backend)b, &compiled, &available), MTK_SUCCESS, NULL);
    CHECK(compiled == 0 || compiled == 1, "compiled = %d", compiled);
    CHECK(available == 0 || (available == 1 && compiled == 1), "available = %d, compiled = %d",
          available, compiled);
    EXPECT_STATUS(mtk_backend_query((mtk_backend)b, NULL, NULL), MTK_SUCCESS, NULL);
  }
  int compiled = -1, available = -1;
  EXPECT_STATUS(mtk_backend_query(MTK_BACKEND_CPU, &compiled, &available), MTK_SUCCESS, NULL);
  CHECK(compiled == 1 && available == 1, "the CPU backend is always there");
  CHECK(mtk_backend_name((mtk_backend)42) == NULL, "unknown backend has a name");
  EXPECT_STATUS(mtk_backend_query((mtk_backend)42, &compiled, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "backend = 42");
}

/* ---- contexts ---------------------------------------------------------------------------- */

static void test_contexts(void) {
  mtk_context ctx = make_context(MTK_BACKEND_CPU);
  mtk_backend kind = MTK_BACKEND_DEFAULT;
  EXPECT_STATUS(mtk_context_backend(ctx, &kind), MTK_SUCCESS, NULL);
  CHECK(kind == MTK_BACKEND_CPU, "backend %d", (int)kind);
  EXPECT_STATUS(mtk_context_backend(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "out");

  mtk_cache_stats stats;
  memset(&stats, 0xff, sizeof stats);
  EXPECT_STATUS(mtk_context_cache_stats(ctx, &stats), MTK_SUCCESS, NULL);
  CHECK(stats.entries <= stats.misses, "entries %llu > misses %llu",
        (unsigned long long)stats.entries, (unsigned long long)stats.misses);
  EXPECT_STATUS(mtk_context_cache_stats(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "out");
  EXPECT_STATUS(mtk_context_set_num_threads(ctx, 1), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_context_set_num_threads(ctx, 0), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_context_set_num_threads(ctx, -3), MTK_ERROR_INVALID_ARGUMENT,
                "num_threads = -3");

  /* The default context resolves to a backend that is available. */
  mtk_context best = make_context(MTK_BACKEND_DEFAULT);
  EXPECT_STATUS(mtk_context_backend(best, &kind), MTK_SUCCESS, NULL);
  int available = 0;
  EXPECT_STATUS(mtk_backend_query(kind, NULL, &available), MTK_SUCCESS, NULL);
  CHECK(kind != MTK_BACKEND_DEFAULT && available == 1, "default resolved to %d", (int)kind);
  EXPECT_STATUS(mtk_context_destroy(best), MTK_SUCCESS, NULL);

  mtk_context out = ctx;
  EXPECT_STATUS(mtk_context_create(MTK_BACKEND_CPU, 0, NULL), MTK_ERROR_INVALID_ARGUMENT, "out");
  EXPECT_STATUS(mtk_context_create((mtk_backend)17, 0, &out), MTK_ERROR_INVALID_ARGUMENT,
                "backend = 17");
  CHECK(out == NULL, "failed create left a handle");
  EXPECT_STATUS(mtk_context_create(MTK_BACKEND_CPU, -1, &out), MTK_ERROR_INVALID_ARGUMENT,
                "device_index = -1");

  /* Backends this machine cannot run say so, naming themselves. */
  for (int b = MTK_BACKEND_CUDA; b <= MTK_BACKEND_MPSGRAPH; ++b) {
    int is_available = 0;
    mtk_backend_query((mtk_backend)b, NULL, &is_available);
    if (is_available) continue;
    out = ctx;
    EXPECT_STATUS(mtk_context_create((mtk_backend)b, 0, &out), MTK_ERROR_BACKEND_UNAVAILABLE,
                  mtk_backend_name((mtk_backend)b));
    CHECK(out == NULL, "failed create of %s left a handle", mtk_backend_name((mtk_backend)b));
  }

  /* NULL, foreign and destroyed handles are rejected, not dereferenced. */
  int not_a_context = 0;
  EXPECT_STATUS(mtk_context_backend(NULL, &kind), MTK_ERROR_INVALID_CONTEXT, "ctx");
  EXPECT_STATUS(mtk_context_backend((mtk_context)&not_a_context, &kind),
                MTK_ERROR_INVALID_CONTEXT, "ctx");
  EXPECT_STATUS(mtk_context_destroy(NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_context_destroy(ctx), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_context_backend(ctx, &kind), MTK_ERROR_INVALID_CONTEXT, "ctx");
  EXPECT_STATUS(mtk_context_destroy(ctx), MTK_ERROR_INVALID_CONTEXT, "ctx");
  EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_ERROR_INVALID_CONTEXT, "ctx");
}

/* ---- device memory ----------------------------------------------------------------------- */

static void test_memory(mtk_context ctx) {
  void* nothing = &nothing;
  EXPECT_STATUS(mtk_malloc(ctx, 0, &nothing), MTK_SUCCESS, NULL);
  CHECK(nothing == NULL, "0 bytes gave %p", nothing);
  EXPECT_STATUS(mtk_malloc(ctx, 16, NULL), MTK_ERROR_INVALID_ARGUMENT, "out");

  const int64_t live = mtk_testing_live_allocations();
  float host[64], back[64];
  for (int i = 0; i < 64; ++i) host[i] = (float)i * 0.5f;
  void *a = NULL, *b = NULL;
  EXPECT_STATUS(mtk_malloc(ctx, sizeof host, &a), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_malloc(ctx, sizeof host, &b), MTK_SUCCESS, NULL);
  CHECK(a != NULL && b != NULL && a != b, "allocations %p %p", a, b);
  CHECK(mtk_testing_live_allocations() == live + 2, "live %lld, want %lld",
        (long long)mtk_testing_live_allocations(), (long long)live + 2);
  EXPECT_STATUS(mtk_memcpy(ctx, a, host, sizeof host, MTK_COPY_HOST_TO_DEVICE, NULL),
                MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_memcpy(ctx, b, a, sizeof host, MTK_COPY_DEVICE_TO_DEVICE, NULL), MTK_SUCCESS,
                NULL);
  memset(back, 0, sizeof back);
  EXPECT_STATUS(mtk_memcpy(ctx, back, b, sizeof back, MTK_COPY_DEVICE_TO_HOST, NULL),
                MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_SUCCESS, NULL);
  CHECK(memcmp(host, back, sizeof host) == 0, "round trip changed the bytes");

  EXPECT_STATUS(mtk_memcpy(ctx, a, host, 4, (mtk_copy_kind)7, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "kind = 7");
  EXPECT_STATUS(mtk_memcpy(ctx, NULL, host, 4, MTK_COPY_HOST_TO_DEVICE, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "dst");
  EXPECT_STATUS(mtk_memcpy(ctx, a, NULL, 4, MTK_COPY_HOST_TO_DEVICE, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "src");
  EXPECT_STATUS(mtk_memcpy(ctx, NULL, NULL, 0, MTK_COPY_HOST_TO_DEVICE, NULL), MTK_SUCCESS, NULL);

  void* huge = &huge;
  EXPECT_STATUS(mtk_malloc(ctx, (size_t)1 << 62, &huge), MTK_ERROR_OUT_OF_MEMORY, NULL);
  CHECK(huge == NULL, "failed allocation left %p", huge);

  EXPECT_STATUS(mtk_free(ctx, a), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_free(ctx, b), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_free(ctx, NULL), MTK_SUCCESS, NULL);
  CHECK(mtk_testing_live_allocations() == live, "leaked %lld allocations",
        (long long)(mtk_testing_live_allocations() - live));
  /* Memory the context did not hand out (or already took back) is refused, not freed. */
  CHECK(mtk_free(ctx, host) != MTK_SUCCESS, "freed a stack address");
  CHECK(mtk_free(ctx, a) != MTK_SUCCESS, "freed %p twice", a);
  CHECK(mtk_last_error_message()[0] != '\0', "no message for a bad free");

  /* Foreign buffers are a Metal notion: the CPU backend refuses them, naming itself. */
  void* registered = &registered;
  EXPECT_STATUS(mtk_register_buffer(ctx, host, &registered), MTK_ERROR_BACKEND_UNAVAILABLE,
                "cpu backend registers no foreign buffers");
  CHECK(registered == NULL, "a refused registration left %p", registered);
  EXPECT_STATUS(mtk_register_buffer(ctx, NULL, &registered), MTK_ERROR_INVALID_ARGUMENT,
                "buffer is NULL");
  EXPECT_STATUS(mtk_register_buffer(ctx, host, NULL), MTK_ERROR_INVALID_ARGUMENT, "data_out");
  EXPECT_STATUS(mtk_unregister_buffer(ctx, host), MTK_ERROR_BACKEND_UNAVAILABLE, "cpu");
  EXPECT_STATUS(mtk_unregister_buffer(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "data is NULL");
  EXPECT_STATUS(mtk_register_buffer(NULL, host, &registered), MTK_ERROR_INVALID_CONTEXT, NULL);
}

/* ---- top-k ------------------------------------------------------------------------------- */

static void test_topk_results(mtk_context ctx) {
  /* The contract's example [nan, inf, 1e4, 0, -1e4, -inf], largest and smallest. */
  const float special[6] = {NAN, INFINITY, 1e4f, 0.0f, -1e4f, -INFINITY};
  float values[4];
  int64_t indices[4];
  mtk_tensor in = tensor1d((void*)special, MTK_FLOAT32, 6, 1);
  mtk_tensor val = tensor1d(values, MTK_FLOAT32, 4, 1);
  mtk_tensor idx = tensor1d(indices, MTK_INT64, 4, 1);
  EXPECT_STATUS(mtk_topk(ctx, &in, 4, 0, 1, 1, &val, &idx, NULL), MTK_SUCCESS, NULL);
  CHECK(isnan(values[0]) && values[1] == INFINITY && values[2] == 1e4f && values[3] == 0.0f,
        "values %g %g %g %g", values[0], values[1], values[2], values[3]);
  CHECK(indices[0] == 0 && indices[1] == 1 && indices[2] == 2 && indices[3] == 3, "indices");
  EXPECT_STATUS(mtk_topk(ctx, &in, 4, -1, 0, 1, &val, &idx, NULL), MTK_SUCCESS, NULL);
  CHECK(indices[0] == 5 && indices[1] == 4 && indices[2] == 3 && indices[3] == 2, "smallest");

  /* int32 indices into a strided values output (every other slot; the gaps stay untouched)
   * and an indices output walking backwards. */
  const int16_t ties[7] = {3, 2, 3, 2, 1, 1, 3};
  int16_t spaced[6];
  int32_t backwards[3];
  for (int i = 0; i < 6; ++i) spaced[i] = -77;
  in = tensor1d((void*)ties, MTK_INT16, 7, 1);
  val = tensor1d(spaced, MTK_INT16, 3, 2);
  idx = tensor1d(&backwards[2], MTK_INT32, 3, -1);
  EXPECT_STATUS(mtk_topk(ctx, &in, 3, 0, 1, 1, &val, &idx, NULL), MTK_SUCCESS, NULL);
  CHECK(spaced[0] == 3 && spaced[2] == 3 && spaced[4] == 3, "values %d %d %d", spaced[0],
        spaced[2], spaced[4]);
  CHECK(spaced[1] == -77 && spaced[3] == -77 && spaced[5] == -77, "a gap was written");
  CHECK(backwards[2] == 0 && backwards[1] == 2 && backwards[0] == 6, "indices %d %d %d",
        backwards[2], backwards[1], backwards[0]);

  /* dim 0 of a row-major 3x4 matrix, read through a transposed view, written column-major. */
  const int8_t m[12] = {1, 9, -3, 4,  /* row 0 */
                        7, 9, 5, -8,  /* row 1 */
                        7, 0, 6, 4};  /* row 2 */
  int8_t top[8];
  int64_t top_idx[8];
  in = tensor2d((void*)m, MTK_INT8, 3, 4, 4, 1);
  val = tensor2d(top, MTK_INT8, 2, 4, 1, 2);
  idx = tensor2d(top_idx, MTK_INT64, 2, 4, 1, 2);
  EXPECT_STATUS(mtk_topk(ctx, &in, 2, 0, 1, 1, &val, &idx, NULL), MTK_SUCCESS, NULL);
  const int8_t want_top[8] = {7, 7, 9, 9, 6, 5, 4, 4};
  const int64_t want_idx[8] = {1, 2, 0, 1, 2, 1, 0, 2};
  CHECK(memcmp(top, want_top, sizeof top) == 0 && memcmp(top_idx, want_idx, sizeof top_idx) == 0,
        "dim 0 top-2 wrong (first %d at %lld)", top[0], (long long)top_idx[0]);

  /* A zero-stride (broadcast) input: all ties, so the first indices, in order. */
  const double one = 1.5;
  double bvals[3];
  int64_t bidx[3];
  in = tensor1d((void*)&one, MTK_FLOAT64, 1000, 0);
  val = tensor1d(bvals, MTK_FLOAT64, 3, 1);
  idx = tensor1d(bidx, MTK_INT64, 3, 1);
  EXPECT_STATUS(mtk_topk(ctx, &in, 3, 0, 0, 0, &val, &idx, NULL), MTK_SUCCESS, NULL);
  CHECK(bvals[0] == 1.5 && bvals[2] == 1.5, "broadcast values");
  CHECK(bidx[0] + bidx[1] + bidx[2] == 3 && bidx[0] != bidx[1] && bidx[1] != bidx[2] &&
            bidx[0] != bidx[2],
        "sorted=0 must still select indices {0,1,2}");

  /* 0-d input: (x, 0) for k = 1 and for k = 0. */
  const uint8_t scalar = 200;
  for (int64_t k = 0; k <= 1; ++k) {
    uint8_t v0 = 0;
    int64_t i0 = -1;
    mtk_tensor s, sv, si;
    memset(&s, 0, sizeof s);
    s.data = (void*)&scalar;
    s.dtype = MTK_UINT8;
    sv = s;
    sv.data = &v0;
    si = s;
    si.data = &i0;
    si.dtype = MTK_INT64;
    EXPECT_STATUS(mtk_topk(ctx, &s, k, -1, 1, 1, &sv, &si, NULL), MTK_SUCCESS, NULL);
    CHECK(v0 == 200 && i0 == 0, "0-d k=%lld gave (%d, %lld)", (long long)k, v0, (long long)i0);
  }

  /* Empty: k = 0 of an empty row needs no data pointers at all. */
  in = tensor1d(NULL, MTK_FLOAT32, 0, 1);
  val = tensor1d(NULL, MTK_FLOAT32, 0, 1);
  idx = tensor1d(NULL, MTK_INT64, 0, 1);
  EXPECT_STATUS(mtk_topk(ctx, &in, 0, 0, 1, 1, &val, &idx, NULL), MTK_SUCCESS, NULL);
}

/* Sentinel-filled outputs: a failing call must leave every byte as it was. */
enum { OUT_N = 8 };
static float g_values[OUT_N];
static int64_t g_indices[OUT_N];

static void fill_outputs(void) {
  memset(g_values, 0xab, sizeof g_values);
  memset(g_indices, 0xcd, sizeof g_indices);
}

static void check_outputs_untouched(int line) {
  for (int i = 0; i < OUT_N; ++i) {
    uint32_t vb;
    uint64_t ib;
    memcpy(&vb, &g_values[i], 4);
    memcpy(&ib, &g_indices[i], 8);
    if (vb != 0xabababab || ib != 0xcdcdcdcdcdcdcdcdull) {
      fprintf(stderr, "%s:%d: a failed call wrote output element %d\n", __FILE__, line, i);
      ++failures;
      return;
    }
  }
}

#define EXPECT_TOPK_ERROR(ctx, in, k, dim, val, idx, want, needle)                      \
  do {                                                                                  \
    fill_outputs();                                                                     \
    EXPECT_STATUS(mtk_topk((ctx), (in), (k), (dim), 1, 1, (val), (idx), NULL), (want),  \
                  (needle));                                                            \
    check_outputs_untouched(__LINE__);                                                  \
  } while (0)

static void test_topk_errors(mtk_context ctx) {
  float input[5] = {1, 2, 3, 4, 5};
  const mtk_tensor in = tensor1d(input, MTK_FLOAT32, 5, 1);
  const mtk_tensor val = tensor1d(g_values, MTK_FLOAT32, 2, 1);
  const mtk_tensor idx = tensor1d(g_indices, MTK_INT64, 2, 1);
  mtk_tensor bad;

  /* k and dim. */
  mtk_tensor val6 = tensor1d(g_values, MTK_FLOAT32, 6, 1), idx6 = tensor1d(g_indices, MTK_INT64, 6, 1);
  EXPECT_TOPK_ERROR(ctx, &in, 6, 0, &val6, &idx6, MTK_ERROR_INVALID_ARGUMENT, "k = 6");
  EXPECT_TOPK_ERROR(ctx, &in, -1, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "k = -1");
  EXPECT_TOPK_ERROR(ctx, &in, 2, 1, &val, &idx, MTK_ERROR_INVALID_DIM, "dim = 1");
  EXPECT_TOPK_ERROR(ctx, &in, 2, -2, &val, &idx, MTK_ERROR_INVALID_DIM, "dim = -2");

  /* Malformed input descriptors. */
  EXPECT_TOPK_ERROR(ctx, NULL, 2, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "input");
  bad = in;
  bad.data = NULL;
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "input.data");
  bad = in;
  bad.ndim = MTK_MAX_NDIM + 1;
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "input.ndim = 9");
  bad.ndim = -1;
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "input.ndim = -1");
  bad = in;
  bad.sizes[0] = -5;
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "-5");
  bad = tensor2d(input, MTK_FLOAT32, (int64_t)1 << 40, (int64_t)1 << 40, 0, 0);
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 1, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "overflow");
  bad = tensor1d(input, MTK_FLOAT32, 5, INT64_MAX / 2);
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 0, &val, &idx, MTK_ERROR_INVALID_ARGUMENT, "overflow");
  bad = in;
  bad.dtype = (mtk_dtype)42;
  EXPECT_TOPK_ERROR(ctx, &bad, 2, 0, &val, &idx, MTK_ERROR_UNSUPPORTED_DTYPE, "input.dtype");

  /* Outputs of the wrong shape or type. */
  bad = val;
  bad.sizes[0] = 3;
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &bad, &idx, MTK_ERROR_INVALID_ARGUMENT, "values.sizes[0] = 3");
  bad = val;
  bad.ndim = 2;
  bad.sizes[1] = 1;
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &bad, &idx, MTK_ERROR_INVALID_ARGUMENT, "values.ndim = 2");
  bad = val;
  bad.dtype = MTK_FLOAT64;
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &bad, &idx, MTK_ERROR_INVALID_ARGUMENT, "values.dtype");
  bad = idx;
  bad.dtype = MTK_FLOAT32;
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &val, &bad, MTK_ERROR_INVALID_ARGUMENT, "indices.dtype");
  bad = idx;
  bad.data = NULL;
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &val, &bad, MTK_ERROR_INVALID_ARGUMENT, "indices.data");

  /* Overlaps: with the input, with each other, with themselves. */
  float shared[16];
  memcpy(shared, input, sizeof input);
  const mtk_tensor in_shared = tensor1d(shared, MTK_FLOAT32, 5, 1);
  const mtk_tensor val_on_input = tensor1d(&shared[3], MTK_FLOAT32, 2, 1);
  fill_outputs();
  EXPECT_STATUS(mtk_topk(ctx, &in_shared, 2, 0, 1, 1, &val_on_input, &idx, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "overlap");
  CHECK(memcmp(shared, input, sizeof input) == 0, "the input was written");
  const mtk_tensor idx_on_input = tensor1d(&shared[4], MTK_INT64, 2, 1);
  EXPECT_TOPK_ERROR(ctx, &in_shared, 2, 0, &val, &idx_on_input, MTK_ERROR_INVALID_ARGUMENT,
                    "overlap");
  const mtk_tensor idx_on_values = tensor1d(g_values, MTK_INT64, 2, 1);
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &val, &idx_on_values, MTK_ERROR_INVALID_ARGUMENT, "overlap");
  const mtk_tensor val_self = tensor1d(g_values, MTK_FLOAT32, 2, 0);
  EXPECT_TOPK_ERROR(ctx, &in, 2, 0, &val_self, &idx, MTK_ERROR_INVALID_ARGUMENT, "values");

  /* int32 indices are refused for rows longer than 2^31 - 1 (checked without running). */
  const float big_value = 1.0f;
  mtk_tensor big = tensor1d((void*)&big_value, MTK_FLOAT32, (int64_t)1 << 31, 0);
  size_t bytes = 1;
  EXPECT_STATUS(mtk_topk_workspace_size(ctx, &big, 1, 0, 1, 1, MTK_INT32, &bytes),
                MTK_ERROR_INVALID_ARGUMENT, "int32");
  big.sizes[0] = ((int64_t)1 << 31) - 1;
  EXPECT_STATUS(mtk_topk_workspace_size(ctx, &big, 1, 0, 1, 1, MTK_INT32, &bytes), MTK_SUCCESS,
                NULL);

  /* Context errors come before anything else. */
  EXPECT_TOPK_ERROR(NULL, &in, 2, 0, &val, &idx, MTK_ERROR_INVALID_CONTEXT, "ctx");
}

static void test_workspace_variant(mtk_context ctx) {
  enum { N = 5000, K = 100 };
  float* input = malloc(N * sizeof(float));
  float values[K];
  int64_t indices[K];
  for (int i = 0; i < N; ++i) input[i] = (float)((i * 7919) % N);  /* a permutation of 0..N-1 */
  const mtk_tensor in = tensor1d(input, MTK_FLOAT32, N, 1);
  const mtk_tensor val = tensor1d(values, MTK_FLOAT32, K, 1);
  const mtk_tensor idx = tensor1d(indices, MTK_INT64, K, 1);

  size_t bytes = 0;
  EXPECT_STATUS(mtk_topk_workspace_size(ctx, &in, K, 0, 1, 1, MTK_INT64, &bytes), MTK_SUCCESS,
                NULL);
  EXPECT_STATUS(mtk_topk_workspace_size(ctx, &in, K, 0, 1, 1, MTK_INT64, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "bytes");
  EXPECT_STATUS(mtk_topk_workspace_size(ctx, &in, N + 1, 0, 1, 1, MTK_INT64, &bytes),
                MTK_ERROR_INVALID_ARGUMENT, "k = 5001");
  EXPECT_STATUS(mtk_topk_workspace_size(ctx, &in, K, 0, 1, 1, MTK_INT64, &bytes), MTK_SUCCESS,
                NULL);
  void* workspace = NULL;
  EXPECT_STATUS(mtk_malloc(ctx, bytes, &workspace), MTK_SUCCESS, NULL);
  const int64_t live = mtk_testing_live_allocations();
  EXPECT_STATUS(mtk_topk_with_workspace(ctx, &in, K, 0, 1, 1, &val, &idx, workspace, bytes, NULL),
                MTK_SUCCESS, NULL);
  CHECK(mtk_testing_live_allocations() == live, "the workspace variant allocated");
  int ok = 1;
  for (int j = 0; j < K; ++j) {
    ok &= values[j] == (float)(N - 1 - j) && input[indices[j]] == values[j];
  }
  CHECK(ok, "workspace top-k wrong: first (%g, %lld)", values[0], (long long)indices[0]);
  if (bytes > 0) {
    EXPECT_STATUS(
        mtk_topk_with_workspace(ctx, &in, K, 0, 1, 1, &val, &idx, workspace, bytes - 1, NULL),
        MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes");
    EXPECT_STATUS(mtk_topk_with_workspace(ctx, &in, K, 0, 1, 1, &val, &idx, NULL, bytes, NULL),
                  MTK_ERROR_INVALID_ARGUMENT, "workspace");
  }
  EXPECT_STATUS(mtk_free(ctx, workspace), MTK_SUCCESS, NULL);
  free(input);
}

static void test_allocating_variant(mtk_context ctx) {
  const int32_t input[2][5] = {{5, 1, 1, 1, 0}, {-4, 9, 9, -4, 2}};
  const mtk_tensor in = tensor2d((void*)input, MTK_INT32, 2, 5, 5, 1);
  const int64_t live = mtk_testing_live_allocations();
  mtk_tensor values, indices;

  EXPECT_STATUS(mtk_topk_alloc(ctx, &in, 3, 1, 0, 1, MTK_INT32, &values, &indices, NULL),
                MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_SUCCESS, NULL);
  CHECK(values.data != NULL && indices.data != NULL, "no outputs");
  CHECK(values.dtype == MTK_INT32 && indices.dtype == MTK_INT32 && values.ndim == 2 &&
            values.sizes[0] == 2 && values.sizes[1] == 3 && values.strides[0] == 3 &&
            values.strides[1] == 1 && indices.sizes[1] == 3,
        "output descriptors");
  const int32_t want_values[6] = {0, 1, 1, -4, -4, 2};
  const int32_t want_indices[6] = {4, 1, 2, 0, 3, 4};
  CHECK(memcmp(values.data, want_values, sizeof want_values) == 0, "alloc values");
  CHECK(memcmp(indices.data, want_indices, sizeof want_indices) == 0, "alloc indices");
  CHECK(mtk_testing_live_allocations() == live + 2, "two outputs are live");
  EXPECT_STATUS(mtk_tensor_free(ctx, &values), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_tensor_free(ctx, &indices), MTK_SUCCESS, NULL);
  CHECK(values.data == NULL && indices.data == NULL, "mtk_tensor_free must reset data");
  EXPECT_STATUS(mtk_tensor_free(ctx, &values), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_tensor_free(ctx, NULL), MTK_ERROR_INVALID_ARGUMENT, "tensor");
  CHECK(mtk_testing_live_allocations() == live, "leak after mtk_tensor_free");

  /* Failures: NULL data in both outputs, nothing allocated survives. */
  values.data = indices.data = (void*)&values;
  EXPECT_STATUS(mtk_topk_alloc(ctx, &in, 6, 1, 1, 1, MTK_INT64, &values, &indices, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "k = 6");
  CHECK(values.data == NULL && indices.data == NULL, "failed alloc left data");
  EXPECT_STATUS(mtk_topk_alloc(ctx, &in, 2, 1, 1, 1, MTK_FLOAT32, &values, &indices, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "float32");
  EXPECT_STATUS(mtk_topk_alloc(ctx, &in, 2, 1, 1, 1, MTK_INT64, NULL, &indices, NULL),
                MTK_ERROR_INVALID_ARGUMENT, "values_out");
  /* The second allocation (the indices) fails: the first must be released. */
  for (uint64_t nth = 1; nth <= 2; ++nth) {
    values.data = indices.data = (void*)&values;
    mtk_testing_fail_at(MTK_FAULT_HOST_ALLOCATION | MTK_FAULT_DEVICE_ALLOCATION, nth);
    const mtk_status status =
        mtk_topk_alloc(ctx, &in, 2, 1, 1, 1, MTK_INT64, &values, &indices, NULL);
    mtk_testing_reset();
    EXPECT_STATUS(status, MTK_ERROR_OUT_OF_MEMORY, NULL);
    CHECK(values.data == NULL && indices.data == NULL, "failed alloc left data");
    CHECK(mtk_testing_live_allocations() == live, "allocation failure %llu leaked",
          (unsigned long long)nth);
  }
  CHECK(mtk_testing_live_allocations() == live, "leaks after the allocating variant");
}

static void test_moe_route(mtk_context ctx) {
  /* Two tokens, four experts, raw logits as scores: the weights are the top-2 logits. */
  const float logits[2][4] = {{0.5f, 2.0f, -1.0f, 2.0f}, {3.0f, 0.0f, 1.0f, -2.0f}};
  float weights[4];
  int32_t ids[4];
  const mtk_tensor lg = tensor2d((void*)logits, MTK_FLOAT32, 2, 4, 4, 1);
  const mtk_tensor w = tensor2d(weights, MTK_FLOAT32, 2, 2, 2, 1);
  const mtk_tensor id = tensor2d(ids, MTK_INT32, 2, 2, 2, 1);
  mtk_router_params params = MTK_ROUTER_PARAMS_INIT;
  params.k = 2;
  params.scoring = MTK_SCORING_NONE;
  EXPECT_STATUS(mtk_moe_route(ctx, &lg, &params, &w, &id, NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_SUCCESS, NULL);
  CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 0 && ids[3] == 2, "ids %d %d %d %d", ids[0],
        ids[1], ids[2], ids[3]);
  CHECK(weights[0] == 2.0f && weights[1] == 2.0f && weights[2] == 3.0f && weights[3] == 1.0f,
        "weights %g %g %g %g", weights[0], weights[1], weights[2], weights[3]);

  /* Softmax, renormalised: the two weights of a token sum to 1 and keep the logits' ratio. */
  params.scoring = MTK_SCORING_SOFTMAX;
  params.renormalize = 1;
  EXPECT_STATUS(mtk_moe_route(ctx, &lg, &params, &w, &id, NULL), MTK_SUCCESS, NULL);
  EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_SUCCESS, NULL);
  const float expected_second = 1.0f / (1.0f + expf(2.0f));  /* e^1 / (e^3 + e^1) */
  CHECK(ids[2] == 0 && ids[3] == 2, "softmax ids");
  CHECK(fabsf(weights[0] - 0.5f) < 1e-6f && fabsf(weights[3] - expected_second) < 1e-6f,
        "softmax weights %g %g, want 0.5 %g", weights[0], weights[3], expected_second);

  params.k = 0;
  EXPECT_STATUS(mtk_moe_route(ctx, &lg, &params, &w, &id, NULL), MTK_ERROR_INVALID_ARGUMENT, "k");
  params.k = 2;
  EXPECT_STATUS(mtk_moe_route(ctx, &lg, NULL, &w, &id, NULL), MTK_ERROR_INVALID_ARGUMENT,
                "params");
  mtk_tensor int_logits = lg;
  int_logits.dtype = MTK_INT32;
  EXPECT_STATUS(mtk_moe_route(ctx, &int_logits, &params, &w, &id, NULL),
                MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype");
}

/* The failure must name the struct, the size given and this library's size. */
static void expect_params_rejected(mtk_context ctx, const mtk_tensor* lg, const void* params,
                                   size_t given, const mtk_tensor* w, const mtk_tensor* id,
                                   const char* why, int line) {
  char given_text[32], known_text[48];
  snprintf(given_text, sizeof given_text, "struct_size = %zu ", given);
  snprintf(known_text, sizeof known_text, "mtk_router_params has %zu bytes",
           sizeof(mtk_router_params));
  const mtk_status status =
      mtk_moe_route(ctx, lg, (const mtk_router_params*)params, w, id, NULL);
  const char* message = mtk_last_error_message();
  CHECK(status == MTK_ERROR_INVALID_ARGUMENT && strstr(message, given_text) != NULL &&
            strstr(message, known_text) != NULL && strstr(message, why) != NULL,
        "line %d: status %d, message '%s'", line, (int)status, message);
}

/* The versioned parameter rule of metaltopk.h's opening comment, on mtk_router_params. */
static void test_router_params_versions(mtk_context ctx) {
  const float logits[2][4] = {{0.5f, 2.0f, -1.0f, 2.0f}, {3.0f, 0.0f, 1.0f, -2.0f}};
  float want_weights[4], weights[4];
  int32_t want_ids[4], ids[4];
  const mtk_tensor lg = tensor2d((void*)logits, MTK_FLOAT32, 2, 4, 4, 1);
  const mtk_tensor want_w = tensor2d(want_weights, MTK_FLOAT32, 2, 2, 2, 1);
  const mtk_tensor want_id = tensor2d(want_ids, MTK_INT32, 2, 2, 2, 1);
  const mtk_tensor w = tensor2d(weights, MTK_FLOAT32, 2, 2, 2, 1);
  const mtk_tensor id = tensor2d(ids, MTK_INT32, 2, 2, 2, 1);
  mtk_router_params defaults = MTK_ROUTER_PARAMS_INIT;
  defaults.k = 2;
  CHECK(defaults.struct_size == sizeof(mtk_router_params) && defaults.scale == 1.0f &&
            defaults.bias == NULL && defaults.scoring == MTK_SCORING_SOFTMAX,
        "MTK_ROUTER_PARAMS_INIT");
  EXPECT_STATUS(mtk_moe_route(ctx, &lg, &defaults, &want_w, &want_id, NULL), MTK_SUCCESS, NULL);
  /* Softmax, scaled by 1, not renormalised: e^2 / (e^0.5 + 2 e^2 + e^-1). */
  const float softmax_top = expf(2.0f) / (expf(0.5f) + 2.0f * expf(2.0f) + expf(-1.0f));
  CHECK(want_ids[0] == 1 && want_ids[1] == 3 && fabsf(want_weights[0] - softmax_top) < 1e-6f,
        "defaults: ids %d %d, weight %g, want %g", want_ids[0], want_ids[1], want_weights[0],
        softmax_top);

  /* Older callers: structs ending after k, after scoring and after topk_group. The bytes past
   * struct_size are garbage (a bias pointer, a scale) that the library must not read. */
  const size_t older_sizes[3] = {16, 24, 48};
  for (int v = 0; v < 3; ++v) {
    union {
      mtk_router_params params;
      unsigned char bytes[sizeof(mtk_router_params)];
    } older;
    memset(older.bytes, 0xab, sizeof older.bytes);
    memset(older.bytes, 0, older_sizes[v]);
    older.params.struct_size = older_sizes[v];
    older.params.k = 2;
    if (older_sizes[v] > 16) older.params.scoring = MTK_SCORING_SOFTMAX;
    memset(weights, 0, sizeof weights);
    memset(ids, 0, sizeof ids);
    EXPECT_STATUS(mtk_moe_route(ctx, &lg, &older.params, &w, &id, NULL), MTK_SUCCESS, NULL);
    CHECK(memcmp(weights, want_weights, sizeof weights) == 0 &&
              memcmp(ids, want_ids, sizeof ids) == 0,
          "a %zu-byte struct must route as MTK_ROUTER_PARAMS_INIT's defaults", older_sizes[v]);
  }

  /* A newer caller: a member this library lacks, zero (accepted) or set (rejected). */
  struct {
    mtk_router_params params;
    int64_t future_member;
  } newer;
  memset(&newer, 0, sizeof newer);
  newer.params = defaults;
  newer.params.struct_size = sizeof newer;
  memset(weights, 0, sizeof weights);
  EXPECT_STATUS(mtk_moe_route(ctx, &lg, &newer.params, &w, &id, NULL), MTK_SUCCESS, NULL);
  CHECK(memcmp(weights, want_weights, sizeof weights) == 0, "a zero tail must change nothing");
  newer.future_member = 5;
  memset(weights, 0x7f, sizeof weights);
  expect_params_rejected(ctx, &lg, &newer, sizeof newer, &w, &id, "is not zero", __LINE__);
  CHECK(weights[0] != want_weights[0], "a rejected call wrote its outputs");

  /* Sizes no header ever declared. */
  mtk_router_params bad = defaults;
  bad.struct_size = 0;
  expect_params_rejected(ctx, &lg, &bad, 0, &w, &id, "MTK_ROUTER_PARAMS_INIT", __LINE__);
  bad.struct_size = sizeof(size_t);
  expect_params_rejected(ctx, &lg, &bad, sizeof(size_t), &w, &id, "mandatory", __LINE__);
  bad.struct_size = 20;
  expect_params_rejected(ctx, &lg, &bad, 20, &w, &id, "multiple", __LINE__);
  bad.struct_size = (size_t)-8;
  expect_params_rejected(ctx, &lg, &bad, (size_t)-8, &w, &id, "exceeds", __LINE__);
}

/* Device backends (where this machine has one): the same call through device memory, with
 * the host copies, the allocating variant and the frees a GPU caller goes through. */
static void test_device_backends(void) {
  const float host_input[8] = {0.5f, -2.0f, 9.0f, NAN, 9.0f, -INFINITY, 3.0f, 0.0f};
  const int64_t want_indices[3] = {3, 2, 4};
  for (int b = MTK_BACKEND_CUDA; b <= MTK_BACKEND_MPSGRAPH; ++b) {
    int available = 0;
    mtk_backend_query((mtk_backend)b, NULL, &available);
    if (!available) continue;
    const char* name = mtk_backend_name((mtk_backend)b);
    mtk_context ctx = make_context((mtk_backend)b);
    const int64_t live = mtk_testing_live_allocations();
    void *input = NULL, *values = NULL, *indices = NULL;
    EXPECT_STATUS(mtk_malloc(ctx, sizeof host_input, &input), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_malloc(ctx, 3 * sizeof(float), &values), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_malloc(ctx, 3 * sizeof(int64_t), &indices), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_memcpy(ctx, input, host_input, sizeof host_input,
                             MTK_COPY_HOST_TO_DEVICE, NULL), MTK_SUCCESS, NULL);
    const mtk_tensor in = tensor1d(input, MTK_FLOAT32, 8, 1);
    const mtk_tensor val = tensor1d(values, MTK_FLOAT32, 3, 1);
    const mtk_tensor idx = tensor1d(indices, MTK_INT64, 3, 1);
    EXPECT_STATUS(mtk_topk(ctx, &in, 3, 0, 1, 1, &val, &idx, NULL), MTK_SUCCESS, NULL);
    float got_values[3] = {0};
    int64_t got_indices[3] = {0};
    EXPECT_STATUS(mtk_memcpy(ctx, got_values, values, sizeof got_values,
                             MTK_COPY_DEVICE_TO_HOST, NULL), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_memcpy(ctx, got_indices, indices, sizeof got_indices,
                             MTK_COPY_DEVICE_TO_HOST, NULL), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_SUCCESS, NULL);
    CHECK(memcmp(got_indices, want_indices, sizeof want_indices) == 0 && isnan(got_values[0]) &&
              got_values[1] == 9.0f && got_values[2] == 9.0f,
          "%s: got indices %lld %lld %lld", name, (long long)got_indices[0],
          (long long)got_indices[1], (long long)got_indices[2]);

    mtk_tensor alloc_values, alloc_indices;
    EXPECT_STATUS(mtk_topk_alloc(ctx, &in, 3, 0, 1, 1, MTK_INT32, &alloc_values, &alloc_indices,
                                 NULL), MTK_SUCCESS, NULL);
    int32_t alloc_got[3] = {0};
    EXPECT_STATUS(mtk_memcpy(ctx, alloc_got, alloc_indices.data, sizeof alloc_got,
                             MTK_COPY_DEVICE_TO_HOST, NULL), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_synchronize(ctx, NULL), MTK_SUCCESS, NULL);
    CHECK(alloc_got[0] == 3 && alloc_got[1] == 2 && alloc_got[2] == 4, "%s: alloc indices", name);
    EXPECT_STATUS(mtk_tensor_free(ctx, &alloc_values), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_tensor_free(ctx, &alloc_indices), MTK_SUCCESS, NULL);

    EXPECT_STATUS(mtk_free(ctx, input), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_free(ctx, values), MTK_SUCCESS, NULL);
    EXPECT_STATUS(mtk_free(ctx, indices), MTK_SUCCESS, NULL);
    CHECK(mtk_testing_live_allocations() == live, "%s: leaked %lld allocations", name,
          (long long)(mtk_testing_live_allocations() - live));
    EXPECT_STATUS(mtk_context_destroy(ctx), MTK_SUCCESS, NULL);
    printf("test_abi: %s backend checked\n", name);
  }
}

/* The last-error message belongs to the thread that failed. */
static void* fail_in_thread(void* ctx) {
  float x = 1.0f;
  const mtk_tensor in = tensor1d(&x, MTK_FLOAT32, 1, 1);
  size_t bytes;
  const mtk_status status = mtk_topk_workspace_size(ctx, &in, 7, 0, 1, 1, MTK_INT64, &bytes);
  const int ok = status == MTK_ERROR_INVALID_ARGUMENT &&
                 strstr(mtk_last_error_message(), "k = 7") != NULL;
  return ok ? ctx : NULL;
}

static void test_thread_local_messages(mtk_context ctx) {
  mtk_malloc(ctx, 16, NULL);  /* leaves "out is NULL" on this thread */
  const char* mine = mtk_last_error_message();
  char before[256];
  snprintf(before, sizeof before, "%s", mine);
  pthread_t thread;
  void* result = NULL;
  CHECK(pthread_create(&thread, NULL, fail_in_thread, ctx) == 0, "pthread_create");
  pthread_join(thread, &result);
  CHECK(result == ctx, "the other thread did not see its own message");
  CHECK(strcmp(mtk_last_error_message(), before) == 0, "message changed to '%s' by another thread",
        mtk_last_error_message());
  CHECK(strstr(before, "out") != NULL, "message '%s'", before);
}

int main(void) {
  test_library_functions();
  test_contexts();
  mtk_context ctx = make_context(MTK_BACKEND_CPU);
  test_memory(ctx);
  test_topk_results(ctx);
  test_topk_errors(ctx);
  test_workspace_variant(ctx);
  test_allocating_variant(ctx);
  test_moe_route(ctx);
  test_router_params_versions(ctx);
  test_thread_local_messages(ctx);
  EXPECT_STATUS(mtk_context_destroy(ctx), MTK_SUCCESS, NULL);
  test_device_backends();
  CHECK(mtk_testing_live_allocations() == 0, "%lld allocations outlive every context",
        (long long)mtk_testing_live_allocations());
  if (failures) {
    fprintf(stderr, "test_abi: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_abi: all checks passed\n");
  return 0;
}
