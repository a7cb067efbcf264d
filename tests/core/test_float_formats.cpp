// The shared float helpers (lib/core/float_formats.hpp) against references that share no code
// with them: every f16 and bf16 pattern widened to f32 against its value computed from the fields
// in double arithmetic; keys of every 16-bit pattern and of f32 specials and random patterns
// against the contract's order (value order, NaN above +inf, -0 == +0) and through their
// inverse; and (key, index) packing against lexicographic (key desc, index asc) order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/float_formats.hpp"

namespace {

int failures = 0;

void fail(const char* what, uint64_t a, uint64_t b) {
  if (++failures <= 10) {
    std::printf("%s: %llx %llx\n", what, (unsigned long long)a, (unsigned long long)b);
  }
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// A 16-bit float with `mantissa_bits` of fraction and `exponent_bias`, from its fields: the f32
// bits of its value (NaNs: the payload moved to the top of f32's fraction, as a conversion does).
uint32_t reference_widen(uint16_t h, int mantissa_bits, int exponent_bias) {
  const bool negative = (h & 0x8000u) != 0;
  const uint32_t exponent = (h & 0x7fffu) >> mantissa_bits;
  const uint32_t mantissa = h & ((1u << mantissa_bits) - 1u);
  const uint32_t max_exponent = (1u << (15 - mantissa_bits)) - 1u;
  const uint32_t sign = negative ? 0x80000000u : 0u;
  if (exponent == max_exponent) {
    return sign | 0x7f800000u | (mantissa << (23 - mantissa_bits));
  }
  const double magnitude =
      exponent == 0 ? std::ldexp(double(mantissa), 1 - exponent_bias - mantissa_bits)
                    : std::ldexp(double(mantissa + (1u << mantissa_bits)),
                                 int(exponent) - exponent_bias - mantissa_bits);
  return bits_of(float(negative ? -magnitude : magnitude));  // exact: f32 holds every value
}

void check_widening() {
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const uint16_t h = uint16_t(i);
    const uint32_t f16 = reference_widen(h, 10, 15), bf16 = reference_widen(h, 7, 127);
    if (mtk::f16_to_f32_bits(h) != f16) fail("f16_to_f32_bits", h, mtk::f16_to_f32_bits(h));
    if (bits_of(mtk::f16_to_f32(h)) != f16) fail("f16_to_f32", h, bits_of(mtk::f16_to_f32(h)));
    if (mtk::bf16_to_f32_bits(h) != bf16) fail("bf16_to_f32_bits", h, mtk::bf16_to_f32_bits(h));
    if (bits_of(mtk::bf16_to_f32(h)) != bf16) fail("bf16_to_f32", h, bits_of(mtk::bf16_to_f32(h)));
    const mtk::f16_bits f16_value{h};
    const mtk::bf16_bits bf16_value{h};
    if (bits_of(mtk::FloatFormat<mtk::f16_bits>::widen(f16_value)) != f16) fail("widen f16", h, 0);
    if (bits_of(mtk::FloatFormat<mtk::bf16_bits>::widen(bf16_value)) != bf16) fail("widen bf16", h, 0);
  }
}

// The contract's order of two f32 values as keys must order them: -1, 0, 1.
int reference_order(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) - std::isnan(b);
  return (a > b) - (a < b);
}

template <class Key>
void check_key_order(const char* what, const std::vector<float>& values,
                     const std::vector<Key>& keys) {
  // Sorted by key, the values must come in the contract's order.
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const size_t a = order[i - 1], b = order[i];
    const int expected = reference_order(values[b], values[a]);
    const int got = (keys[b] > keys[a]) - (keys[b] < keys[a]);
    if (expected != got) fail(what, bits_of(values[a]), bits_of(values[b]));
  }
}

