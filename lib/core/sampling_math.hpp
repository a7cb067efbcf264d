// The arithmetic of the sampling filters (docs/CONTRACT.md, "Sampling filters"), one copy for
// every backend. Everything here that decides a result is integer arithmetic: an exact
// fixed-point sum of float32 masses, exact comparisons against a float32 fraction of such a sum,
// a float32 exp and division that are correctly rounded (the division) or defined bit for bit
// (the exp) by integer steps. Integer operations give the same bits on every processor, whatever
// its floating-point modes (flush-to-zero, fused multiply-add, fast math), so CPU, CUDA and Metal
// running this code agree to the bit, and an exact sum does not depend on the order of its
// terms, so neither the batch nor the reduction tree can change a result.
//
// Written as float_formats.hpp is, for host C++, nvcc and the Metal dialect: value parameters,
// no references, no standard headers, no static data.
#pragma once

#include "float_formats.hpp"

namespace mtk {

#if defined(MTK_FLOAT_FORMATS_METAL)
typedef int int32_t;
typedef long int64_t;
#endif

// ---- 64-bit helpers ----------------------------------------------------------------------------

struct U128 {
  uint64_t hi, lo;
};

// The full product of two 64-bit integers from 32-bit halves, for targets without a 128-bit
// multiply.
MTK_HOST_DEVICE U128 multiply_u64_by_halves(uint64_t a, uint64_t b) {
  const uint64_t a_lo = a & 0xffffffffull, a_hi = a >> 32;
  const uint64_t b_lo = b & 0xffffffffull, b_hi = b >> 32;
  const uint64_t low = a_lo * b_lo, cross1 = a_lo * b_hi, cross2 = a_hi * b_lo;
  const uint64_t middle = (low >> 32) + (cross1 & 0xffffffffull) + (cross2 & 0xffffffffull);
  U128 r;
  r.lo = (middle << 32) | (low & 0xffffffffull);
  r.hi = a_hi * b_hi + (cross1 >> 32) + (cross2 >> 32) + (middle >> 32);
  return r;
}

// The full product of two 64-bit integers: exact, so the same on every target however it is
// computed.
MTK_HOST_DEVICE U128 multiply_u64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  U128 wide;  // the GPU's own high-half multiply: the same exact product, in a few instructions
  wide.hi = __umul64hi(a, b);
  wide.lo = a * b;
  return wide;
#elif defined(__SIZEOF_INT128__) && !defined(MTK_FLOAT_FORMATS_METAL)
  const unsigned __int128 product = static_cast<unsigned __int128>(a) * b;
  U128 wide;
  wide.hi = static_cast<uint64_t>(product >> 64);
  wide.lo = static_cast<uint64_t>(product);
  return wide;
#else
  return multiply_u64_by_halves(a, b);
#endif
}

MTK_HOST_DEVICE int leading_zeros_u64(uint64_t x) {
  int count = 0;
  for (int step = 32; step > 0; step >>= 1) {
    if ((x >> (64 - step)) == 0u) {
      count += step;
      x <<= step;
    }
  }
  return count;  // 64 for x == 0
}

// The float32 nearest to (m + s) * 2^e, ties to even, where s is a fraction in (0, 1) when
// `sticky` and 0 otherwise: the one rounding step of every float this file returns. Subnormal
// results are exact roundings too; above the float32 range the result is +inf.
MTK_HOST_DEVICE float round_to_f32(uint64_t m, int e, bool sticky) {
  if (m == 0u) return 0.0f;  // callers never pass a sticky fraction alone
  const int shift = leading_zeros_u64(m);
  m <<= shift;
  e -= shift;
  const int exponent = 63 + e;  // m * 2^e is in [2^exponent, 2^(exponent + 1))
  if (exponent > 127) return float_from_bits(kF32Exponent);
  uint64_t kept;
  uint64_t rest;
  uint64_t halfway;
  uint32_t biased;
  if (exponent >= -126) {  // normal: 24 significant bits
    kept = m >> 40;
    rest = m & ((1ull << 40) - 1u);
    halfway = 1ull << 39;
    biased = uint32_t(exponent + 127);
  } else {  // subnormal: multiples of 2^-149
    const int drop = 40 + (-126 - exponent);  // bits below 2^-149
    if (drop > 64) return 0.0f;               // below half of 2^-149
    kept = drop == 64 ? 0u : m >> drop;
    rest = drop == 64 ? m : m & ((1ull << drop) - 1u);
    halfway = 1ull << (drop - 1);
    biased = 0u;
  }
  if (rest > halfway || (rest == halfway && (sticky || (kept & 1u) != 0u))) ++kept;
  // A carry out of the significand moves to the next binade; adding the bits does exactly that
  // (and a subnormal rounding up to 2^-126 becomes the smallest normal).
  const uint32_t bits =
      biased == 0u ? uint32_t(kept) : ((biased << 23) + uint32_t(kept - (1ull << 23)));
  if (bits >= kF32Exponent) return float_from_bits(kF32Exponent);
  return float_from_bits(bits);
}

