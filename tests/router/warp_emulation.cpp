// Runs the CUDA router's per-token routines (lib/cuda/moe_route_warp.cuh) on the host, on the
// fiber emulation the top-k kernels' tests use (tests/cuda/emulation/fiber_cuda.hpp): a block of
// one warp whose 32 lanes are fibers, and shuffles, votes and maxima are its emulated warp
// collectives. The code under test is the kernel's own template, instantiated for the host, with
// the same dispatch (register layout and plan by expert count, several tokens per warp for short
// rows, vector loads, streaming past 512 experts), so its selection logic, butterflies and slot
// bookkeeping are checked without a GPU; a collective that not every lane reaches aborts, as it
// would hang a GPU. The only host substitutions are exp (std::exp for expf) and loads (memcpy for
// vector words).
//
// Built by tests/router/test_router_warp_emulation.py into a shared library exporting
// emulate_moe_route, which takes the C ABI's descriptors (assumed valid: the tests pass only
// problems the core accepts).
#include "fiber_cuda.hpp"

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/ordered_key.hpp"
#include "core/validate.hpp"
#include "cuda/moe_route_warp.cuh"
#include "metaltopk.h"

namespace {

using namespace mtk::cuda_router;

// The streaming routine keeps more on a lane's stack than the top-k kernels do.
constexpr size_t kFiberStack = 256 * 1024;

// GroupLanes (moe_route_warp.cuh) over the emulated intrinsics, which take no width argument: a
// group's shuffle names its source by its lane in the warp, and its ballot is cut out of the
// warp's.
template <int kLanes>
struct EmulatedLanes {
  static constexpr int kSize = kLanes;
  static constexpr unsigned kWholeWarp = 0xffffffffu;

  static int group_base() { return int(threadIdx.x) % kWarpSize / kLanes * kLanes; }
  int lane() const { return int(threadIdx.x) % kLanes; }
  uint32_t shuffle_xor(uint32_t value, int lane_mask) const {
    return static_cast<uint32_t>(__shfl_xor_sync(kWholeWarp, value, lane_mask));
  }
  uint32_t shuffle(uint32_t value, int source_lane) const {
    return __shfl_sync(kWholeWarp, value, group_base() + source_lane);
  }
  uint32_t ballot(bool predicate) const {
    const uint32_t votes = __ballot_sync(kWholeWarp, predicate);
    if constexpr (kLanes == kWarpSize) {
      return votes;
    } else {
      return (votes >> group_base()) & ((1u << kLanes) - 1u);
    }
  }
  uint32_t reduce_max(uint32_t value) const {
    if constexpr (kLanes == kWarpSize) {
      return __reduce_max_sync(kWholeWarp, value);
    } else {
      for (int mask = kLanes / 2; mask > 0; mask >>= 1) value = max(value, shuffle_xor(value, mask));
      return value;
    }
  }
};

// Warp w routes tokens [w * 32 / kLanes, (w + 1) * 32 / kLanes), as the kernels' grid does.
// The plan's choice of numerator path is the caller's, so that both are checked.
template <class Logit>
void route_all(const mtk::RouterProblem& p, bool numerators_in_rounds) {
  emu::fiber_stack_bytes = kFiberStack;
  const bool in_registers = visit_register_layout(p.experts, [&](auto layout) {
    using L = decltype(layout);
    RegisterPlan plan =
        plan_registers(p, L::kItems, L::kLanes, sizeof(typename Logit::Storage), 1);
    plan.numerators_in_rounds = numerators_in_rounds;
    emu::run_block(kWarpSize, [&] {
      EmulatedLanes<L::kLanes> lanes;
      for (int64_t first = 0; first < p.tokens; first += kWarpSize / L::kLanes) {
        const int64_t token = first + int(threadIdx.x) / L::kLanes;
        visit_register_path(p, plan, [&](auto path) {
          route_token<Logit, L::kItems, decltype(path)::value>(p, token, plan, lanes);
        });
      }
    });
  });
  if (in_registers) return;
  emu::run_block(kWarpSize, [&] {
    EmulatedLanes<kWarpSize> lanes;
    for (int64_t token = 0; token < p.tokens; ++token) route_streaming<Logit>(p, token, lanes);
  });
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int emulate_moe_route(
    const mtk_tensor* logits, const mtk_router_params* params, const mtk_tensor* weights,
    const mtk_tensor* ids, int numerators_in_rounds) {
  mtk::RouterProblem p{};
  try {
    // The core's own validation and canonical form, exactly what the library hands a backend.
    p = mtk::make_router_problem(logits, params, weights, ids);
  } catch (const mtk::Error&) {
    return 2;
  }
  switch (p.dtype) {
    case MTK_FLOAT32: route_all<F32>(p, numerators_in_rounds != 0); return 0;
    case MTK_FLOAT16: route_all<F16>(p, numerators_in_rounds != 0); return 0;
    case MTK_BFLOAT16: route_all<BF16>(p, numerators_in_rounds != 0); return 0;
    default: return 1;
  }
}

// How many bit patterns the kernels' branch-free float keys map differently from
// core/ordered_key.hpp: every f16 and bf16 pattern, and f32 edge cases plus a spread sample.
extern "C" __attribute__((visibility("default"))) int64_t count_float_key_mismatches() {
  int64_t mismatches = 0;
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const uint16_t half = static_cast<uint16_t>(bits);
    mismatches += storage_key(half, F16{}) != mtk::key_from_f16_bits(half);
    mismatches += storage_key(half, BF16{}) != mtk::key_from_bf16_bits(half);
  }
  std::vector<uint32_t> singles = {0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u,
                                   0x007fffffu, 0x807fffffu, 0x00800000u, 0x80800000u,
                                   0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u,
                                   0x7f800001u, 0xff800001u, 0x7fc00000u, 0xffc00000u,
                                   0x7fffffffu, 0xffffffffu, 0x3f800000u, 0xbf800000u};
  for (uint64_t i = 0; i < (uint64_t{1} << 32); i += 4093) singles.push_back(uint32_t(i));
  for (const uint32_t bits : singles) {
    mismatches += mtk::key_from_f32(mtk::float_from_bits(bits)) != mtk::key_from_f32_bits(bits);
  }
  return mismatches;
}
