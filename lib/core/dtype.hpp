// The one table of element types: size, name and how values map to ordered keys.
#pragma once

#include <cstddef>
#include <cstdint>

#include "metaltopk.h"

namespace mtk {

enum class DtypeKind { Float, SignedInt, UnsignedInt };

struct DtypeInfo {
  mtk_dtype dtype;
  const char* name;
  size_t size;
  DtypeKind kind;
};

// nullptr for values outside the mtk_dtype enum.
const DtypeInfo* dtype_info(mtk_dtype dtype) noexcept;
// The info, or throws MTK_ERROR_UNSUPPORTED_DTYPE naming `argument`.
const DtypeInfo& require_dtype(mtk_dtype dtype, const char* argument);
const char* dtype_name(mtk_dtype dtype) noexcept;  // "unknown" outside the enum

}  // namespace mtk
