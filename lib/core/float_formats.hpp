// Float formats by their bit patterns, one copy for every backend: the masks of f32, f64, f16 and
// bf16, the order-preserving key of a pattern and its inverse, the exact widening of f16 and bf16
// to f32, and (key, index) packing. Values are copied and ranked by their bits, so every backend
// computing these the same way is what keeps results bit-identical across them.
//
// Read by three kinds of compiler: host C++17, nvcc (MTK_HOST_DEVICE is __host__ __device__), and
// the Metal kernels (Apple's compiler at run time; clang as C++ for OpenCL on Linux), which get
// the first part only. That part is integer arithmetic on value parameters: no standard headers,
// no references (Metal wants an address space on each), no static data members (program-scope
// data needs one too), masks as enumerators. lib/metal/metal.mk embeds this file ahead of the
// kernels.
#pragma once

#if defined(__METAL_VERSION__) || defined(MTK_COMPAT_STDLIB)
#define MTK_FLOAT_FORMATS_METAL 1
#define MTK_HOST_DEVICE inline
#else
#include <cstdint>
#include <cstring>
#if defined(__CUDACC__)
#define MTK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MTK_HOST_DEVICE inline
#endif
#endif

namespace mtk {

#if defined(MTK_FLOAT_FORMATS_METAL)
// Metal spells these ushort, uint and ulong (C++ for OpenCL has no <cstdint> names at all).
typedef ushort uint16_t;
typedef uint uint32_t;
typedef ulong uint64_t;
#endif

// Sign and exponent masks. A pattern's magnitude (the bits below the sign) is above the exponent
// mask exactly when it is a NaN.
enum : uint32_t { kF32Sign = 0x80000000u, kF32Exponent = 0x7f800000u };
enum : uint16_t { kF16Sign = 0x8000u, kF16Exponent = 0x7c00u, kBF16Exponent = 0x7f80u };

// The key of a float's bits: unsigned order of keys is the contract's order (NaN of any sign or
// payload above +inf, all NaNs equal, -0.0 == +0.0). `Word` may be wider than the format (16-bit
// formats in 32-bit registers); the key then fills the format's width only. Branch-free, as the
// GPU kernels key every element they hold: a negative non-zero value has all its bits flipped,
// anything else (-0.0 too) its sign bit set, and every NaN takes the largest key.
template <class Word>
MTK_HOST_DEVICE Word float_bits_to_key(Word bits, Word sign, Word exponent) {
  const Word all = Word(sign | Word(sign - 1u));
  const Word magnitude = Word(bits & Word(sign - 1u));
  const Word key = bits > sign ? Word(~bits & all) : Word(bits | sign);
  return magnitude > exponent ? all : key;
}

// The bits of a value whose key is `key`: the one value for most keys; for keys that several
// values share, one of them (+0.0 for the zeros, a NaN for NaN's), so that what keys forget (the
// sign of zero, NaN payloads) is all that differs.
template <class Word>
MTK_HOST_DEVICE Word key_to_float_bits(Word key, Word sign) {
  const Word all = Word(sign | Word(sign - 1u));
  return (key & sign) != 0u ? Word(key & Word(sign - 1u)) : Word(~key & all);
}

MTK_HOST_DEVICE uint32_t key_from_f32_bits(uint32_t b) {
  return float_bits_to_key<uint32_t>(b, kF32Sign, kF32Exponent);
}
MTK_HOST_DEVICE uint16_t key_from_f16_bits(uint16_t b) {
  return float_bits_to_key<uint16_t>(b, kF16Sign, kF16Exponent);
}
MTK_HOST_DEVICE uint16_t key_from_bf16_bits(uint16_t b) {
  return float_bits_to_key<uint16_t>(b, kF16Sign, kBF16Exponent);
}
MTK_HOST_DEVICE uint32_t f32_bits_from_key(uint32_t key) {
  return key_to_float_bits<uint32_t>(key, kF32Sign);
}

// bf16 is the high half of an f32.
MTK_HOST_DEVICE uint32_t bf16_to_f32_bits(uint16_t b) { return uint32_t(b) << 16; }

// IEEE half to float bits, exact for every value (subnormals normalised, infinities, NaN
// payloads kept).
MTK_HOST_DEVICE uint32_t f16_to_f32_bits(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (uint32_t(h) >> 10) & 0x1fu;
  uint32_t mantissa = uint32_t(h) & 0x3ffu;
  if (exponent == 0x1fu) return sign | 0x7f800000u | (mantissa << 13);
  if (exponent != 0u) return sign | ((exponent + 112u) << 23) | (mantissa << 13);
  if (mantissa == 0u) return sign;
  // Subnormal, mantissa * 2^-24: shift the leading one up to the implicit bit.
  uint32_t biased_exponent = 113u;
  while ((mantissa & 0x400u) == 0u) {
    mantissa <<= 1;
    --biased_exponent;
  }
  return sign | (biased_exponent << 23) | ((mantissa & 0x3ffu) << 13);
}

#if defined(MTK_FLOAT_FORMATS_METAL)
MTK_HOST_DEVICE float float_from_bits(uint32_t bits) { return as_type<float>(bits); }
MTK_HOST_DEVICE uint32_t bits_from_float(float value) { return as_type<uint32_t>(value); }
#else
MTK_HOST_DEVICE float float_from_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

MTK_HOST_DEVICE uint32_t bits_from_float(float value) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}
#endif

