// The sampler's portable arithmetic (lib/core/sampling_math.hpp) against the host's own: the
// integer division must equal IEEE float division bit for bit, the exact sum must equal a sum in
// wide integers, the scaled comparisons must be exact, and the exp must stay within 2 ulp.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "core/sampling_math.hpp"

namespace {

int failures = 0;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                       \
      std::fprintf(stderr, "\n");                                              \
      if (++failures > 20) return;                                             \
    }                                                                          \
  } while (0)

float from_bits(uint32_t b) { return mtk::float_from_bits(b); }
uint32_t bits(float f) { return mtk::bits_from_float(f); }

// A positive finite float of any binade, subnormals included.
float random_positive(std::mt19937_64& rng) {
  for (;;) {
    const uint32_t b = static_cast<uint32_t>(rng()) & 0x7fffffffu;
    if (b != 0 && b < 0x7f800000u) return from_bits(b);
  }
}

void test_multiplication() {
  std::mt19937_64 rng(0);
  for (int i = 0; i < 1000000; ++i) {
    const uint64_t a = rng() >> (rng() % 64), b = rng() >> (rng() % 64);
    const mtk::U128 fast = mtk::multiply_u64(a, b), halves = mtk::multiply_u64_by_halves(a, b);
    const unsigned __int128 want = static_cast<unsigned __int128>(a) * b;
    CHECK(halves.hi == static_cast<uint64_t>(want >> 64) &&
              halves.lo == static_cast<uint64_t>(want) && fast.hi == halves.hi &&
              fast.lo == halves.lo,
          "%" PRIx64 " * %" PRIx64, a, b);
  }
}

void test_division() {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const float a = random_positive(rng);
    float b = random_positive(rng);
    if (i % 2 == 0) b = from_bits((bits(a) & 0x807fffffu) | (bits(b) & 0x7f800000u));
    const float want = a / b;
    const float got = mtk::divide_f32(a, b);
    CHECK(bits(got) == bits(want), "%a / %a = %a, want %a", a, b, got, want);
  }
  CHECK(mtk::divide_f32(1.0f, 3.0f) == 1.0f / 3.0f, "1/3");
}

// A float's value in units of 2^-149, as a 256-bit number of four limbs (long arithmetic).
void add_reference(uint64_t (&acc)[5], float f) {
  const uint32_t b = bits(f);
  const uint32_t biased = b >> 23;
  const uint64_t m = (b & 0x7fffffu) | (biased ? 0x800000u : 0u);
  const int position = biased ? static_cast<int>(biased) - 1 : 0;
  for (int bit = 0; bit < 24; ++bit) {
    if (!((m >> bit) & 1u)) continue;
    int at = position + bit;
    // add 2^at
    for (int i = at / 64; i < 5; ++i) {
      const uint64_t add = i == at / 64 ? (uint64_t{1} << (at % 64)) : 1u;
      acc[i] += add;
      if (acc[i] >= add) break;
    }
  }
}

void test_exact_sum() {
  std::mt19937_64 rng(2);
  for (int trial = 0; trial < 2000; ++trial) {
    uint64_t reference[5] = {};
    mtk::ExactSum sum = mtk::exact_zero();
    long double approximate = 0;
    const int count = 1 + static_cast<int>(rng() % 300);
    for (int i = 0; i < count; ++i) {
      float f = trial % 2 ? random_positive(rng)
                          : std::ldexp(static_cast<float>(rng() % 1000) / 1000.0f,
                                       -static_cast<int>(rng() % 150));
      if (bits(f) > mtk::kMaxMassBits) f = from_bits(mtk::kMaxMassBits);
      sum = mtk::exact_add_mass(sum, f);
      add_reference(reference, f);
      approximate += f;
    }
    CHECK(reference[4] == 0, "reference overflow");
    for (int i = 0; i < 4; ++i) CHECK(sum.limb[i] == reference[i], "limb %d", i);
    // Rounded once: equal to the long double sum rounded, unless that was itself inexact.
    const float rounded = mtk::exact_to_f32(sum);
    const float near = static_cast<float>(approximate);
    CHECK(std::fabs(static_cast<double>(rounded) - static_cast<double>(near)) <=
              std::ldexp(std::fabs(static_cast<double>(near)), -23),
          "sum %a vs %a", rounded, near);
  }
  // Exact rounding: 1 + 2^-24 is a tie (to even: 1), 1 + 2^-24 + 2^-149 rounds up.
  mtk::ExactSum s = mtk::exact_add_mass(mtk::exact_of_mass(1.0f), std::ldexp(1.0f, -24));
  CHECK(mtk::exact_to_f32(s) == 1.0f, "tie to even");
  s = mtk::exact_add_mass(s, from_bits(1));
  CHECK(mtk::exact_to_f32(s) == from_bits(0x3f800001u), "sticky rounds up");
  CHECK(mtk::exact_to_f32(mtk::exact_of_mass(from_bits(1))) == from_bits(1), "subnormal");
}

