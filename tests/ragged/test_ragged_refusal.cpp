// Backends without ragged kernels must refuse mtk_topk_ragged (and mtk_topk without values)
// with MTK_ERROR_BACKEND_UNAVAILABLE and a message naming them, never run it. The GPU backends
// cannot be created on a machine without their device, so stand-ins that implement only what
// every backend must (the ragged members keep Backend's defaults) register under the CUDA,
// Metal and MPSGraph kinds, and the calls go through the C ABI as a caller's would.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/backend.hpp"
#include "core/error.hpp"
#include "metaltopk.h"

namespace {

int failures = 0;

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
bool present() { return true; }

const mtk::BackendRegistration cuda(MTK_BACKEND_CUDA, 0, make_stand_in<MTK_BACKEND_CUDA>, present);
const mtk::BackendRegistration metal(MTK_BACKEND_METAL, 0, make_stand_in<MTK_BACKEND_METAL>,
                                     present);
const mtk::BackendRegistration mpsgraph(MTK_BACKEND_MPSGRAPH, 0,
                                        make_stand_in<MTK_BACKEND_MPSGRAPH>, present);

void expect_refusal(mtk_status status, const char* backend, const char* call) {
  const char* message = mtk_last_error_message();
  if (status != MTK_ERROR_BACKEND_UNAVAILABLE || std::strstr(message, backend) == nullptr) {
    std::fprintf(stderr, "%s on %s: status %d, message '%s' (want %d naming the backend)\n",
                 call, backend, static_cast<int>(status), message,
                 static_cast<int>(MTK_ERROR_BACKEND_UNAVAILABLE));
    ++failures;
  }
}

mtk_tensor matrix(void* data, mtk_dtype dtype, int64_t rows, int64_t cols) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 2;
  t.sizes[0] = rows;
  t.sizes[1] = cols;
  t.strides[0] = cols;
  t.strides[1] = 1;
  return t;
}

}  // namespace

int main() {
  float scores[2][4] = {{1, 2, 3, 4}, {4, 3, 2, 1}};
  int32_t lengths[2] = {3, 4};
  int64_t indices[2][2] = {{-7, -7}, {-7, -7}};
  float values[2][2] = {};
  const mtk_tensor input = matrix(scores, MTK_FLOAT32, 2, 4);
  const mtk_tensor values_t = matrix(values, MTK_FLOAT32, 2, 2);
  const mtk_tensor indices_t = matrix(indices, MTK_INT64, 2, 2);
  mtk_tensor lengths_t{};
  lengths_t.data = lengths;
  lengths_t.dtype = MTK_INT32;
  lengths_t.ndim = 1;
  lengths_t.sizes[0] = 2;
  lengths_t.strides[0] = 1;
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;

  for (const mtk_backend kind : {MTK_BACKEND_CUDA, MTK_BACKEND_METAL, MTK_BACKEND_MPSGRAPH}) {
    const char* name = mtk_backend_name(kind);
    mtk_context ctx = nullptr;
    if (mtk_context_create(kind, 0, &ctx) != MTK_SUCCESS) {
      std::fprintf(stderr, "no stand-in %s context: %s\n", name, mtk_last_error_message());
      return 1;
    }
    expect_refusal(mtk_topk_ragged(ctx, &input, 2, 1, 1, &params, &values_t, &indices_t, nullptr),
                   name, "mtk_topk_ragged");
    size_t bytes = 0;
    expect_refusal(
        mtk_topk_ragged_workspace_size(ctx, &input, 2, 1, 1, &params, MTK_INT64, &bytes), name,
        "mtk_topk_ragged_workspace_size");
    char workspace[64];
    expect_refusal(mtk_topk_ragged_with_workspace(ctx, &input, 2, 1, 1, &params, &values_t,
                                                  &indices_t, workspace, sizeof workspace,
                                                  nullptr),
                   name, "mtk_topk_ragged_with_workspace");
    expect_refusal(mtk_topk(ctx, &input, 2, 1, 1, 1, nullptr, &indices_t, nullptr), name,
                   "mtk_topk without values");
    // Bad arguments are still reported as such, before the refusal.
    if (mtk_topk_ragged(ctx, &input, -1, 1, 1, &params, &values_t, &indices_t, nullptr) !=
        MTK_ERROR_INVALID_ARGUMENT) {
      std::fprintf(stderr, "%s: k = -1 was not an invalid argument\n", name);
      ++failures;
    }
    mtk_context_destroy(ctx);
  }
  if (indices[0][0] != -7 || indices[1][1] != -7) {
    std::fprintf(stderr, "a refused call wrote its outputs\n");
    ++failures;
  }
  if (failures != 0) {
    std::fprintf(stderr, "test_ragged_refusal: %d failures\n", failures);
    return 1;
  }
  std::printf("test_ragged_refusal: cuda, metal and mpsgraph refuse ragged rows by name\n");
  return 0;
}
