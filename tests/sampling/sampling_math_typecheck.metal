// Type-checks lib/core/sampling_math.hpp as Metal kernels will read it: in the kernel dialect
// (C++ for OpenCL against tests/metal/compat on Linux), every function called from a kernel.
#include "mtk_dialect.h"
#include "../core/sampling_math.hpp"

kernel void mtk_sampling_math_typecheck(device const float* masses [[buffer(0)]],
                                        device float* out [[buffer(1)]],
                                        uint index [[thread_position_in_grid]]) {
  const float mass = mtk::probability_mass(masses[index]);
  mtk::ExactSum sum = mtk::exact_add_mass(mtk::exact_zero(), mass);
  sum = mtk::exact_add(sum, mtk::exact_of_mass(mtk::exp_of_negative_gap(masses[index])));
  const mtk::ExactSum up = mtk::exact_ceil_scaled(sum, mtk::top_p_fraction(0.9f));
  const mtk::ScaledSum down = mtk::exact_scaled(sum, mtk::clamped_uniform(0.5f));
  float result = mtk::exact_to_f32(sum) + mtk::divide_f32(1.0f, 3.0f);
  if (mtk::exact_compare(up, down.floor) > 0 && mtk::temperature_samples(0.7f) &&
      mtk::min_p_filters(0.1f) && mtk::top_p_filters(0.9f) && mtk::top_k_filters(5, 10) &&
      !mtk::is_nan_f32(result)) {
    result = mtk::scaled_logit(result, mtk::reciprocal_temperature(0.7f)) +
             mtk::min_p_fraction(0.1f) + mtk::gap_below(1.0f, result);
  }
  // The exponent-binned sums and the filters' per-row thresholds.
  const uint bits = mtk::bits_from_float(mass);
  const mtk::ExactSum binned = mtk::exact_of_exponent_sum(mtk::mass_significand(bits), bits >> 23);
  const ulong units = mtk::exact_ceil_shifted(mtk::exact_subtract(sum, binned),
                                                 mtk::mass_position(bits >> 23));
  if (units != 0u && mtk::least_mass_bits_reaching(binned) <= bits) {
    result = mtk::divide_by(result, mtk::mass_divisor(2.0f));
  }
  // The window sums.
  const mtk::MassWindow window = bits != 0u ? mtk::mass_window(bits, bits, 1) : mtk::no_mass_window();
  if (window.fits && mtk::exact_compare(mtk::exact_of_window_sum(
                         mtk::window_add_mass(0u, bits, window.base), window.base), binned) == 0) {
    result += 1.0f;
  }
  out[index] = result;
}
