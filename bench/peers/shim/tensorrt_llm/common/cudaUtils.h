// Shim (bench/peers) for TensorRT-LLM's common/cudaUtils.h as FlashInfer's noAuxTcKernels.cu uses
// it: TLLM_CHECK_WITH_INFO (print and abort; the harness passes only supported shapes) and
// sync_check_cuda_error (a no-op, as the real one is outside debug builds).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace tensorrt_llm::common {}

#define TLLM_CHECK_WITH_INFO(cond, ...)                                          \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "peer check failed at %s:%d: ", __FILE__, __LINE__);  \
      std::fprintf(stderr, __VA_ARGS__);                                         \
      std::fprintf(stderr, "\n");                                                \
      std::abort();                                                              \
    }                                                                            \
  } while (0)

#define sync_check_cuda_error(stream) ((void)(stream))
