// The range of each enum of the C ABI, written once: the validation of a caller's raw enum
// values, the backend registry's table and the tests that sweep an enum read these bounds, so an
// enumerator added to metaltopk.h moves one line here instead of every check.
#pragma once

#include "metaltopk.h"

namespace mtk {

constexpr int kFirstDtype = MTK_FLOAT32;
constexpr int kLastDtype = MTK_INT64;
constexpr int kFirstBackend = MTK_BACKEND_DEFAULT;
constexpr int kLastBackend = MTK_BACKEND_MPSGRAPH;
constexpr int kBackendKinds = kLastBackend + 1;  // slots of a table indexed by mtk_backend
constexpr int kLastStatus = MTK_ERROR_INTERNAL;
constexpr int kFirstSamplingOp = MTK_SAMPLING_TOP_K_MASK_LOGITS;
constexpr int kLastSamplingOp = MTK_SAMPLING_SAMPLE_FROM_LOGITS;

constexpr bool is_known_dtype(int raw) { return raw >= kFirstDtype && raw <= kLastDtype; }
constexpr bool is_known_backend(int raw) { return raw >= kFirstBackend && raw <= kLastBackend; }

}  // namespace mtk
