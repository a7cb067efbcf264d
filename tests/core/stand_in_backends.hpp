// What the refusal tests (tests/ragged/test_ragged_refusal.cpp,
// tests/sampling/test_sampling_refusal.cpp) share: backends without the optional kernels must
// refuse those entries with MTK_ERROR_BACKEND_UNAVAILABLE and a message naming them. The GPU
// backends cannot be created on a machine without their device, so including this header
// registers stand-ins under the CUDA, Metal and MPSGraph kinds that implement only what every
// backend must (the optional members keep Backend's defaults), and the tests call them through
// the C ABI as a caller would.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "metaltopk.h"

namespace stand_in {

// Every failed check, the tests' own included: exit_status reports them.
inline int failures = 0;

class StandIn final : public mtk::Backend {
 public:
  explicit StandIn(mtk_backend kind) : kind_(kind) {}
  mtk_backend kind() const override { return kind_; }
  bool supports_dtype(mtk_dtype) const override { return true; }
  void* allocate(size_t bytes) override { return std::malloc(bytes); }
  void deallocate(void* ptr) noexcept override { std::free(ptr); }
  void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind, void*) override {
    std::memcpy(dst, src, bytes);
  }
  void synchronize(void*) override {}
  std::shared_ptr<const mtk::PlannedTopk> plan_topk(const mtk::TopkProblem&) override {
    return std::make_shared<mtk::PlannedTopk>();
  }
  // A refused call must never get this far.
  void run_topk(const mtk::PlannedTopk&, const mtk::TopkProblem&, mtk::Workspace,
                void*) override {
    mtk::fail(MTK_ERROR_INTERNAL, "the stand-in's run_topk ran");
  }
  void moe_route(const mtk::RouterProblem&, void*) override {}
  mtk::CacheCounters cache_counters() const override { return {}; }
  size_t scratch_bytes() const override { return 0; }
  void set_num_threads(int) override {}

 private:
  mtk_backend kind_;
};

template <mtk_backend Kind>
std::unique_ptr<mtk::Backend> make_stand_in(int) {
  return std::make_unique<StandIn>(Kind);
}
inline bool present() { return true; }

inline const mtk::BackendRegistration cuda(MTK_BACKEND_CUDA, 0, make_stand_in<MTK_BACKEND_CUDA>,
                                           present);
inline const mtk::BackendRegistration metal(MTK_BACKEND_METAL, 0,
                                            make_stand_in<MTK_BACKEND_METAL>, present);
inline const mtk::BackendRegistration mpsgraph(MTK_BACKEND_MPSGRAPH, 0,
                                               make_stand_in<MTK_BACKEND_MPSGRAPH>, present);

inline void expect_refusal(mtk_status status, const char* backend, const char* call) {
  const char* message = mtk_last_error_message();
  if (status != MTK_ERROR_BACKEND_UNAVAILABLE || std::strstr(message, backend) == nullptr) {
    std::fprintf(stderr, "%s on %s: status %d, message '%s' (want %d naming the backend)\n",
                 call, backend, static_cast<int>(status), message,
                 static_cast<int>(MTK_ERROR_BACKEND_UNAVAILABLE));
    ++failures;
  }
}

// Dense and row-major: a matrix of `rows` x `cols`, or a vector of `rows` when `cols` is 0.
inline mtk_tensor dense_tensor(void* data, mtk_dtype dtype, int64_t rows, int64_t cols) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = cols > 0 ? 2 : 1;
  t.sizes[0] = rows;
  t.sizes[1] = cols;
  t.strides[0] = cols > 0 ? cols : 1;
  t.strides[1] = 1;
  return t;
}

// Calls `calls(ctx, name)` with a context on each stand-in; false, having said why, where one
// cannot be created.
template <class Calls>
bool for_each(Calls calls) {
  for (const mtk_backend kind : {MTK_BACKEND_CUDA, MTK_BACKEND_METAL, MTK_BACKEND_MPSGRAPH}) {
    const char* name = mtk_backend_name(kind);
    mtk_context ctx = nullptr;
    if (mtk_context_create(kind, 0, &ctx) != MTK_SUCCESS) {
      std::fprintf(stderr, "no stand-in %s context: %s\n", name, mtk_last_error_message());
      return false;
    }
    calls(ctx, name);
    mtk_context_destroy(ctx);
  }
  return true;
}

// main's exit status, after the last check: that no refused call wrote its outputs.
inline int exit_status(const char* program, bool outputs_untouched, const char* refused) {
  if (!outputs_untouched) {
    std::fprintf(stderr, "a refused call wrote its outputs\n");
    ++failures;
  }
  if (failures != 0) {
    std::fprintf(stderr, "%s: %d failures\n", program, failures);
    return 1;
  }
  std::printf("%s: cuda, metal and mpsgraph refuse %s by name\n", program, refused);
  return 0;
}

}  // namespace stand_in