// Keys of every 16-bit pattern: ordered as the values, and the inverse gives back a value of the
// same key (the very bits unless NaN or a zero).
void check_16_bit_keys() {
  for (const bool brain : {false, true}) {
    const char* name = brain ? "bf16 key" : "f16 key";
    std::vector<float> values;
    std::vector<uint16_t> keys;
    for (uint32_t i = 0; i <= 0xffffu; ++i) {
      const uint16_t h = uint16_t(i);
      const uint16_t key = brain ? mtk::key_from_bf16_bits(h) : mtk::key_from_f16_bits(h);
      const uint16_t exponent = brain ? mtk::kBF16Exponent : mtk::kF16Exponent;
      const float value = brain ? mtk::bf16_to_f32(h) : mtk::f16_to_f32(h);
      values.push_back(value);
      keys.push_back(key);
      // The router keys 16-bit logits in 32-bit words: the same key.
      if (mtk::float_bits_to_key<uint32_t>(h, mtk::kF16Sign, exponent) != key) fail(name, h, key);
      const uint16_t back = mtk::key_to_float_bits<uint16_t>(key, mtk::kF16Sign);
      const uint16_t back_key = brain ? mtk::key_from_bf16_bits(back) : mtk::key_from_f16_bits(back);
      const bool shared = std::isnan(value) || value == 0.0f;
      if (back_key != key || (!shared && back != h)) fail(name, h, back);
      if (std::isnan(value) && key != 0xffffu) fail(name, h, key);
    }
    check_key_order(name, values, keys);
  }
}

void check_f32_keys() {
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u,
                                    0x007fffffu, 0x807fffffu, 0x00800000u, 0x80800000u,
                                    0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                    0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc00000u,
                                    0x7fffffffu, 0xffffffffu, 0x3f800000u, 0xbf800000u};
  std::mt19937 rng(30);
  for (int i = 0; i < 200000; ++i) patterns.push_back(rng());
  std::vector<float> values;
  std::vector<uint32_t> keys;
  for (const uint32_t bits : patterns) {
    float value;
    std::memcpy(&value, &bits, 4);
    const uint32_t key = mtk::key_from_f32_bits(bits);
    values.push_back(value);
    keys.push_back(key);
    if (mtk::key_from_f32(value) != key) fail("key_from_f32", bits, key);
    const float back = mtk::float_from_key(key);
    const bool shared = std::isnan(value) || value == 0.0f;
    if (mtk::key_from_f32(back) != key || (!shared && bits_of(back) != bits)) {
      fail("float_from_key", bits, bits_of(back));
    }
  }
  check_key_order("f32 key", values, keys);
}

template <class Packing, class Word>
void check_packing(const char* name, uint32_t max_key, uint32_t max_index) {
  std::mt19937 rng(7);
  auto draw = [&](uint32_t max) {
    const uint32_t edges[] = {0u, 1u, max - 1u, max};
    return rng() % 4 == 0 ? edges[rng() % 4] : uint32_t(rng() % (uint64_t(max) + 1));
  };
  for (int i = 0; i < 200000; ++i) {
    const uint32_t k1 = draw(max_key), k2 = draw(max_key);
    const uint32_t i1 = draw(max_index), i2 = draw(max_index);
    const Word a = Packing::pack(k1, i1), b = Packing::pack(k2, i2);
    if (Packing::index(a) != i1 || Packing::key(a) != k1) fail(name, k1, i1);
    if (Packing::pack_field(k1, Packing::field(i1)) != a) fail(name, k1, i1);
    const bool better = k1 > k2 || (k1 == k2 && i1 < i2);
    if ((a > b) != better) fail(name, a, b);
  }
}

}  // namespace

int main() {
  check_widening();
  check_16_bit_keys();
  check_f32_keys();
  // The layouts in use: CPU router ranks and top-k composites (complemented 32-bit index), the
  // CUDA router's ranks (one field value reserved, so no rank is all ones), the warp top-k's
  // 16-bit positions.
  check_packing<mtk::KeyIndexPacking<uint64_t, 32>, uint64_t>("pack 64/32", 0xffffffffu,
                                                               0xfffffffeu);
  check_packing<mtk::KeyIndexPacking<uint64_t, 32, 1>, uint64_t>("pack 64/32 reserved",
                                                                  0xffffffffu, 0xfffffffdu);
  check_packing<mtk::KeyIndexPacking<uint32_t, 16, 1>, uint32_t>("pack 32/16 reserved", 0xffffu,
                                                                  0xfffdu);
  check_packing<mtk::KeyIndexPacking<uint32_t, 16>, uint32_t>("pack 32/16", 0xffffu, 1023u);
  if (mtk::KeyIndexPacking<uint64_t, 32, 1>::pack(0xffffffffu, 0u) == ~uint64_t{0}) {
    fail("reserved top", 0, 0);
  }
  std::printf("float formats: %s\n",
              failures == 0 ? "65536 f16 and bf16 widenings, keys and packings match" : "FAILED");
  return failures == 0 ? 0 : 1;
}
