// What the CUDA conformance programs (cuda_conformance.cpp, cuda_ragged_conformance.cpp,
// cuda_sampling_conformance.cpp) share: a check that ends the run at a failed call, dtype sizes
// and names, and the start of main. The sampling kernel's emulation
// (emulation/test_sampling_kernels.cpp) reaches the CPU backend with the same check.
#pragma once

#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include "metaltopk.h"

#define CHECK_OK(call)                                                                   \
  do {                                                                                   \
    const mtk_status s_ = (call);                                                        \
    if (s_ != MTK_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call,           \
                   mtk_status_string(s_), mtk_last_error_message());                     \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// For the programs that include cuda_runtime.h themselves: cuda_conformance.cpp reaches CUDA
// only through the library and builds without the CUDA headers.
#define CHECK_CUDA(call)                                                                 \
  do {                                                                                   \
    const cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call,               \
                   cudaGetErrorString(e_));                                              \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

namespace conformance {

// Both indexed by mtk_dtype, whose values are 0 to 8 in this order.
inline size_t dtype_size(mtk_dtype d) {
  static const size_t sizes[] = {4, 2, 2, 8, 1, 1, 2, 4, 8};
  return sizes[d];
}

inline const char* dtype_label(mtk_dtype d) {
  static const char* names[] = {"f32", "f16", "bf16", "f64", "i8", "u8", "i16", "i32", "i64"};
  return names[d];
}

// The start of main. Standard output becomes line-buffered even into a file, so that a run its
// caller's time limit cuts short still shows how far it got. False, having said why, where the
// CUDA backend cannot run: main then exits 2, which the make targets count as skipped.
inline bool cuda_backend_runs() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int compiled = 0, available = 0;
  CHECK_OK(mtk_backend_query(MTK_BACKEND_CUDA, &compiled, &available));
  if (!compiled || !available) {
    std::printf("CUDA backend compiled=%d available=%d: nothing to test here\n", compiled,
                available);
    return false;
  }
  return true;
}

// The backend under test and the one its results must equal bit for bit.
struct Contexts {
  mtk_context cuda, cpu;
};

inline Contexts create_contexts() {
  Contexts ctx{};
  CHECK_OK(mtk_context_create(MTK_BACKEND_CUDA, 0, &ctx.cuda));
  CHECK_OK(mtk_context_create(MTK_BACKEND_CPU, 0, &ctx.cpu));
  return ctx;
}

}  // namespace conformance
