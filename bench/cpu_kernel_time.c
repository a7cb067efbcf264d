/* Single-thread CPU time of the CPU backend on the CPU shapes of bench/bench_cpu.py (f32, normal
 * data), read with CLOCK_PROCESS_CPUTIME_ID so that other jobs on a shared machine do not count
 * (bench/CPU_NOTES.md). Prints the minimum of `repeats` calls, in ms. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "metaltopk.h"

static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

/* Standard normal numbers from a fixed xorshift seed (Box-Muller). */
static void fill_normal(float* x, int64_t count) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < count; ++i) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const double u1 = ((s >> 11) + 1.0) / 9007199254740993.0;
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    const double u2 = (s >> 11) / 9007199254740992.0;
    x[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? atoi(argv[1]) : 30;
  const struct { int64_t rows, n, k; int dim; const char* name; } shapes[] = {
      {4096, 256, 8, -1, "4096x256, 8"},          {16384, 128, 8, -1, "16384x128, 8"},
      {256, 4096, 8, 0, "256x4096 dim 0, 8"},     {64, 151936, 50, -1, "64x151936, 50"},
      {8, 151936, 1024, -1, "8x151936, 1024"},    {1, 1 << 24, 100, -1, "1x2^24, 100"},
      {1, 1 << 22, 10000, -1, "1x2^22, 10000"},
  };
  mtk_context ctx;
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) != MTK_SUCCESS ||
      mtk_context_set_num_threads(ctx, 1) != MTK_SUCCESS) {
    fprintf(stderr, "%s\n", mtk_last_error_message());
    return 1;
  }
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    const int64_t rows = shapes[s].rows, n = shapes[s].n, k = shapes[s].k;
    /* dim 0 means the experts run down the columns of a [n, rows] matrix. */
    const int dim0 = shapes[s].dim == 0;
    float* x = malloc(sizeof(float) * rows * n);
    float* values = malloc(sizeof(float) * rows * k);
    int64_t* indices = malloc(sizeof(int64_t) * rows * k);
    if (!x || !values || !indices) return 1;
    fill_normal(x, rows * n);
    mtk_tensor in = {x, MTK_FLOAT32, 2, {dim0 ? n : rows, dim0 ? rows : n}, {dim0 ? rows : n, 1}};
    mtk_tensor v = {values, MTK_FLOAT32, 2, {dim0 ? k : rows, dim0 ? rows : k}, {dim0 ? rows : k, 1}};
    mtk_tensor i = {indices, MTK_INT64, 2, {dim0 ? k : rows, dim0 ? rows : k}, {dim0 ? rows : k, 1}};
    double best = INFINITY;
    for (int r = 0; r < repeats; ++r) {
      const double start = cpu_ms();
      if (mtk_topk(ctx, &in, k, dim0 ? 0 : -1, 1, 1, &v, &i, NULL) != MTK_SUCCESS) {
        fprintf(stderr, "%s\n", mtk_last_error_message());
        return 1;
      }
      const double elapsed = cpu_ms() - start;
      if (elapsed < best) best = elapsed;
    }
    printf("| %s | %.2f |\n", shapes[s].name, best);
    free(x), free(values), free(indices);
  }
  mtk_context_destroy(ctx);
  return 0;
}
