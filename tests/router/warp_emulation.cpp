// Runs the CUDA router's per-token routine (lib/cuda/moe_route_warp.cuh) on the host: 32 fibers
// play the 32 lanes of a warp, and a shuffle is a barrier round trip through shared slots. The
// code under test is the kernel's own template, instantiated for the host, with the same
// dispatch (register routine by expert count, vector loads, streaming past 512 experts), so its
// selection logic, butterflies and slot bookkeeping are checked without a GPU. The only host
// substitutions are exp (std::exp for expf) and loads (memcpy for vector words).
//
// Built by tests/router/test_router_warp_emulation.py into a shared library exporting
// emulate_moe_route, which takes the C ABI's descriptors (assumed valid: the tests pass only
// problems the core accepts).
#include <ucontext.h>

#include <cstdint>
#include <vector>

#include "core/error.hpp"
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

struct EmulatedLanes {
  Warp* warp;
  int id;
  int lane() const { return id; }
  uint32_t shuffle_xor(uint32_t value, int lane_mask) {
    return warp->exchange(id, value, id ^ lane_mask);
  }
  uint32_t shuffle(uint32_t value, int source_lane) {
    return warp->exchange(id, value, source_lane);
  }
};

template <class Logit>
void route_all(const mtk::RouterProblem& p) {
  const int items = items_per_lane(p.experts);
  const bool vectors = items > 0 && can_load_vectors(p, items, sizeof(typename Logit::Storage));
  Warp warp;
  auto body = [&](int lane) {
    EmulatedLanes lanes{&warp, lane};
    for (int64_t token = 0; token < p.tokens; ++token) {
      switch (items) {
        case 1: route_token<Logit, 1>(p, token, vectors, lanes); break;
        case 2: route_token<Logit, 2>(p, token, vectors, lanes); break;
        case 4: route_token<Logit, 4>(p, token, vectors, lanes); break;
        case 8: route_token<Logit, 8>(p, token, vectors, lanes); break;
        case 16: route_token<Logit, 16>(p, token, vectors, lanes); break;
        default: route_streaming<Logit>(p, token, lanes); break;
      }
    }
  };
  warp.run(body);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int emulate_moe_route(
    const mtk_tensor* logits, const mtk_router_params* params, const mtk_tensor* weights,
    const mtk_tensor* ids) {
  mtk::RouterProblem p{};
  try {
    // The core's own validation and canonical form, exactly what the library hands a backend.
    p = mtk::make_router_problem(logits, params, weights, ids);
  } catch (const mtk::Error&) {
    return 2;
  }
  switch (p.dtype) {
    case MTK_FLOAT32: route_all<F32>(p); return 0;
    case MTK_FLOAT16: route_all<F16>(p); return 0;
    case MTK_BFLOAT16: route_all<BF16>(p); return 0;
    default: return 1;
  }
}