// A positive finite float32 as significand * 2^exponent with a 24-bit significand (top bit 23).
struct Significand {
  uint64_t m;
  int e;
};

MTK_HOST_DEVICE Significand significand_of(uint32_t bits) {
  const uint32_t biased = (bits >> 23) & 0xffu;
  Significand s;
  s.m = bits & 0x7fffffu;
  s.e = -149;
  if (biased != 0u) {
    s.m |= 0x800000u;
    s.e = int(biased) - 150;
  } else {
    const int shift = leading_zeros_u64(s.m) - 40;
    s.m <<= shift;
    s.e -= shift;
  }
  return s;
}

// a / b correctly rounded to float32 (IEEE round to nearest even), for positive finite a and b.
// The renormalised probabilities and 1 / temperature: a division the GPUs' fast paths do not
// round correctly, done here in integers.
MTK_HOST_DEVICE float divide_f32(float a, float b) {
  const Significand x = significand_of(bits_from_float(a));
  const Significand y = significand_of(bits_from_float(b));
  const uint64_t numerator = x.m << 40;  // a 64-bit quotient of at least 40 bits
  const uint64_t quotient = numerator / y.m;
  const bool sticky = numerator - quotient * y.m != 0u;
  return round_to_f32(quotient, x.e - y.e - 40, sticky);
}

// Division by one divisor many times (the renormalisation divides a row by its sum): the
// divisor's reciprocal once, then per quotient a high-half multiply and at most three
// corrections instead of a 64-bit division. divide_by(a, mass_divisor(b)) == divide_f32(a, b).
struct MassDivisor {
  uint64_t m;           // b's 24-bit significand
  uint64_t reciprocal;  // floor((2^64 - 1) / m)
  int e;
};

MTK_HOST_DEVICE MassDivisor mass_divisor(float b) {
  const Significand y = significand_of(bits_from_float(b));
  MassDivisor d;
  d.m = y.m;
  d.reciprocal = ~0ull / y.m;
  d.e = y.e;
  return d;
}

MTK_HOST_DEVICE float divide_by(float a, MassDivisor d) {
  const Significand x = significand_of(bits_from_float(a));
  const uint64_t numerator = x.m << 40;
  // numerator * reciprocal / 2^64 is at most the true quotient and less than 3 below it.
  uint64_t quotient = multiply_u64(numerator, d.reciprocal).hi;
  uint64_t remainder = numerator - quotient * d.m;
  while (remainder >= d.m) {
    ++quotient;
    remainder -= d.m;
  }
  return round_to_f32(quotient, x.e - d.e - 40, remainder != 0u);
}

// ---- float32 values that count as zero --------------------------------------------------------

// Subnormal floats count as zero wherever the sampler computes with floats (the scaled logits
// and their gaps to the row's maximum), as on hardware that flushes them: every backend then
// computes the same values whatever its denormal mode.
MTK_HOST_DEVICE float flush_subnormal(float x) {
  const uint32_t bits = bits_from_float(x);
  return (bits & kF32Exponent) == 0u ? float_from_bits(bits & kF32Sign) : x;
}

MTK_HOST_DEVICE bool is_nan_f32(float x) { return (bits_from_float(x) & ~kF32Sign) > kF32Exponent; }

// ---- masses ------------------------------------------------------------------------------------

// The largest mass a probability can have: 2^64. Larger values, +inf included, count as 2^64, so
// that a row of fewer than 2^31 masses sums below 2^95 (the exact accumulator's range).
enum : uint32_t { kMaxMassBits = 0x5f800000u };

