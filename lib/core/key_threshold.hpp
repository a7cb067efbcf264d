// "selection_key(x) >= threshold" as a test on the raw value x, for passes that hold one
// threshold and compare every element against it (the CUDA sampled pass reads whole rows this
// way). Building the key costs a float a dozen instructions and a branch for NaN and -0; the
// test here is one comparison in the value's own domain, where IEEE comparison already treats
// NaN and +-0 the way the key order does once the bound is chosen as below.
//
// The set a test accepts is always {x : selection_key(x) >= t} for some t <= threshold, so
// "at least k accepted" still means "the top k are all accepted". t == threshold except in two
// corners where one comparison cannot draw the line, and the set grows to the next key class: a
// threshold only NaN reaches (largest) also accepts +inf, and one that every non-NaN value
// reaches (smallest) also accepts NaN.
#pragma once

#include <cstdint>

#include "float_formats.hpp"
#include "ordered_key.hpp"

namespace mtk {

// Floats compare in `Wide` (float for the 16-bit formats: exact widening). The test is
// (x < bound) != accept_unordered: with accept_unordered, values at or above the bound and NaN
// pass; without, values below the bound pass and NaN does not.
// The bound is always a value of the format, widened exactly; `bound_bits` is its pattern.
template <class Wide, class Bits>
struct FloatThresholdTest {
  Wide bound;
  Bits bound_bits;
  bool accept_unordered;
  MTK_HOST_DEVICE bool passes(Wide x) const { return (x < bound) != accept_unordered; }
};

// The same test with accept_unordered fixed at compile time (KeyThreshold::with_fixed_test):
// one comparison per element. A pass may compare two 16-bit values at once in their own format
// against bound_bits instead, which gives the same answers.
template <class T, bool AcceptUnordered>
struct FixedFloatTest {
  using Format = FloatFormat<T>;
  typename Format::Wide bound;
  typename Format::Bits bound_bits;
  MTK_HOST_DEVICE bool operator()(T v) const {
    return (Format::widen(v) < bound) != AcceptUnordered;
  }
};

namespace key_threshold_detail {

// The test for keys of a float format (`Bits` with the given masks); widen(bits) turns a bit
// pattern of the format into the comparison type exactly.
template <class Wide, class Bits, class Widen>
MTK_HOST_DEVICE FloatThresholdTest<Wide, Bits> float_test(Bits threshold, bool largest,
                                                          Bits sign_mask, Bits exp_mask,
                                                          Widen widen) {
  const auto test = [&](Bits bound, bool accept_unordered) {
    return FloatThresholdTest<Wide, Bits>{widen(bound), bound, accept_unordered};
  };
  const Bits magnitude_mask = Bits(~sign_mask);
  const Bits negative_infinity = Bits(sign_mask | exp_mask);
  const Bits quiet_nan = Bits(exp_mask | (Bits(exp_mask >> 1) & magnitude_mask & Bits(~exp_mask)));
  if (largest) {
    // The smallest non-NaN value whose key is at least the threshold.
    const Bits bits = key_to_float_bits(threshold, sign_mask);
    if ((bits & magnitude_mask) > exp_mask) {  // a NaN pattern: above +inf's key or below -inf's
      return test((threshold & sign_mask) ? exp_mask : negative_infinity, true);
    }
    return test(bits, true);
  }
  // Smallest: the set {largest-key <= ceiling}; NaN's largest-key is the maximum.
  const Bits ceiling = Bits(~threshold);
  if (ceiling == Bits(~Bits(0))) return test(quiet_nan, true);  // everything
  const Bits bits = key_to_float_bits(ceiling, sign_mask);
  const Bits magnitude = Bits(bits & magnitude_mask);
  if (ceiling & sign_mask) {  // the ceiling is a non-negative value w (or above +inf)
    if (magnitude >= exp_mask) return test(quiet_nan, true);  // every non-NaN: widen to all
    return test(Bits(magnitude + 1), false);                  // x < next_up(w)  <=>  x <= w
  }
  if (magnitude > exp_mask) return test(negative_infinity, false);  // below -inf: nothing
  // A negative w: next_up(w) has one unit less magnitude. The pattern of -0 (a key no value
  // has, as -0 takes +0's) leaves w = -denorm_min; either way the bound is -0, and x < -0
  // excludes both zeros.
  if (magnitude == 0) return test(sign_mask, false);
  return test(Bits(sign_mask | Bits(magnitude - 1)), false);
}

}  // namespace key_threshold_detail

// KeyThreshold<T>::make(threshold, largest) builds the test; passes(v) applies it.
// with_fixed_test(visit) calls visit(test) with a callable T -> bool whose kind of comparison is
// fixed at compile time: one instruction per float element, where a runtime flag costs two more
// (a pass that tests every element of a row runs its loop through this). Integer types compare
// keys directly (already one xor and one comparison).
//
// lowest_accepted_key(threshold, largest) is the t of the set the test accepts: every accepted
// value's key is at least it, and its own test accepts the same set. Whoever ranks the accepted
// values by their distance above the threshold (the CUDA key-prefix bins) must measure from it:
// measured from a NaN-only threshold, +inf lies below it.
template <class T, class = void>
struct KeyThreshold {
  using Key = typename KeyTraits<T>::Key;
  Key threshold;
  bool largest;
  static MTK_HOST_DEVICE KeyThreshold make(Key t, bool largest) { return {t, largest}; }
  static MTK_HOST_DEVICE Key lowest_accepted_key(Key t, bool) { return t; }
  MTK_HOST_DEVICE bool passes(T v) const { return selection_key(v, largest) >= threshold; }
  template <class Visit>
  MTK_HOST_DEVICE void with_fixed_test(Visit&& visit) const {
    const KeyThreshold self = *this;
    visit([self](T v) { return self.passes(v); });
  }
};

template <class T>
struct KeyThreshold<T, decltype(void(FloatFormat<T>::kSign))> {
  using Format = FloatFormat<T>;
  using Wide = typename Format::Wide;
  FloatThresholdTest<Wide, typename Format::Bits> test;
  static MTK_HOST_DEVICE KeyThreshold make(typename Format::Bits t, bool largest) {
    return {key_threshold_detail::float_test<Wide, typename Format::Bits>(
        t, largest, Format::kSign, Format::kExponent, Format::widen_bits)};
  }
  // The two corners: above +inf's key only NaN reaches a largest-threshold, and the test takes
  // +inf too; where every non-NaN value reaches a smallest-threshold, it takes NaN, whose key
  // is 0.
  static MTK_HOST_DEVICE typename Format::Bits lowest_accepted_key(typename Format::Bits t,
                                                                   bool largest) {
    using Bits = typename Format::Bits;
    const Bits infinity_key = Bits(Format::kSign | Format::kExponent);  // +inf's, largest
    if (largest) return t > infinity_key ? infinity_key : t;
    return t <= Bits(~infinity_key) ? Bits(0) : t;
  }
  MTK_HOST_DEVICE bool passes(T v) const { return test.passes(Format::widen(v)); }
  template <class Visit>
  MTK_HOST_DEVICE void with_fixed_test(Visit&& visit) const {
    if (test.accept_unordered) {
      visit(FixedFloatTest<T, true>{test.bound, test.bound_bits});
    } else {
      visit(FixedFloatTest<T, false>{test.bound, test.bound_bits});
    }
  }
};

}  // namespace mtk