void test_scaled() {
  // s * f against 128-bit integers: s a count below 2^40 units of 2^-149, f = m / 2^24.
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200000; ++trial) {
    const uint64_t units = rng() % (uint64_t{1} << (rng() % 41));
    const uint64_t m = rng() % (1u << 24);
    mtk::ExactSum s = mtk::exact_zero();
    s.limb[0] = units;
    const float f = static_cast<float>(m) / 16777216.0f;  // exact
    const unsigned __int128 product = static_cast<unsigned __int128>(units) * m;
    const uint64_t floor = static_cast<uint64_t>(product >> 24);
    const bool fractional = (product & 0xffffffu) != 0;
    const mtk::ScaledSum scaled = mtk::exact_scaled(s, f);
    CHECK(scaled.floor.limb[0] == floor && scaled.floor.limb[1] == 0, "floor %" PRIu64 " * %a", units, f);
    CHECK(scaled.fractional == fractional, "fractional %" PRIu64 " * %a", units, f);
    const mtk::ExactSum up = mtk::exact_ceil_scaled(s, f);
    CHECK(up.limb[0] == floor + (fractional ? 1 : 0), "ceil %" PRIu64 " * %a", units, f);
  }
  // A wide sum times a tiny fraction crosses limbs: 2^200 units * 2^-100 = 2^100 units.
  mtk::ExactSum wide = mtk::exact_zero();
  wide.limb[3] = uint64_t{1} << 8;  // 2^200
  const mtk::ScaledSum scaled = mtk::exact_scaled(wide, std::ldexp(1.0f, -100));
  CHECK(scaled.floor.limb[1] == uint64_t{1} << 36 && scaled.floor.limb[0] == 0 &&
            scaled.floor.limb[2] == 0 && !scaled.fractional, "2^200 * 2^-100");
}

// Sums in all four limbs: s * f for f anywhere in [0, 1), subnormals included, against the
// product s * m formed in six limbs and shifted right bit by bit (f = m / 2^shift); and the sum
// rounded to float32, against its top 24 bits rounded here.
void test_wide_sums() {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50000; ++trial) {
    mtk::ExactSum s = mtk::exact_zero();
    const int used = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < used; ++i) s.limb[i] = rng() >> (rng() % 64);
    s.limb[3] >>= 12;  // sums stay below 2^244 units
    const uint32_t fb = static_cast<uint32_t>(rng() % 0x3f800000u);
    const float f = from_bits(fb);
    const uint32_t biased = fb >> 23;
    const uint64_t m = (fb & 0x7fffffu) | (biased != 0 ? 0x800000u : 0u);
    const int shift = biased != 0 ? 150 - static_cast<int>(biased) : 149;  // f = m / 2^shift
    uint64_t product[6] = {};
    uint64_t carry = 0;
    for (int i = 0; i < 4; ++i) {
      const unsigned __int128 p = static_cast<unsigned __int128>(s.limb[i]) * m + carry;
      product[i] = static_cast<uint64_t>(p);
      carry = static_cast<uint64_t>(p >> 64);
    }
    product[4] = carry;
    auto bit_of = [&](int b) { return b < 384 && ((product[b / 64] >> (b % 64)) & 1u) != 0; };
    uint64_t floor[4] = {};
    for (int b = 0; b < 256; ++b) {
      if (bit_of(b + shift)) floor[b / 64] |= uint64_t{1} << (b % 64);
    }
    bool fractional = false;
    for (int b = 0; b < shift; ++b) fractional = fractional || bit_of(b);
    const mtk::ScaledSum scaled = mtk::exact_scaled(s, f);
    for (int i = 0; i < 4; ++i) CHECK(scaled.floor.limb[i] == floor[i], "trial %d limb %d", trial, i);
    CHECK(scaled.fractional == fractional, "trial %d fractional", trial);
    int top = 255;
    while (top >= 0 && ((s.limb[top / 64] >> (top % 64)) & 1u) == 0) --top;
    if (top < 0) continue;
    const int low = top - 24;  // the bit below float32's 24-bit significand
    uint64_t kept = 0;
    bool sticky = false;
    for (int b = top; b >= 0; --b) {
      const bool set = ((s.limb[b / 64] >> (b % 64)) & 1u) != 0;
      if (b > low) kept = (kept << 1) | (set ? 1u : 0u);
      else if (b < low) sticky = sticky || set;
    }
    const bool half = low >= 0 && ((s.limb[low / 64] >> (low % 64)) & 1u) != 0;
    if (low >= 0 && half && (sticky || (kept & 1u) != 0)) ++kept;
    const float want = std::ldexp(static_cast<float>(kept), (low >= 0 ? low + 1 : 0) - 149);
    CHECK(mtk::exact_to_f32(s) == want, "trial %d to_f32 %a vs %a", trial, mtk::exact_to_f32(s), want);
  }
}