// A probability read as a mass: itself where it is above 0 (subnormals included), 2^64 where it
// is larger, 0 for NaN, zeros, negatives and -inf.
MTK_HOST_DEVICE float probability_mass(float p) {
  const uint32_t bits = bits_from_float(p);
  if ((bits & kF32Sign) != 0u || bits == 0u || bits > kF32Exponent) return 0.0f;
  return bits > kMaxMassBits ? float_from_bits(kMaxMassBits) : p;
}

// exp(-gap) for a gap >= 0 (+inf included), the softmax numerator of a logit `gap` below the
// row's maximum. Defined by these integer steps, within about one unit in the last place of the
// true value: the gap in fixed point (2^-56), gap * log2(e) split into an integer i and a
// remainder u = gap - i * ln 2 in [0, ln 2), exp(-u) by its Taylor series to degree 16 in
// 64-bit fixed point (Horner; every partial sum stays positive), times 2^-i, rounded once.
MTK_HOST_DEVICE float exp_of_negative_gap(float gap) {
  const uint32_t bits = bits_from_float(gap) & ~kF32Sign;  // -0.0 (M - M with M = -0.0) is 0
  if (bits >= 0x42dc0000u) return 0.0f;  // gap >= 110: exp(-gap) < 2^-158, which rounds to 0
  const uint32_t biased = bits >> 23;
  const uint64_t m = (bits & 0x7fffffu) | (biased != 0u ? 0x800000u : 0u);
  // gap * 2^56 = m * 2^(biased - 150 + 56), below 2^63 since gap < 128.
  uint64_t d = 0u;
  if (biased >= 94u) {
    d = m << (biased - 94u);
  } else if (94u - biased < 64u) {
    d = m >> (94u - biased);
  }
  const uint64_t kLog2eQ62 = 0x5c551d94ae0bf85eull;
  const int64_t kLn2Q56 = 0xb17217f7d1cf7all;
  int64_t i = int64_t(multiply_u64(d, kLog2eQ62).hi >> 54);  // floor(gap * log2 e), +-1
  int64_t u = int64_t(d) - i * kLn2Q56;
  if (u < 0) {
    --i;
    u += kLn2Q56;
  } else if (u >= kLn2Q56) {
    ++i;
    u -= kLn2Q56;
  }
  const uint64_t u63 = uint64_t(u) << 7;  // Q63
  // 2^63 / k!, k = 0..16.
  const uint64_t c[17] = {0x8000000000000000ull, 0x8000000000000000ull, 0x4000000000000000ull,
                          0x1555555555555555ull, 0x0555555555555555ull, 0x0111111111111111ull,
                          0x002d82d82d82d82eull, 0x0006806806806807ull, 0x0000d00d00d00d01ull,
                          0x0000171de3a556c7ull, 0x0000024fc9f6ef14ull, 0x00000035cc8acfebull,
                          0x000000047bb63bfeull, 0x000000005849184full, 0x00000000064e5d2aull,
                          0x00000000006b9fd0ull, 0x000000000006b9fdull};
  uint64_t r = c[16];
  for (int k = 15; k >= 0; --k) r = c[k] - (multiply_u64(u63, r).hi << 1);
  return round_to_f32(r, -63 - int(i), false);
}

// ---- the exact sum -----------------------------------------------------------------------------

// A sum of float32 masses held exactly, as an integer count of 2^-149 (the smallest subnormal)
// in 256 bits: a mass of at most 2^64 is below 2^213 units, and fewer than 2^31 of them below
// 2^244. Addition is exact and therefore independent of order.
struct ExactSum {
  uint64_t limb[4];  // little-endian
};

MTK_HOST_DEVICE ExactSum exact_zero() {
  ExactSum s;
  for (int i = 0; i < 4; ++i) s.limb[i] = 0u;
  return s;
}

MTK_HOST_DEVICE ExactSum exact_add(ExactSum s, ExactSum t) {
  uint64_t carry = 0u;
  for (int i = 0; i < 4; ++i) {
    const uint64_t partial = s.limb[i] + t.limb[i];
    const uint64_t carry_out = uint64_t(partial < s.limb[i]);
    s.limb[i] = partial + carry;
    carry = carry_out + uint64_t(s.limb[i] < partial);
  }
  return s;
}

