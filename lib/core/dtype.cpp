#include "dtype.hpp"

#include "abi_enums.hpp"
#include "error.hpp"

namespace mtk {
namespace {
constexpr DtypeInfo kDtypes[] = {
    {MTK_FLOAT32, "float32", 4, DtypeKind::Float},
    {MTK_FLOAT16, "float16", 2, DtypeKind::Float},
    {MTK_BFLOAT16, "bfloat16", 2, DtypeKind::Float},
    {MTK_FLOAT64, "float64", 8, DtypeKind::Float},
    {MTK_INT8, "int8", 1, DtypeKind::SignedInt},
    {MTK_UINT8, "uint8", 1, DtypeKind::UnsignedInt},
    {MTK_INT16, "int16", 2, DtypeKind::SignedInt},
    {MTK_INT32, "int32", 4, DtypeKind::SignedInt},
    {MTK_INT64, "int64", 8, DtypeKind::SignedInt},
};
static_assert(sizeof kDtypes / sizeof kDtypes[0] == kLastDtype - kFirstDtype + 1,
              "one entry for every mtk_dtype");
}  // namespace

const DtypeInfo* dtype_info(mtk_dtype dtype) noexcept {
  for (const DtypeInfo& info : kDtypes) {
    if (info.dtype == dtype) return &info;
  }
  return nullptr;
}

const DtypeInfo& require_dtype(mtk_dtype dtype, const char* argument) {
  const DtypeInfo* info = dtype_info(dtype);
  if (info == nullptr) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, argument, " = ", static_cast<int>(dtype),
         " is not a known mtk_dtype");
  }
  return *info;
}

const char* dtype_name(mtk_dtype dtype) noexcept {
  const DtypeInfo* info = dtype_info(dtype);
  return info != nullptr ? info->name : "unknown";
}

}  // namespace mtk