void test_exp() {
  double worst = 0;
  for (uint32_t b = 0; b < 0x42e00000u; b += 97) {
    const float gap = from_bits(b);
    const float got = mtk::exp_of_negative_gap(gap);
    const double want = std::exp(-static_cast<double>(gap));
    if (want < std::ldexp(1.0, -126)) {  // subnormal: within one unit of 2^-149
      CHECK(std::fabs(got - want) <= std::ldexp(1.0, -149), "exp(-%a) = %a, want %g", gap, got, want);
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    const double error = std::fabs(static_cast<double>(got) - want) / ulp;
    if (error > worst) worst = error;
    CHECK(error <= 1.0, "exp(-%a) = %a, want %.17g (%.2f ulp)", gap, got, want, error);
  }
  std::printf("exp: worst error %.3f ulp\n", worst);
  CHECK(mtk::exp_of_negative_gap(0.0f) == 1.0f, "exp(0)");
  CHECK(mtk::exp_of_negative_gap(-0.0f) == 1.0f, "exp(-0)");
  CHECK(mtk::exp_of_negative_gap(INFINITY) == 0.0f, "exp(-inf)");
  CHECK(mtk::exp_of_negative_gap(NAN) == 0.0f, "exp(nan)");
}

// Division by a reused divisor equals the one-off division (hence IEEE division) bit for bit,
// including quotients near the correction steps' edges (significands at their extremes).
void test_invariant_division() {
  std::mt19937_64 rng(4);
  for (int i = 0; i < 2000000; ++i) {
    float a = random_positive(rng), b = random_positive(rng);
    if (i % 3 == 0) a = from_bits((bits(a) & 0x7f800000u) | (i % 2 ? 0x7fffffu : 0u));
    if (i % 5 == 0) b = from_bits((bits(b) & 0x7f800000u) | (i % 2 ? 0x7fffffu : 1u));
    const float got = mtk::divide_by(a, mtk::mass_divisor(b));
    const float want = mtk::divide_f32(a, b);
    CHECK(bits(got) == bits(want), "%a / %a = %a, want %a", a, b, got, want);
  }
}

// Masses summed by exponent field as 64-bit significand sums, then converted, equal their exact
// sum: rows spread over every binade, subnormals included, and rows crowding a few binades.
void test_exponent_binned_sums() {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 400; ++trial) {
    uint64_t bins[256] = {};
    mtk::ExactSum direct = mtk::exact_zero();
    const int count = 1 + static_cast<int>(rng() % 5000);
    for (int i = 0; i < count; ++i) {
      uint32_t b = static_cast<uint32_t>(rng()) & 0x7fffffffu;
      if (trial % 3 == 1) b = (b & 0x807fffffu) | ((120u + static_cast<uint32_t>(rng() % 4)) << 23);
      if (trial % 3 == 2) b &= 0x00ffffffu;  // subnormals and the first normal binade
      if (b > mtk::kMaxMassBits) b = mtk::kMaxMassBits;
      bins[b >> 23] += mtk::mass_significand(b);
      direct = mtk::exact_add_mass(direct, from_bits(b));
    }
    mtk::ExactSum binned = mtk::exact_zero();
    for (uint32_t e = 0; e < 256; ++e) {
      binned = mtk::exact_add(binned, mtk::exact_of_exponent_sum(bins[e], e));
    }
    CHECK(mtk::exact_compare(binned, direct) == 0, "trial %d", trial);
    // The units a bin must supply: ceil((direct - part) / 2^position) brings part back to direct.
    const uint32_t e = 1u + static_cast<uint32_t>(rng() % 190);
    const mtk::ExactSum part = mtk::exact_scaled(direct, 0.5f).floor;
    const int position = mtk::mass_position(e);
    const mtk::ExactSum gap = mtk::exact_subtract(direct, part);
    const uint64_t units = mtk::exact_ceil_shifted(gap, position);
    // Only quotients below 2^64 are in the function's domain.
    if (mtk::exact_compare(gap, mtk::exact_add_shifted(mtk::exact_zero(), 1u, position + 60)) < 0) {
      const mtk::ExactSum back = mtk::exact_add_shifted(part, units, position);
      CHECK(mtk::exact_compare(back, direct) >= 0, "ceil reaches, trial %d", trial);
      if (units > 0) {
        const mtk::ExactSum short_of = mtk::exact_add_shifted(part, units - 1, position);
        CHECK(mtk::exact_compare(short_of, direct) < 0, "ceil is least, trial %d", trial);
      }
    }
  }
}