// s + value * 2^position units, for a sum below 2^256. The loop has a constant trip count and
// constant limb indices, so that a compiler keeps the limbs in registers (a GPU would otherwise
// put them in local memory, which made every per-element sum slow).
MTK_HOST_DEVICE ExactSum exact_add_shifted(ExactSum s, uint64_t value, int position) {
  const int limb = position >> 6, offset = position & 63;
  const uint64_t low = value << offset;
  const uint64_t high = offset != 0 ? value >> (64 - offset) : 0u;
  uint64_t carry = 0u;
  for (int i = 0; i < 4; ++i) {
    const uint64_t addend = i == limb ? low : (i == limb + 1 ? high : 0u);
    const uint64_t partial = s.limb[i] + addend;
    const uint64_t carry_out = uint64_t(partial < addend);
    s.limb[i] = partial + carry;
    carry = carry_out + uint64_t(s.limb[i] < partial);
  }
  return s;
}

// A mass's float bits split for exact sums: mass = significand * 2^position units of 2^-149.
// Masses of one exponent field share the position, so their significands add as integers: a
// 64-bit sum of fewer than 2^40 of them is exact (exponent-binned sums).
MTK_HOST_DEVICE uint64_t mass_significand(uint32_t bits) {
  const uint32_t biased = bits >> 23;
  return (bits & 0x7fffffu) | (biased != 0u ? 0x800000u : 0u);
}

MTK_HOST_DEVICE int mass_position(uint32_t biased) { return biased != 0u ? int(biased) - 1 : 0; }

// A mass (a non-negative finite float32 of at most 2^64) added exactly.
MTK_HOST_DEVICE ExactSum exact_add_mass(ExactSum s, float mass) {
  const uint32_t bits = bits_from_float(mass);
  return exact_add_shifted(s, mass_significand(bits), mass_position(bits >> 23));
}

// The exact value of a 64-bit sum of significands of masses with exponent field `biased`.
MTK_HOST_DEVICE ExactSum exact_of_exponent_sum(uint64_t significands, uint32_t biased) {
  return exact_add_shifted(exact_zero(), significands, mass_position(biased));
}

MTK_HOST_DEVICE ExactSum exact_of_mass(float mass) { return exact_add_mass(exact_zero(), mass); }

// Masses known to lie between two bounds (min-p's: at least its least kept mass, at most the
// row's largest) sum exactly in one 64-bit word: each is its significand shifted up from the
// position of the lower bound's binade. Where `count` such terms must stay below 2^64, a mass
// costs a shift and an add instead of exact_add_mass's carries through four words.
struct MassWindow {
  int base;   // the position (units of 2^-149) of the lower bound's binade
  bool fits;  // whether `count` masses inside the bounds sum below 2^64
};

MTK_HOST_DEVICE MassWindow mass_window(uint32_t least_bits, uint32_t most_bits, int64_t count) {
  MassWindow w;
  w.base = mass_position(least_bits >> 23);
  const int span = mass_position(most_bits >> 23) - w.base;
  int count_bits = 0;  // count < 2^count_bits
  while (count_bits < 63 && (int64_t(1) << count_bits) <= count) ++count_bits;
  // A significand is below 2^24, so a term below 2^(24 + span) and the sum below
  // 2^(count_bits + 24 + span).
  w.fits = least_bits != 0u && span >= 0 && count_bits + 24 + span <= 64;
  return w;
}

MTK_HOST_DEVICE MassWindow no_mass_window() {
  MassWindow w;
  w.base = 0;
  w.fits = false;
  return w;
}

// A window sum plus the mass with nonzero bits `bits` inside the window's bounds.
MTK_HOST_DEVICE uint64_t window_add_mass(uint64_t sum, uint32_t bits, int base) {
  return sum + (mass_significand(bits) << (mass_position(bits >> 23) - base));
}

MTK_HOST_DEVICE ExactSum exact_of_window_sum(uint64_t sum, int base) {
  return exact_add_shifted(exact_zero(), sum, base);
}

