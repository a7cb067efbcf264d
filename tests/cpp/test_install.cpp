// A downstream C++ program built against an installed metaltopk (via pkg-config and via CMake's
// find_package): it must compile with the installed header alone, link, load, and compute a
// correct top-k. Exits nonzero with a message on any mismatch.
#include <metaltopk.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void check(mtk_status status, const char* what) {
  if (status != MTK_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": " + mtk_status_string(status) + ": " +
                             mtk_last_error_message());
  }
}

struct ContextDeleter {
  void operator()(mtk_context_s* ctx) const { mtk_context_destroy(ctx); }
};
using Context = std::unique_ptr<mtk_context_s, ContextDeleter>;

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

int run() {
  if (mtk_version() != MTK_VERSION) {
    std::fprintf(stderr, "header version %d, library version %d\n", MTK_VERSION, mtk_version());
    return 1;
  }
  mtk_context raw = nullptr;
  check(mtk_context_create(MTK_BACKEND_CPU, 0, &raw), "mtk_context_create");
  Context ctx(raw);

  // Two rows; the second has a NaN (ranks first), a tie (lower index first) and -0.0 vs +0.0.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> input = {0.5f, 3.0f, -1.0f, 2.0f, 3.0f, 1.0f,
                              -0.0f, 7.0f, nan, 0.0f, 7.0f, -5.0f};
  std::vector<float> values(2 * 3);
  std::vector<int64_t> indices(2 * 3, -1);
  const mtk_tensor in = matrix(input.data(), MTK_FLOAT32, 2, 6);
  const mtk_tensor val = matrix(values.data(), MTK_FLOAT32, 2, 3);
  const mtk_tensor idx = matrix(indices.data(), MTK_INT64, 2, 3);
  check(mtk_topk(ctx.get(), &in, 3, -1, 1, 1, &val, &idx, nullptr), "mtk_topk");
  check(mtk_synchronize(ctx.get(), nullptr), "mtk_synchronize");

  const int64_t want_indices[6] = {1, 4, 3, 2, 1, 4};
  for (int i = 0; i < 6; ++i) {
    const float want = input[(i / 3) * 6 + want_indices[i]];
    const bool same = std::isnan(want) ? std::isnan(values[i]) : values[i] == want;
    if (indices[i] != want_indices[i] || !same) {
      std::fprintf(stderr, "element %d: got (%g, %lld), want (%g, %lld)\n", i, values[i],
                   static_cast<long long>(indices[i]), want,
                   static_cast<long long>(want_indices[i]));
      return 1;
    }
  }

  // The two smallest: row 0 gives -1 then 0.5; row 1 gives -5 then -0.0, the first of two
  // equal zeros, with its sign bit intact.
  float low_values[4] = {};
  int32_t low_indices[4] = {-1, -1, -1, -1};
  const mtk_tensor low_val = matrix(low_values, MTK_FLOAT32, 2, 2);
  const mtk_tensor low_idx = matrix(low_indices, MTK_INT32, 2, 2);
  check(mtk_topk(ctx.get(), &in, 2, 1, 0, 1, &low_val, &low_idx, nullptr), "mtk_topk");
  check(mtk_synchronize(ctx.get(), nullptr), "mtk_synchronize");
  const int32_t want_low[4] = {2, 0, 5, 0};
  if (std::memcmp(low_indices, want_low, sizeof want_low) != 0 || low_values[0] != -1.0f ||
      low_values[1] != 0.5f || low_values[2] != -5.0f || low_values[3] != 0.0f ||
      !std::signbit(low_values[3])) {
    std::fprintf(stderr, "smallest: got indices %d %d %d %d\n", low_indices[0], low_indices[1],
                 low_indices[2], low_indices[3]);
    return 1;
  }
  return 0;
}

}  // namespace

int main() {
  try {
    const int failed = run();
    if (!failed) std::printf("test_install: ok (metaltopk %d)\n", mtk_version());
    return failed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_install: %s\n", e.what());
    return 1;
  }
}
