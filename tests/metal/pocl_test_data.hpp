// What the PoCL harnesses share about test data: element sizes, raw bits, the bit patterns that
// stress the contract (NaNs, infinities, both zeros, ties), and tensors in host memory.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "metaltopk.h"

namespace mtk_pocl {

inline size_t dtype_size(mtk_dtype d) {
  switch (d) {
    case MTK_INT8: case MTK_UINT8: return 1;
    case MTK_FLOAT16: case MTK_BFLOAT16: case MTK_INT16: return 2;
    case MTK_FLOAT32: case MTK_INT32: return 4;
    default: return 8;
  }
}

inline uint64_t load_bits(const unsigned char* p, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, p, size);  // little-endian host
  return v;
}

// NaNs of both signs and several payloads, infinities, both zeros, and a few ordinary values
// that repeat (ties).
inline std::vector<uint64_t> special_bits(mtk_dtype d) {
  switch (d) {
    case MTK_FLOAT32: return {0x7fc00000, 0xffc00001, 0x7f800001, 0x7f800000, 0xff800000, 0, 0x80000000, 0x3f800000, 0xbf800000, 0x461c4000};
    case MTK_FLOAT16: return {0x7e00, 0xfe01, 0x7c01, 0x7c00, 0xfc00, 0, 0x8000, 0x3c00, 0xbc00, 0x70e2};
    case MTK_BFLOAT16: return {0x7fc0, 0xffc1, 0x7f81, 0x7f80, 0xff80, 0, 0x8000, 0x3f80, 0xbf80, 0x461c};
    case MTK_INT8: return {0x80, 0x7f, 0, 0xff, 1, 2};
    case MTK_UINT8: return {0, 0xff, 1, 2, 0x80};
    case MTK_INT16: return {0x8000, 0x7fff, 0, 0xffff, 1, 2};
    case MTK_INT32: return {0x80000000, 0x7fffffff, 0, 0xffffffff, 1, 2};
    default: return {0x8000000000000000ull, 0x7fffffffffffffffull, 0, ~0ull, 1, 2};
  }
}

inline const mtk_dtype kDtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_INT8,
                                    MTK_UINT8,   MTK_INT16,   MTK_INT32,    MTK_INT64};

// A tensor in host memory: its bytes, and its descriptor with the data bound at the call (until
// then the bytes may still move).
struct HostTensor {
  std::vector<unsigned char> bytes;
  mtk_tensor descriptor{};

  mtk_tensor bound() {
    mtk_tensor d = descriptor;
    d.data = bytes.data();
    return d;
  }
};

// A vector of `size` elements `stride` apart, every byte `fill` until the caller writes them.
inline HostTensor host_vector(mtk_dtype dtype, int64_t size, int64_t stride, unsigned char fill) {
  HostTensor t;
  t.bytes.assign(size_t(std::max<int64_t>((size - 1) * stride + 1, 1)) * dtype_size(dtype), fill);
  t.descriptor.dtype = dtype;
  t.descriptor.ndim = 1;
  t.descriptor.sizes[0] = size;
  t.descriptor.strides[0] = stride;
  return t;
}

}  // namespace mtk_pocl