// -1, 0 or 1 as a < b, a == b, a > b.
MTK_HOST_DEVICE int exact_compare(ExactSum a, ExactSum b) {
  for (int i = 3; i >= 0; --i) {
    if (a.limb[i] != b.limb[i]) return a.limb[i] < b.limb[i] ? -1 : 1;
  }
  return 0;
}

MTK_HOST_DEVICE bool exact_is_zero(ExactSum s) {
  return (s.limb[0] | s.limb[1] | s.limb[2] | s.limb[3]) == 0u;
}

// The sum rounded once to the nearest float32 (ties to even).
MTK_HOST_DEVICE float exact_to_f32(ExactSum s) {
  int top = 3;
  while (top > 0 && s.limb[top] == 0u) --top;
  if (s.limb[top] == 0u) return 0.0f;
  // The 64 bits from the highest set bit down, and whether anything below them is set.
  const int shift = leading_zeros_u64(s.limb[top]);
  uint64_t window = s.limb[top] << shift;
  uint64_t below = 0u;
  if (top > 0) {
    if (shift != 0) window |= s.limb[top - 1] >> (64 - shift);
    below = shift != 0 ? s.limb[top - 1] << shift : 0u;
    for (int i = top - 2; i >= 0; --i) below |= s.limb[i];
  }
  const int e = 64 * top - shift - 149;  // the window's lowest bit is 2^e
  return round_to_f32(window, e, below != 0u);
}

// s * f for a float32 f in [0, 1], as floor(s * f) and whether s * f is not an integer count of
// 2^-149: computed exactly (s times f's significand in five limbs, shifted right).
struct ScaledSum {
  ExactSum floor;
  bool fractional;
};

MTK_HOST_DEVICE ScaledSum exact_scaled(ExactSum s, float f) {
  ScaledSum r;
  r.floor = exact_zero();
  r.fractional = false;
  const uint32_t bits = bits_from_float(f);
  if (bits == 0u) return r;
  if (bits >= 0x3f800000u) {  // f == 1 (callers pass f <= 1)
    r.floor = s;
    return r;
  }
  const Significand q = significand_of(bits);
  uint64_t product[5];
  uint64_t carry = 0u;
  for (int i = 0; i < 4; ++i) {
    const U128 p = multiply_u64(s.limb[i], q.m);
    product[i] = p.lo + carry;
    carry = p.hi + uint64_t(product[i] < p.lo);
  }
  product[4] = carry;
  const int shift = -q.e;  // 24 to 172
  const int limbs = shift >> 6, bit_shift = shift & 63;
  for (int i = 0; i < limbs; ++i) r.fractional = r.fractional || product[i] != 0u;
  if (bit_shift != 0) {
    r.fractional = r.fractional || (product[limbs] << (64 - bit_shift)) != 0u;
  }
  for (int i = 0; i < 4; ++i) {
    const int source = i + limbs;
    uint64_t value = source < 5 ? product[source] >> bit_shift : 0u;
    if (bit_shift != 0 && source + 1 < 5) value |= product[source + 1] << (64 - bit_shift);
    r.floor.limb[i] = value;
  }
  return r;
}

// ceil(s * f): an integer count x satisfies x >= s * f exactly when x >= ceil(s * f), which is
// how the top-p and min-p filters compare.
MTK_HOST_DEVICE ExactSum exact_ceil_scaled(ExactSum s, float f) {
  const ScaledSum scaled = exact_scaled(s, f);
  if (!scaled.fractional) return scaled.floor;
  ExactSum one = exact_zero();
  one.limb[0] = 1u;
  return exact_add(scaled.floor, one);
}

// a - b for a >= b.
MTK_HOST_DEVICE ExactSum exact_subtract(ExactSum a, ExactSum b) {
  uint64_t borrow = 0u;
  for (int i = 0; i < 4; ++i) {
    const uint64_t partial = a.limb[i] - b.limb[i];
    const uint64_t borrow_out = uint64_t(a.limb[i] < b.limb[i]);
    a.limb[i] = partial - borrow;
    borrow = borrow_out + uint64_t(partial < borrow);
  }
  return a;
}

