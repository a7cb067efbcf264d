// KeyThreshold (lib/core/key_threshold.hpp) against the key order it stands for: for every
// threshold tried and every value tried, in both directions, the values a test accepts must be
// exactly {selection_key >= t} for some t <= threshold, with t == threshold outside the two
// documented corners, where lowest_accepted_key names that t. 16-bit formats: every value
// against 2300 thresholds (all 8-bit prefixes, specials, random); 32/64-bit: specials,
// neighbours of each threshold and random patterns.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "core/key_threshold.hpp"

namespace {

int failures = 0;

template <class T, class Bits>
T from_bits(Bits b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// The corners: a largest-threshold above +inf's key also takes +inf; a smallest-threshold every
// non-NaN value reaches also takes NaN. `is_nan` and `is_pos_inf` describe x.
template <class T, class Key>
void check(const char* type, Key threshold, bool largest, const std::vector<T>& values,
           bool (*is_nan)(T), bool (*is_pos_inf)(T)) {
  const auto test = mtk::KeyThreshold<T>::make(threshold, largest);
  bool all_non_nan_reach = true;
  for (const T& x : values) {
    if (!is_nan(x) && mtk::selection_key(x, largest) < threshold) all_non_nan_reach = false;
  }
  Key lowest_accepted = Key(~Key(0));
  // lowest_accepted_key: the accepted set is exactly the keys at or above it, and its own test
  // accepts that set.
  const Key floor = mtk::KeyThreshold<T>::lowest_accepted_key(threshold, largest);
  const auto floor_test = mtk::KeyThreshold<T>::make(floor, largest);
  for (const T& x : values) {
    const Key key = mtk::selection_key(x, largest);
    const bool accepted = test.passes(x);
    if ((accepted != (key >= floor) || floor_test.passes(x) != accepted) && ++failures <= 10) {
      std::printf("%s largest=%d threshold=%llx key=%llx: lowest accepted key %llx\n", type,
                  int(largest), (unsigned long long)threshold, (unsigned long long)key,
                  (unsigned long long)floor);
    }
    const bool wanted = key >= threshold;
    const bool corner = (largest && is_pos_inf(x)) || (!largest && is_nan(x) && all_non_nan_reach);
    if (accepted != wanted && !(accepted && corner)) {
      if (++failures <= 10) {
        std::printf("%s largest=%d threshold=%llx key=%llx: accepted=%d wanted=%d\n", type,
                    int(largest), (unsigned long long)threshold, (unsigned long long)key,
                    int(accepted), int(wanted));
      }
    }
    if (accepted && key < lowest_accepted) lowest_accepted = key;
  }
  test.with_fixed_test([&](auto fixed) {
    // The pattern a float pass may compare in the value's own format (CUDA's bf16x2 / f16x2
    // pairs) is the bound's.
    if constexpr (!std::is_integral<T>::value) {
      const auto widened = mtk::FloatFormat<T>::widen_bits(fixed.bound_bits);
      if (std::memcmp(&widened, &fixed.bound, sizeof(widened)) != 0 && ++failures <= 10) {
        std::printf("%s largest=%d threshold=%llx: the bound's pattern is not the bound\n",
                    type, int(largest), (unsigned long long)threshold);
      }
    }
    for (const T& x : values) {
      if (fixed(x) != test.passes(x) && ++failures <= 10) {
        std::printf("%s largest=%d threshold=%llx: the fixed test disagrees\n", type,
                    int(largest), (unsigned long long)threshold);
      }
    }
  });
  // Downward closed: everything at or above the lowest accepted key is accepted.
  for (const T& x : values) {
    if (mtk::selection_key(x, largest) >= lowest_accepted && !test.passes(x) && ++failures <= 10) {
      std::printf("%s largest=%d threshold=%llx: accepted set not closed downward\n", type,
                  int(largest), (unsigned long long)threshold);
    }
  }
}

template <class T>
bool nan16(T v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  const uint16_t exp = std::is_same<T, mtk::bf16_bits>::value ? 0x7f80 : 0x7c00;
  return (b & exp) == exp && (b & uint16_t(~(exp | 0x8000))) != 0;
}
template <class T>
bool pos_inf16(T v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b == (std::is_same<T, mtk::bf16_bits>::value ? 0x7f80 : 0x7c00);
}

template <class T>
void sixteen_bit(const char* type, std::mt19937_64& rng) {
  std::vector<T> values;
  for (uint32_t b = 0; b < 0x10000; ++b) values.push_back(from_bits<T>(uint16_t(b)));
  std::vector<uint16_t> thresholds = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff, 0xfffe};
  for (uint32_t p = 0; p < 256; ++p) thresholds.push_back(uint16_t(p << 8));
  for (int i = 0; i < 2000; ++i) thresholds.push_back(uint16_t(rng()));
  for (bool largest : {true, false}) {
    for (uint16_t t : thresholds) {
      check<T, uint16_t>(type, t, largest, values, nan16<T>, pos_inf16<T>);
    }
  }
}

template <class F, class Bits>
void wide(const char* type, Bits exp_mask, std::mt19937_64& rng) {
  const Bits sign = Bits(Bits(1) << (8 * sizeof(Bits) - 1));
  const Bits quiet = Bits(exp_mask | (Bits(exp_mask >> 1) & Bits(~(exp_mask | sign))));
  const std::vector<Bits> specials = {0, sign, 1, Bits(sign | 1), exp_mask, Bits(sign | exp_mask),
                                      quiet, Bits(sign | quiet), Bits(exp_mask | 1),
                                      Bits(sign | exp_mask | 1), Bits(exp_mask - 1),
                                      Bits(sign | (exp_mask - 1)), Bits(~Bits(0)), Bits(~sign)};
  std::vector<Bits> thresholds = {0, 1, Bits(~sign), sign, Bits(sign + 1), Bits(~Bits(0)),
                                  Bits(~Bits(0) - 1)};
  for (Bits s : specials) {
    thresholds.push_back(mtk::KeyTraits<F>::key(from_bits<F>(s)));
    thresholds.push_back(Bits(~mtk::KeyTraits<F>::key(from_bits<F>(s))));
  }
  for (int i = 0; i < 256; ++i) thresholds.push_back(Bits(Bits(i) << (8 * sizeof(Bits) - 8)));
  for (int i = 0; i < 400; ++i) {
    const int shift = 8 * int(sizeof(Bits)) - 8 * (1 + int(rng() % 3));
    thresholds.push_back(Bits(Bits(rng()) << shift));
  }
  auto is_nan = [](F v) { return v != v; };
  auto is_pos_inf = [](F v) { return v > 0 && v * F(0.5) == v; };
  for (Bits t : thresholds) {
    std::vector<F> values;
    for (Bits s : specials) values.push_back(from_bits<F>(s));
    for (int i = 0; i < 600; ++i) values.push_back(from_bits<F>(Bits(rng())));
    // Values whose keys sit right around the threshold, in both directions' key orders.
    for (Bits centre : {t, Bits(~t)}) {
      const Bits raw = (centre & sign) ? Bits(centre & Bits(~sign)) : Bits(~centre);
      for (int d = -3; d <= 3; ++d) values.push_back(from_bits<F>(Bits(raw + Bits(d))));
    }
    for (bool largest : {true, false}) {
      check<F, Bits>(type, t, largest, values, +is_nan, +is_pos_inf);
    }
  }
}

template <class T>
void integer(const char* type, std::mt19937_64& rng) {
  using Key = typename mtk::KeyTraits<T>::Key;
  std::vector<T> values;
  for (int i = 0; i < 3000; ++i) values.push_back(T(rng()));
  values.push_back(T(0));
  values.push_back(T(~T(0)));
  for (int i = 0; i < 200; ++i) {
    for (bool largest : {true, false}) {
      check<T, Key>(type, Key(rng()), largest, values, +[](T) { return false; },
                    +[](T) { return false; });
    }
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261130);
  sixteen_bit<mtk::bf16_bits>("bfloat16", rng);
  sixteen_bit<mtk::f16_bits>("float16", rng);
  wide<float, uint32_t>("float32", 0x7f800000u, rng);
  wide<double, uint64_t>("float64", 0x7ff0000000000000ull, rng);
  integer<int8_t>("int8", rng);
  integer<uint8_t>("uint8", rng);
  integer<int16_t>("int16", rng);
  integer<int32_t>("int32", rng);
  integer<int64_t>("int64", rng);
  if (failures != 0) {
    std::printf("key threshold: %d failures\n", failures);
    return 1;
  }
  std::printf("key threshold: every threshold test matches the key order\n");
  return 0;
}