MTK_HOST_DEVICE uint32_t key_from_f32(float value) { return key_from_f32_bits(bits_from_float(value)); }

// The float of a key, up to what keys forget (the sign of zero, NaN payloads): the routers' group
// scores are sums of keyed selection scores, where neither is observable.
MTK_HOST_DEVICE float float_from_key(uint32_t key) { return float_from_bits(f32_bits_from_key(key)); }

MTK_HOST_DEVICE float bf16_to_f32(uint16_t b) { return float_from_bits(bf16_to_f32_bits(b)); }

MTK_HOST_DEVICE float f16_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  return float_from_bits(f16_to_f32_bits(h));
#endif
}

#if !defined(MTK_FLOAT_FORMATS_METAL)  // host and CUDA only from here

MTK_HOST_DEVICE double double_from_bits(uint64_t bits) {
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

MTK_HOST_DEVICE uint64_t bits_from_double(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Storage of the 16-bit floats: their bit patterns as distinct types, so that per-dtype traits
// can be selected by type.
struct f16_bits { uint16_t bits; };
struct bf16_bits { uint16_t bits; };

// Each float type's layout: `Bits` holds a value, kSign and kExponent are its masks, and values
// widen exactly to `Wide` (the type comparisons of values run in).
template <class T> struct FloatFormat;
template <> struct FloatFormat<float> {
  using Bits = uint32_t;
  using Wide = float;
  static constexpr Bits kSign = kF32Sign, kExponent = kF32Exponent;
  static MTK_HOST_DEVICE Wide widen_bits(Bits b) { return float_from_bits(b); }
  static MTK_HOST_DEVICE Wide widen(float v) { return v; }
};
template <> struct FloatFormat<double> {
  using Bits = uint64_t;
  using Wide = double;
  static constexpr Bits kSign = 0x8000000000000000ull, kExponent = 0x7ff0000000000000ull;
  static MTK_HOST_DEVICE Wide widen_bits(Bits b) { return double_from_bits(b); }
  static MTK_HOST_DEVICE Wide widen(double v) { return v; }
};
template <> struct FloatFormat<f16_bits> {
  using Bits = uint16_t;
  using Wide = float;
  static constexpr Bits kSign = kF16Sign, kExponent = kF16Exponent;
  static MTK_HOST_DEVICE Wide widen_bits(Bits b) { return f16_to_f32(b); }
  static MTK_HOST_DEVICE Wide widen(f16_bits v) { return widen_bits(v.bits); }
};
template <> struct FloatFormat<bf16_bits> {
  using Bits = uint16_t;
  using Wide = float;
  static constexpr Bits kSign = kF16Sign, kExponent = kBF16Exponent;
  static MTK_HOST_DEVICE Wide widen_bits(Bits b) { return bf16_to_f32(b); }
  static MTK_HOST_DEVICE Wide widen(bf16_bits v) { return widen_bits(v.bits); }
};

MTK_HOST_DEVICE uint64_t key_from_f64_bits(uint64_t b) {
  return float_bits_to_key<uint64_t>(b, FloatFormat<double>::kSign, FloatFormat<double>::kExponent);
}

// (key, index) in one unsigned word, the key above kIndexBits of index field: a larger word is a
// better element (higher key, then lower index), so one unsigned maximum selects. The field holds
// kIndexTop - index, kIndexTop being the field's largest value less kReserved: with kReserved = 1
// no real element's word is all ones whatever its key, which leaves ~0 free for "above
// everything"; with kReserved = 0 the field is the index complemented. A word whose key is 0 and
// whose field is 0 is 0, below every element with a higher key ("nothing" where no key is 0).
template <class Packed, int kIndexBits, uint32_t kReserved = 0>
struct KeyIndexPacking {
  static constexpr uint32_t kFieldMask = uint32_t((uint64_t{1} << kIndexBits) - 1);
  static constexpr uint32_t kIndexTop = kFieldMask - kReserved;

  // Without a reserved value, kIndexTop - index is ~index within the field: written so, it is one
  // logic instruction, as the callers had it (the subtraction cost the 16-bit warp top-k kernels
  // registers).
  static MTK_HOST_DEVICE uint32_t field(uint32_t index) {
    return kReserved == 0 ? (~index & kFieldMask) : kIndexTop - index;
  }
  // A word from a key and a field (field(index), or one counted down from it).
  template <class Key>
  static MTK_HOST_DEVICE Packed pack_field(Key key, uint32_t index_field) {
    return Packed(Packed(key) << kIndexBits) | Packed(index_field);
  }
  template <class Key>
  static MTK_HOST_DEVICE Packed pack(Key key, uint32_t index) {
    return pack_field(key, field(index));
  }
  static MTK_HOST_DEVICE uint32_t index(Packed word) {
    return kReserved == 0 ? (~uint32_t(word) & kFieldMask)
                          : kIndexTop - (uint32_t(word) & kFieldMask);
  }
  static MTK_HOST_DEVICE Packed key(Packed word) { return Packed(word >> kIndexBits); }
};

#endif

}  // namespace mtk
