// Every dtype's values map to unsigned keys whose unsigned order is the contract's order for
// `largest` (NaN of any sign/payload above +inf, all NaNs equal, -0.0 == +0.0). For
// largest = false the key is complemented, so every backend only ever selects the largest keys,
// ties to the lower index. Header-only and dependency-free so CPU, CUDA and the tests share it.
#pragma once

#include <cstdint>

#include "float_formats.hpp"

namespace mtk {

// The inverse of a float key where the key has one value: false for the keys that several values
// share (every NaN; -0.0 and +0.0), whose bits only the input holds.
template <class Bits>
MTK_HOST_DEVICE bool float_bits_from_key(Bits key, Bits sign_mask, Bits& bits) {
  if (key == Bits(~Bits(0)) || key == sign_mask) return false;
  bits = key_to_float_bits<Bits>(key, sign_mask);
  return true;
}

MTK_HOST_DEVICE uint8_t key_from_i8(int8_t v) { return uint8_t(uint8_t(v) ^ 0x80u); }
MTK_HOST_DEVICE uint8_t key_from_u8(uint8_t v) { return v; }
MTK_HOST_DEVICE uint16_t key_from_i16(int16_t v) { return uint16_t(uint16_t(v) ^ 0x8000u); }
MTK_HOST_DEVICE uint32_t key_from_i32(int32_t v) { return uint32_t(v) ^ 0x80000000u; }
MTK_HOST_DEVICE uint64_t key_from_i64(int64_t v) { return uint64_t(v) ^ 0x8000000000000000ull; }

// Each KeyTraits<T> gives the key of a value (key) and, where only one value has the key, that
// value's bits (value_bits; keys and values have the same width).
template <class T> struct KeyTraits;
template <> struct KeyTraits<float> {
  using Key = uint32_t;
  static MTK_HOST_DEVICE Key key(float v) { return key_from_f32(v); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<Key>(key, FloatFormat<float>::kSign, bits);
  }
};
template <> struct KeyTraits<double> {
  using Key = uint64_t;
  static MTK_HOST_DEVICE Key key(double v) { return key_from_f64_bits(bits_from_double(v)); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<Key>(key, FloatFormat<double>::kSign, bits);
  }
};
template <> struct KeyTraits<f16_bits> {
  using Key = uint16_t;
  static MTK_HOST_DEVICE Key key(f16_bits v) { return key_from_f16_bits(v.bits); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<Key>(key, FloatFormat<f16_bits>::kSign, bits);
  }
};
template <> struct KeyTraits<bf16_bits> {
  using Key = uint16_t;
  static MTK_HOST_DEVICE Key key(bf16_bits v) { return key_from_bf16_bits(v.bits); }
  static MTK_HOST_DEVICE bool value_bits(Key key, Key& bits) {
    return float_bits_from_key<Key>(key, FloatFormat<bf16_bits>::kSign, bits);
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
