// Backends without sampling kernels must refuse every sampling entry with
// MTK_ERROR_BACKEND_UNAVAILABLE and a message naming them, never run it. As in
// tests/ragged/test_ragged_refusal.cpp, stand-ins that keep Backend's defaults register under
// the GPU kinds (this machine may have no GPU), and the calls go through the C ABI.
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
                void*) override {}
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

mtk_tensor tensor(void* data, mtk_dtype dtype, int64_t rows, int64_t cols) {
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

}  // namespace

int main() {
  float probs[2][4] = {{0.1f, 0.2f, 0.3f, 0.4f}, {0.4f, 0.3f, 0.2f, 0.1f}};
  float out[2][4] = {{-7, -7, -7, -7}, {-7, -7, -7, -7}};
  float uniforms[2] = {0.5f, 0.5f};
  int64_t samples[2] = {-7, -7};
  const mtk_tensor input = tensor(probs, MTK_FLOAT32, 2, 4);
  const mtk_tensor out_t = tensor(out, MTK_FLOAT32, 2, 4);
  const mtk_tensor uniforms_t = tensor(uniforms, MTK_FLOAT32, 2, 0);
  const mtk_tensor samples_t = tensor(samples, MTK_INT64, 2, 0);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_k_value = 2;

  for (const mtk_backend kind : {MTK_BACKEND_CUDA, MTK_BACKEND_METAL, MTK_BACKEND_MPSGRAPH}) {
    const char* name = mtk_backend_name(kind);
    mtk_context ctx = nullptr;
    if (mtk_context_create(kind, 0, &ctx) != MTK_SUCCESS) {
      std::fprintf(stderr, "no stand-in %s context: %s\n", name, mtk_last_error_message());
      return 1;
    }
    expect_refusal(mtk_top_k_mask_logits(ctx, &input, &params, &out_t, nullptr), name,
                   "mtk_top_k_mask_logits");
    expect_refusal(mtk_renorm_probs(ctx, &input, &params, &out_t, nullptr), name,
                   "mtk_renorm_probs");
    expect_refusal(mtk_sample(ctx, &input, &params, &uniforms_t, &samples_t, nullptr), name,
                   "mtk_sample");
    expect_refusal(mtk_sample_from_logits(ctx, &input, &params, &uniforms_t, &samples_t, nullptr),
                   name, "mtk_sample_from_logits");
    size_t bytes = 0;
    expect_refusal(mtk_sampling_workspace_size(ctx, MTK_SAMPLING_SAMPLE, &input, &params,
                                               MTK_INT64, &bytes),
                   name, "mtk_sampling_workspace_size");
    char workspace[64];
    expect_refusal(mtk_sampling_with_workspace(ctx, MTK_SAMPLING_RENORM_PROBS, &input, &params,
                                               nullptr, &out_t, workspace, sizeof workspace,
                                               nullptr),
                   name, "mtk_sampling_with_workspace");
    // Bad arguments are still reported as such, before the refusal.
    if (mtk_sample(ctx, &input, &params, nullptr, &samples_t, nullptr) !=
        MTK_ERROR_INVALID_ARGUMENT) {
      std::fprintf(stderr, "%s: missing uniforms were not an invalid argument\n", name);
      ++failures;
    }
    mtk_context_destroy(ctx);
  }
  if (out[0][0] != -7 || samples[0] != -7) {
    std::fprintf(stderr, "a refused call wrote its outputs\n");
    ++failures;
  }
  if (failures != 0) {
    std::fprintf(stderr, "test_sampling_refusal: %d failures\n", failures);
    return 1;
  }
  std::printf("test_sampling_refusal: cuda, metal and mpsgraph refuse sampling by name\n");
  return 0;
}
