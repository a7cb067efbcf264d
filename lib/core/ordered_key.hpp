// Every dtype's values map to unsigned keys whose unsigned order is the contract's order for
// `largest` (NaN of any sign/payload above +inf, all NaNs equal, -0.0 == +0.0). For
// largest = false the key is complemented, so every backend only ever selects the largest keys,
// ties to the lower index. Header-only and dependency-free so CPU, CUDA and the tests share it.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MTK_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MTK_HOST_DEVICE inline
#endif

namespace mtk {

// Branch-free, as the CUDA kernels convert every element they hold (loads and conversions were
// over a quarter of the cluster kernel's instructions on the H200 with the branches): a negative
// non-zero value has all its bits flipped, anything else (-0.0 too) its sign bit set, and every
// NaN takes the largest key.
template <class Bits>
MTK_HOST_DEVICE Bits float_bits_to_key(Bits bits, Bits sign_mask, Bits exp_mask) {
  const Bits magnitude = Bits(bits & Bits(~sign_mask));
  const Bits key = bits > sign_mask ? Bits(~bits) : Bits(magnitude | sign_mask);
  return magnitude > exp_mask ? Bits(~Bits(0)) : key;
}

// The inverse where a key has one value: false for the keys that several values share (every
// NaN; -0.0 and +0.0), whose bits only the input holds.
template <class Bits>
MTK_HOST_DEVICE bool float_bits_from_key(Bits key, Bits sign_mask, Bits& bits) {
  if (key == Bits(~Bits(0)) || key == sign_mask) return false;
  bits = (key & sign_mask) ? Bits(key & Bits(~sign_mask)) : Bits(~key);
  return true;
}

MTK_HOST_DEVICE uint32_t key_from_f32_bits(uint32_t b) {
  return float_bits_to_key<uint32_t>(b, 0x80000000u, 0x7f800000u);
}
MTK_HOST_DEVICE uint64_t key_from_f64_bits(uint64_t b) {
  return float_bits_to_key<uint64_t>(b, 0x8000000000000000ull, 0x7ff0000000000000ull);
}
MTK_HOST_DEVICE uint16_t key_from_f16_bits(uint16_t b) {
  return float_bits_to_key<uint16_t>(b, 0x8000, 0x7c00);
}
MTK_HOST_DEVICE uint16_t key_from_bf16_bits(uint16_t b) {
  return float_bits_to_key<uint16_t>(b, 0x8000, 0x7f80);
}
MTK_HOST_DEVICE uint8_t key_from_i8(int8_t v) { return uint8_t(uint8_t(v) ^ 0x80u); }
MTK_HOST_DEVICE uint8_t key_from_u8(uint8_t v) { return v; }
MTK_HOST_DEVICE uint16_t key_from_i16(int16_t v) { return uint16_t(uint16_t(v) ^ 0x8000u); }
MTK_HOST_DEVICE uint32_t key_from_i32(int32_t v) { return uint32_t(v) ^ 0x80000000u; }
MTK_HOST_DEVICE uint64_t key_from_i64(int64_t v) { return uint64_t(v) ^ 0x8000000000000000ull; }

// Storage types: bit patterns of the 16-bit floats are carried as distinct wrapper types so the
// per-dtype traits below can be selected by type.
struct f16_bits { uint16_t bits; };
struct bf16_bits { uint16_t bits; };

// Each KeyTraits<T> gives the key of a value (key) and, where only one value has the key, that
// value's bits (value_bits; keys and values have the same width).
template <class T> struct KeyTraits;
template <> struct KeyTraits<float> {
  using Key = uint32_t;
  static MTK_HOST_DEVICE Key key(float v) { uint32_t b; std::memcpy(&b, &v, 4); return key_from_f32_bits(b); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<uint32_t>(key, 0x80000000u, bits);
  }
};
template <> struct KeyTraits<double> {
  using Key = uint64_t;
  static MTK_HOST_DEVICE Key key(double v) { uint64_t b; std::memcpy(&b, &v, 8); return key_from_f64_bits(b); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<uint64_t>(key, 0x8000000000000000ull, bits);
  }
};
template <> struct KeyTraits<f16_bits> {
  using Key = uint16_t;
  static MTK_HOST_DEVICE Key key(f16_bits v) { return key_from_f16_bits(v.bits); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<uint16_t>(key, 0x8000, bits);
  }
};
template <> struct KeyTraits<bf16_bits> {
  using Key = uint16_t;
  static MTK_HOST_DEVICE Key key(bf16_bits v) { return key_from_bf16_bits(v.bits); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<uint16_t>(key, 0x8000, bits);
  }
};
template <> struct KeyTraits<int8_t> {
  using Key = uint8_t;
  static MTK_HOST_DEVICE Key key(int8_t v) { return key_from_i8(v); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    bits = uint8_t(key ^ 0x80u);
    return true;
  }
};
template <> struct KeyTraits<uint8_t> {
  using Key = uint8_t;
  static MTK_HOST_DEVICE Key key(uint8_t v) { return key_from_u8(v); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    bits = key;
    return true;
  }
};
template <> struct KeyTraits<int16_t> {
  using Key = uint16_t;
  static MTK_HOST_DEVICE Key key(int16_t v) { return key_from_i16(v); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    bits = uint16_t(key ^ 0x8000u);
    return true;
  }
};
template <> struct KeyTraits<int32_t> {
  using Key = uint32_t;
  static MTK_HOST_DEVICE Key key(int32_t v) { return key_from_i32(v); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    bits = key ^ 0x80000000u;
    return true;
  }
};
template <> struct KeyTraits<int64_t> {
  using Key = uint64_t;
  static MTK_HOST_DEVICE Key key(int64_t v) { return key_from_i64(v); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    bits = key ^ 0x8000000000000000ull;
    return true;
  }
};

// The key to select the largest of: complemented when the smallest are wanted.
template <class T>
MTK_HOST_DEVICE typename KeyTraits<T>::Key selection_key(T v, bool largest) {
  auto k = KeyTraits<T>::key(v);
  return largest ? k : decltype(k)(~k);
}

// The bits of the one value whose selection_key is `key`; false where several values share it.
template <class T>
MTK_HOST_DEVICE bool value_bits_of_selection_key(typename KeyTraits<T>::Key key, bool largest,
                                                 typename KeyTraits<T>::Key& bits) {
  using Key = typename KeyTraits<T>::Key;
  return KeyTraits<T>::value_bits(largest ? key : Key(~key), bits);
}

}  // namespace mtk
