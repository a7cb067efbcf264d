// Which backends this build has: the Makefile defines MTK_HAVE_CUDA / MTK_HAVE_METAL when the
// corresponding folder was compiled in, so this is the only file that knows.
#include "context.hpp"
#include "error.hpp"

namespace mtk {

bool backend_compiled(mtk_backend backend) {
  switch (backend) {
    case MTK_BACKEND_DEFAULT:
    case MTK_BACKEND_CPU:
      return true;
    case MTK_BACKEND_CUDA:
#if defined(MTK_HAVE_CUDA)
      return true;
#else
      return false;
#endif
    case MTK_BACKEND_METAL:
    case MTK_BACKEND_MPSGRAPH:
#if defined(MTK_HAVE_METAL)
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool backend_available(mtk_backend backend) {
  if (!backend_compiled(backend)) return false;
  switch (backend) {
#if defined(MTK_HAVE_CUDA)
    case MTK_BACKEND_CUDA:
      return cuda_backend_available();
#endif
#if defined(MTK_HAVE_METAL)
    case MTK_BACKEND_METAL:
    case MTK_BACKEND_MPSGRAPH:
      return metal_backend_available();
#endif
    default:
      return true;
  }
}

mtk_backend resolve_default_backend() {
  if (backend_available(MTK_BACKEND_CUDA)) return MTK_BACKEND_CUDA;
  if (backend_available(MTK_BACKEND_METAL)) return MTK_BACKEND_METAL;
  return MTK_BACKEND_CPU;
}

std::unique_ptr<Backend> create_backend(mtk_backend backend, int device_index) {
  if (backend == MTK_BACKEND_DEFAULT) backend = resolve_default_backend();
  if (device_index < 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "device_index = ", device_index, " is negative");
  }
  switch (backend) {
    case MTK_BACKEND_CPU:
      return make_cpu_backend(device_index);
    case MTK_BACKEND_CUDA:
#if defined(MTK_HAVE_CUDA)
      return make_cuda_backend(device_index);
#else
      fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend 'cuda' is not compiled into this library");
#endif
    case MTK_BACKEND_METAL:
#if defined(MTK_HAVE_METAL)
      return make_metal_backend(device_index);
#else
      fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend 'metal' is not compiled into this library");
#endif
    case MTK_BACKEND_MPSGRAPH:
#if defined(MTK_HAVE_METAL)
      return make_mpsgraph_backend(device_index);
#else
      fail(MTK_ERROR_BACKEND_UNAVAILABLE, "backend 'mpsgraph' is not compiled into this library");
#endif
    case MTK_BACKEND_DEFAULT:
      break;
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, "backend = ", static_cast<int>(backend),
       " is not a known mtk_backend");
}

}  // namespace mtk
