// Compiles lib/core/sampling_math.hpp as device code, every function called from a kernel, so
// that the CUDA sampling kernels to come can share it (test-sampling builds it where nvcc is).
#include "core/sampling_math.hpp"
__global__ void sampling_math_device_check(const float* masses, float* out) {
  const unsigned index = blockIdx.x * blockDim.x + threadIdx.x;
  const float mass = mtk::probability_mass(masses[index]);
  mtk::ExactSum sum = mtk::exact_add_mass(mtk::exact_zero(), mass);
  sum = mtk::exact_add(sum, mtk::exact_of_mass(mtk::exp_of_negative_gap(masses[index])));
  const mtk::ExactSum up = mtk::exact_ceil_scaled(sum, mtk::top_p_fraction(0.9f));
  const mtk::ScaledSum down = mtk::exact_scaled(sum, mtk::clamped_uniform(0.5f));
  float result = mtk::exact_to_f32(sum) + mtk::divide_f32(1.0f, 3.0f);
  if (mtk::exact_compare(up, down.floor) > 0) {
    result = mtk::gap_below(1.0f, mtk::scaled_logit(result, 0.5f));
  }
  out[index] = result;
}