// Masses between two bounds summed in one word (mass_window) equal their exact sum wherever the
// window says it fits, up to the largest sum it allows; windows too wide for the count refuse.
void test_window_sums() {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    const int count = 1 + static_cast<int>(rng() % 3000);
    uint32_t least = 1u + static_cast<uint32_t>(rng() % mtk::kMaxMassBits);
    if (trial % 4 == 0) least = 1u + static_cast<uint32_t>(rng() % 0x00ffffffu);  // subnormal
    const uint32_t span_bits = static_cast<uint32_t>(rng() % 40) << 23;
    uint32_t most = least + span_bits + static_cast<uint32_t>(rng() % 0x800000u);
    if (most > mtk::kMaxMassBits) most = mtk::kMaxMassBits;
    const mtk::MassWindow window = mtk::mass_window(least, most, count);
    int count_bits = 0;
    while ((int64_t(1) << count_bits) <= count) ++count_bits;
    const int span = mtk::mass_position(most >> 23) - mtk::mass_position(least >> 23);
    CHECK(window.fits == (count_bits + 24 + span <= 64), "fits, trial %d", trial);
    if (!window.fits) continue;
    uint64_t windowed = 0u;
    mtk::ExactSum direct = mtk::exact_zero();
    for (int i = 0; i < count; ++i) {
      // Half the trials at the top of the window, where the word comes closest to overflowing.
      const uint32_t b =
          trial % 2 ? most : least + static_cast<uint32_t>(rng() % (most - least + 1u));
      windowed = mtk::window_add_mass(windowed, b, window.base);
      direct = mtk::exact_add_mass(direct, from_bits(b));
    }
    CHECK(mtk::exact_compare(mtk::exact_of_window_sum(windowed, window.base), direct) == 0,
          "trial %d: %d masses in [%08x, %08x]", trial, count, least, most);
  }
  // The widest window a count allows, filled with its largest mass: the word's last bit is used.
  const uint32_t least = 0x3c000000u, most = least + (27u << 23) + 0x7fffffu;
  const mtk::MassWindow window = mtk::mass_window(least, most, 8191);
  CHECK(window.fits, "13 + 24 + 27 bits fit");
  CHECK(!mtk::mass_window(least, most, 8192).fits, "14 + 24 + 27 bits do not");
  CHECK(!mtk::mass_window(0u, most, 1).fits, "no lower bound");
  uint64_t windowed = 0u;
  mtk::ExactSum direct = mtk::exact_zero();
  for (int i = 0; i < 8191; ++i) {
    windowed = mtk::window_add_mass(windowed, most, window.base);
    direct = mtk::exact_add_mass(direct, from_bits(most));
  }
  CHECK(windowed >> 63 == 1u, "the top bit is reached");
  CHECK(mtk::exact_compare(mtk::exact_of_window_sum(windowed, window.base), direct) == 0,
        "the fullest window");
}

// The least mass reaching an exact bound: it reaches the bound and the mass below it does not.
void test_least_mass_bits() {
  std::mt19937_64 rng(6);
  for (int i = 0; i < 200000; ++i) {
    uint32_t top = static_cast<uint32_t>(rng()) & 0x7fffffffu;
    if (top > mtk::kMaxMassBits || top == 0u) top = i % 2 ? mtk::kMaxMassBits : 1u;
    const float fraction = i % 7 == 0 ? 1.0f : from_bits(static_cast<uint32_t>(rng() % 0x3f800000u));
    const mtk::ExactSum least = mtk::exact_ceil_scaled(mtk::exact_of_mass(from_bits(top)), fraction);
    const uint32_t b = mtk::least_mass_bits_reaching(least);
    CHECK(mtk::exact_compare(mtk::exact_of_mass(from_bits(b)), least) >= 0, "%08x reaches", b);
    CHECK(b == 0u || mtk::exact_compare(mtk::exact_of_mass(from_bits(b - 1u)), least) < 0,
          "%08x is the least", b);
    CHECK(b <= top, "%08x above the largest %08x", b, top);
  }
  CHECK(mtk::least_mass_bits_reaching(mtk::exact_zero()) == 0u, "zero bound");
}

}  // namespace

int main() {
  test_multiplication();
  test_division();
  test_exact_sum();
  test_scaled();
  test_wide_sums();
  test_invariant_division();
  test_exponent_binned_sums();
  test_window_sums();
  test_least_mass_bits();
  test_exp();
  if (failures != 0) {
    std::fprintf(stderr, "test_sampling_math: %d failures\n", failures);
    return 1;
  }
  std::printf("test_sampling_math: all passed\n");
  return 0;
}
