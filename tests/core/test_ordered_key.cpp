// value_bits_of_selection_key (lib/core/ordered_key.hpp) against selection_key: for every value
// tried, in both directions, the inverse of its key either gives back its exact bits or, for
// exactly the keys several values share (NaNs, -0.0 and +0.0), declines. 8- and 16-bit types:
// every bit pattern; 32- and 64-bit: specials and random patterns.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/ordered_key.hpp"

namespace {

int failures = 0;

template <class T, class Key>
void check_value(const char* type, Key bits, bool shared_key) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  for (const bool largest : {true, false}) {
    const Key key = mtk::selection_key(value, largest);
    Key back = 0;
    const bool found = mtk::value_bits_of_selection_key<T>(key, largest, back);
    const bool ok = shared_key ? !found : (found && back == bits);
    if (!ok && ++failures <= 10) {
      std::printf("%s bits=%llx largest=%d: found=%d back=%llx\n", type, (unsigned long long)bits,
                  int(largest), int(found), (unsigned long long)back);
    }
  }
}

// A float format's bits share their key with others when NaN or a zero of either sign.
template <class Key>
bool float_key_shared(Key bits, Key sign_mask, Key exp_mask, Key mant_mask) {
  const bool nan = (bits & exp_mask) == exp_mask && (bits & mant_mask) != 0;
  return nan || (bits & Key(~sign_mask)) == 0;
}

template <class T, class Key>
void check_all_16(const char* type, Key exp_mask, Key mant_mask, bool is_float) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const Key bits = Key(b);
    const bool shared = is_float && float_key_shared<Key>(bits, 0x8000, exp_mask, mant_mask);
    check_value<T>(type, bits, shared);
  }
}

template <class T, class Key>
void check_wide(const char* type, Key sign_mask, Key exp_mask, Key mant_mask, bool is_float,
                std::mt19937_64& rng) {
  std::vector<Key> patterns = {Key(0), sign_mask, Key(sign_mask - 1), Key(~Key(0)), exp_mask,
                               Key(exp_mask | sign_mask), Key(exp_mask | 1), Key(1),
                               Key(sign_mask | 1), mant_mask};
  for (int i = 0; i < 200000; ++i) patterns.push_back(Key(rng()));
  for (const Key bits : patterns) {
    const bool shared = is_float && float_key_shared<Key>(bits, sign_mask, exp_mask, mant_mask);
    check_value<T>(type, bits, shared);
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(12345);
  for (uint32_t b = 0; b <= 0xffu; ++b) {
    check_value<int8_t>("i8", uint8_t(b), false);
    check_value<uint8_t>("u8", uint8_t(b), false);
  }
  check_all_16<int16_t, uint16_t>("i16", 0, 0, false);
  check_all_16<mtk::f16_bits, uint16_t>("f16", 0x7c00, 0x03ff, true);
  check_all_16<mtk::bf16_bits, uint16_t>("bf16", 0x7f80, 0x007f, true);
  check_wide<float, uint32_t>("f32", 0x80000000u, 0x7f800000u, 0x007fffffu, true, rng);
  check_wide<int32_t, uint32_t>("i32", 0x80000000u, 0, 0, false, rng);
  check_wide<double, uint64_t>("f64", 0x8000000000000000ull, 0x7ff0000000000000ull,
                               0x000fffffffffffffull, true, rng);
  check_wide<int64_t, uint64_t>("i64", 0x8000000000000000ull, 0, 0, false, rng);
  std::printf("ordered key inverse: %s\n", failures == 0 ? "all values round-trip" : "FAILED");
  return failures == 0 ? 0 : 1;
}