// ceil(s / 2^shift), for a quotient below 2^64: how many units of one exponent bin a sum needs.
MTK_HOST_DEVICE uint64_t exact_ceil_shifted(ExactSum s, int shift) {
  const int limb = shift >> 6, offset = shift & 63;
  uint64_t quotient = s.limb[limb] >> offset;
  if (offset != 0 && limb + 1 < 4) quotient |= s.limb[limb + 1] << (64 - offset);
  bool remainder = offset != 0 && (s.limb[limb] << (64 - offset)) != 0u;
  for (int i = 0; i < limb; ++i) remainder = remainder || s.limb[i] != 0u;
  return quotient + uint64_t(remainder);
}

// The float bits of the smallest mass whose exact value is at least `least` (itself at most
// 2^64). Float bits of non-negative floats order as their values, so the exact test
// "mass >= least" (min-p's) is then an integer comparison of bits, element by element.
MTK_HOST_DEVICE uint32_t least_mass_bits_reaching(ExactSum least) {
  uint32_t b = bits_from_float(exact_to_f32(least));  // within one step of the answer
  while (b > 0u && exact_compare(exact_of_mass(float_from_bits(b - 1u)), least) >= 0) --b;
  while (exact_compare(exact_of_mass(float_from_bits(b)), least) < 0) ++b;
  return b;
}

// ---- the sampler's per-row values, as the contract reads them ---------------------------------

// A uniform as the sampler uses it: in [0, 1), NaN and negatives as 0, 1 and above as the largest
// float below 1.
MTK_HOST_DEVICE float clamped_uniform(float u) {
  const uint32_t bits = bits_from_float(u);
  if ((bits & kF32Sign) != 0u || bits > kF32Exponent) return 0.0f;
  return bits >= 0x3f800000u ? float_from_bits(0x3f7fffffu) : u;
}

// Whether a temperature samples (a normal float above 0, +inf included) rather than picking the
// row's top-1 (<= 0, NaN, and subnormals, which count as 0).
MTK_HOST_DEVICE bool temperature_samples(float t) {
  const uint32_t bits = bits_from_float(t);
  return (bits & kF32Sign) == 0u && bits >= 0x00800000u && bits <= kF32Exponent;
}

// 1 / t correctly rounded and flushed (t above 2^126 gives a subnormal, so 0), for a
// temperature that samples (+inf gives 0).
MTK_HOST_DEVICE float reciprocal_temperature(float t) {
  return bits_from_float(t) == kF32Exponent ? 0.0f : flush_subnormal(divide_f32(1.0f, t));
}

// The two float operations of the sampler, each one IEEE rounding: never fused into a
// multiply-add (nvcc fuses across statements unless told not to; Metal kernels using these
// must compile with fast math off).
MTK_HOST_DEVICE float multiply_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

MTK_HOST_DEVICE float subtract_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

// A logit times 1 / temperature, the logit and the product flushed: the value the softmax
// exponentiates.
MTK_HOST_DEVICE float scaled_logit(float logit, float reciprocal) {
  return flush_subnormal(multiply_rn(flush_subnormal(logit), reciprocal));
}

// How far a scaled logit z lies below the row's largest, M, flushed: exp_of_negative_gap's
// argument.
MTK_HOST_DEVICE float gap_below(float most, float z) {
  return flush_subnormal(subtract_rn(most, z));
}

// top_p keeps the row unfiltered at 1 and above, and at NaN; at or below 0 it keeps one token.
MTK_HOST_DEVICE bool top_p_filters(float top_p) {
  const uint32_t bits = bits_from_float(top_p);
  return bits < 0x3f800000u || ((bits & kF32Sign) != 0u && bits <= 0xff800000u);
}

MTK_HOST_DEVICE float top_p_fraction(float top_p) {
  return (bits_from_float(top_p) & kF32Sign) != 0u ? 0.0f : top_p;
}

// min_p filters when above 0 (NaN does not); above 1 it counts as 1.
MTK_HOST_DEVICE bool min_p_filters(float min_p) {
  const uint32_t bits = bits_from_float(min_p);
  return (bits & kF32Sign) == 0u && bits != 0u && bits <= kF32Exponent;
}

MTK_HOST_DEVICE float min_p_fraction(float min_p) {
  return bits_from_float(min_p) >= 0x3f800000u ? 1.0f : min_p;
}

// top_k filters when 0 < k < n.
MTK_HOST_DEVICE bool top_k_filters(int64_t k, int64_t n) { return k > 0 && k < n; }

}  // namespace mtk
