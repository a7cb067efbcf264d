// The descriptor checks every validation shares (validate.cpp defines them): structure, extent,
// output shape, self-overlap and overlap between tensors.
#pragma once

#include <cstdint>

#include "dtype.hpp"
#include "metaltopk.h"
#include "validate.hpp"

namespace mtk {

// The byte interval [first, last] a tensor's elements occupy (empty tensors occupy none).
struct ByteSpan {
  bool empty = true;
  uintptr_t first = 0, last = 0;
};

struct CheckedTensor {
  const DtypeInfo* dtype = nullptr;
  int64_t numel = 0;
  ByteSpan span;
};

// Structural checks common to every descriptor: pointer, rank, sizes, element count, extent.
CheckedTensor check_descriptor(const mtk_tensor* t, const char* name, bool data_required = true);
// An output must not write one element twice.
void check_no_self_overlap(const mtk_tensor& t, const char* name);
void check_disjoint(const ByteSpan& a, const char* a_name, const ByteSpan& b, const char* b_name);
void check_output_shape(const mtk_tensor& t, const char* name, const OutputShape& expected);

}  // namespace mtk
