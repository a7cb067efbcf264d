#include "metal_plan_common.hpp"

#include "core/error.hpp"

namespace mtk {

const char* metal_dtype_suffix(mtk_dtype dtype) {
  switch (dtype) {
    case MTK_FLOAT32: return "f32";
    case MTK_FLOAT16: return "f16";
    case MTK_BFLOAT16: return "bf16";
    case MTK_INT8: return "i8";
    case MTK_UINT8: return "u8";
    case MTK_INT16: return "i16";
    case MTK_INT32: return "i32";
    case MTK_INT64: return "i64";
    case MTK_FLOAT64:
      fail(MTK_ERROR_UNSUPPORTED_DTYPE, "dtype float64 is not supported by the Metal backends (Metal has no float64)");
  }
  fail(MTK_ERROR_UNSUPPORTED_DTYPE, "dtype ", static_cast<int>(dtype), " is not supported by the Metal backends");
}

namespace metal_plan_support {

uint32_t to_u32(uint64_t value, const char* what) {
  if (value > UINT32_MAX) fail(MTK_ERROR_INVALID_ARGUMENT, what, " = ", value, " exceeds the Metal grid limit");
  return static_cast<uint32_t>(value);
}

MetalLimits limits_for_pipeline(uint64_t pipeline_max_threads, uint64_t needed, const char* what) {
  MetalLimits limits;
  const uint64_t threads = std::min<uint64_t>(pipeline_max_threads, limits.max_threads) / kSimdWidth * kSimdWidth;
  if (threads < needed) {
    fail(MTK_ERROR_DEVICE, "the Metal ", what, " pipeline allows only ", pipeline_max_threads,
         " threads per threadgroup; it needs ", needed);
  }
  limits.max_threads = static_cast<uint32_t>(threads);
  return limits;
}

int64_t element_offset(size_t bytes, size_t element_size, const char* argument) {
  if (bytes % element_size != 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, argument, " lies ", bytes, " bytes into its Metal buffer, not a multiple of its ",
         element_size, "-byte elements");
  }
  return static_cast<int64_t>(bytes / element_size);
}

ByteExtent extent(const int64_t* sizes, const int64_t* strides, int dims, int64_t dim_size, int64_t dim_stride,
                  size_t element) {
  int64_t low = 0, high = 0;
  auto add = [&](int64_t size, int64_t stride) {
    const int64_t reach = (size - 1) * stride;
    (reach < 0 ? low : high) += reach;
  };
  for (int d = 0; d < dims; ++d) add(sizes[d], strides[d]);
  add(dim_size, dim_stride);
  const int64_t e = static_cast<int64_t>(element);
  return ByteExtent{low * e, static_cast<uint64_t>((high - low) * e + e)};
}

}  // namespace metal_plan_support
}  // namespace mtk
