// Runs the CUDA router's per-token routines (lib/cuda/moe_route_warp.cuh) on the host: 32 fibers
// play the 32 lanes of a warp, and a shuffle, a vote or a group maximum is a barrier round trip
// through shared slots. The code under test is the kernel's own template, instantiated for the
// host, with the same dispatch (register layout and plan by expert count, several tokens per warp
// for short rows, vector loads, streaming past 512 experts), so its selection logic, butterflies
// and slot bookkeeping are checked without a GPU. The only host substitutions are exp (std::exp
// for expf) and loads (memcpy for vector words).
//
// Built by tests/router/test_router_warp_emulation.py into a shared library exporting
// emulate_moe_route, which takes the C ABI's descriptors (assumed valid: the tests pass only
// problems the core accepts).
#include <ucontext.h>

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/ordered_key.hpp"
#include "core/validate.hpp"
#include "cuda/moe_route_warp.cuh"
#include "metaltopk.h"

namespace {

using namespace mtk::cuda_router;

constexpr size_t kFiberStack = 256 * 1024;

// 32 fibers in a ring. A barrier switches to the next lane; since every lane reaches the same
// barriers in the same order (collectives sit in warp-uniform control flow, as on the GPU), lane
// 0 resumes only once all 32 have arrived.
class Warp {
 public:
  template <class Body>
  void run(Body& body) {
    body_ = &body;
    run_body_ = [](void* b, int lane) { (*static_cast<Body*>(b))(lane); };
    stacks_.assign(kWarpSize, std::vector<char>(kFiberStack));
    for (int lane = 0; lane < kWarpSize; ++lane) {
      getcontext(&fibers_[lane]);
      fibers_[lane].uc_stack.ss_sp = stacks_[lane].data();
      fibers_[lane].uc_stack.ss_size = kFiberStack;
      // A finished lane hands over to the next one; the last returns to the caller.
      fibers_[lane].uc_link = lane + 1 < kWarpSize ? &fibers_[lane + 1] : &caller_;
      makecontext(&fibers_[lane], reinterpret_cast<void (*)()>(&Warp::entry), 1, lane);
    }
    current_ = this;
    swapcontext(&caller_, &fibers_[0]);
  }

  void barrier(int lane) { swapcontext(&fibers_[lane], &fibers_[(lane + 1) % kWarpSize]); }

  uint32_t exchange(int lane, uint32_t value, int source_lane) {
    slots_[lane] = value;
    barrier(lane);
    const uint32_t result = slots_[source_lane];
    barrier(lane);
    return result;
  }

  // The maximum over the aligned group of `group_lanes` lanes that holds `lane` (redux.sync).
  uint32_t group_max(int lane, uint32_t value, int group_lanes) {
    slots_[lane] = value;
    barrier(lane);
    const int first = lane / group_lanes * group_lanes;
    uint32_t result = 0;
    for (int l = first; l < first + group_lanes; ++l) {
      result = slots_[l] > result ? slots_[l] : result;
    }
    barrier(lane);
    return result;
  }

  // Bit l: the predicate of lane l of the aligned group of `group_lanes` lanes (ballot.sync).
  uint32_t group_ballot(int lane, bool predicate, int group_lanes) {
    slots_[lane] = predicate;
    barrier(lane);
    const int first = lane / group_lanes * group_lanes;
    uint32_t votes = 0;
    for (int l = first; l < first + group_lanes; ++l) votes |= (slots_[l] != 0u) << (l - first);
    barrier(lane);
    return votes;
  }

 private:
  static void entry(int lane) { current_->run_body_(current_->body_, lane); }

  static thread_local Warp* current_;
  void* body_ = nullptr;
  void (*run_body_)(void*, int) = nullptr;
  ucontext_t caller_{}, fibers_[kWarpSize]{};
  std::vector<std::vector<char>> stacks_;
  uint32_t slots_[kWarpSize] = {};
};

thread_local Warp* Warp::current_ = nullptr;

// Lane `id` of the warp (0..31), in the group of kLanes lanes that routes its token.
template <int kLanes>
struct EmulatedLanes {
  static constexpr int kSize = kLanes;
  Warp* warp;
  int id;
  int lane() const { return id % kLanes; }
  uint32_t shuffle_xor(uint32_t value, int lane_mask) {
    return warp->exchange(id, value, id ^ lane_mask);
  }
  uint32_t shuffle(uint32_t value, int source_lane) {
    return warp->exchange(id, value, id / kLanes * kLanes + source_lane);
  }
  uint32_t reduce_max(uint32_t value) { return warp->group_max(id, value, kLanes); }
  uint32_t ballot(bool predicate) { return warp->group_ballot(id, predicate, kLanes); }
};

// Warp w routes tokens [w * 32 / kLanes, (w + 1) * 32 / kLanes), as the kernels' grid does.
// The plan's choice of numerator path is the caller's, so that both are checked.
template <class Logit>
void route_all(const mtk::RouterProblem& p, bool numerators_in_rounds) {
  Warp warp;
  const bool in_registers = visit_register_layout(p.experts, [&](auto layout) {
    using L = decltype(layout);
    RegisterPlan plan =
        plan_registers(p, L::kItems, L::kLanes, sizeof(typename Logit::Storage), 1);
    plan.numerators_in_rounds = numerators_in_rounds;
    auto body = [&](int lane) {
      EmulatedLanes<L::kLanes> lanes{&warp, lane};
      for (int64_t first = 0; first < p.tokens; first += kWarpSize / L::kLanes) {
        const int64_t token = first + lane / L::kLanes;
        visit_register_path(p, plan, [&](auto path) {
          route_token<Logit, L::kItems, decltype(path)::value>(p, token, plan, lanes);
        });
      }
    };
    warp.run(body);
  });
  if (in_registers) return;
  auto body = [&](int lane) {
    EmulatedLanes<kWarpSize> lanes{&warp, lane};
    for (int64_t token = 0; token < p.tokens; ++token) route_streaming<Logit>(p, token, lanes);
  };
  warp.run(body);
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
