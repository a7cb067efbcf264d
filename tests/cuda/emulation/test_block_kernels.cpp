// The CUDA block-per-row kernel (block_select_kernel in lib/cuda/topk_kernels.cuh: radix select
// over the row in shared memory, then the shared-memory sort whose short strides run in
// registers through warp shuffles) on the host under fiber_cuda.hpp, so CI checks its logic
// without a GPU. The finish kernel of the multi-block path shares block_refine and
// sort_and_write with it. Rows of every key width (f32, f64 with 128-bit composites, bf16,
// int8), ties, NaN and signed zeros, both directions, k from 1 to the sort's capacity, against a
// stable sort under selection_key.
//
// Usage: test_block_kernels [--quick]   (`make test` runs --quick). Exits 0 when every case
// matches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fiber_cuda.hpp"
#include "cuda/topk_warp_kernels.cuh"
// The block kernels keep their shared memory in static `__shared__` variables; as function
// statics they are one object for all the fibers of the (one at a time) emulated block.
#undef __shared__
#define __shared__ static
#include "cuda/topk_kernels.cuh"

namespace mtk {
namespace cuda {
alignas(16) unsigned char tile_storage[16];  // topk_warp_kernels.cuh's tile kernel: unused here
}
}  // namespace mtk

using namespace mtk;
using namespace mtk::cuda;

static int failures = 0, cases = 0;
static std::mt19937_64 rng(2026);

enum class Data { Random, FewDistinct, Special };

template <class T>
T value_from_double(double v) {
  if constexpr (std::is_same_v<T, bf16_bits>) {
    const float f = float(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bf16_bits{uint16_t(bits >> 16)};
  } else if constexpr (std::is_integral_v<T>) {
    return T(std::max(-128.0, std::min(127.0, std::floor(v))));
  } else {
    return T(v);
  }
}

template <class T>
std::vector<T> make_row(int64_t n, Data data) {
  std::vector<T> row = std::vector<T>(size_t(n));
  std::normal_distribution<double> normal(0.0, 40.0);
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), 0.0, -0.0,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), 1.0, -1.0};
  for (int64_t i = 0; i < n; ++i) {
    double v = normal(rng);
    if (data == Data::FewDistinct) v = double(rng() % 5);
    if (data == Data::Special && rng() % 3 == 0) v = specials[rng() % 7];
    row[size_t(i)] = value_from_double<T>(v);
  }
  return row;
}

template <class T>
void run_case(int64_t rows, int64_t n, int64_t k, Data data, bool largest, const char* name) {
  std::vector<std::vector<T>> input_rows;
  std::vector<T> input;
  for (int64_t r = 0; r < rows; ++r) {
    input_rows.push_back(make_row<T>(n, data));
    input.insert(input.end(), input_rows.back().begin(), input_rows.back().end());
  }
  RowGeometry g;
  g.n = n;
  g.k = k;
  g.rows = rows;
  g.batch_ndim = 1;
  g.batch_sizes[0] = rows;
  g.input_batch_strides[0] = n;
  g.values_batch_strides[0] = g.indices_batch_strides[0] = k;
  std::vector<Bits<T>> values(size_t(rows * k));
  std::vector<int64_t> indices(size_t(rows * k), -1);
  for (int64_t r = 0; r < rows; ++r) {
    emu::block_idx.x = unsigned(r);
    emu::run_block(kBlockThreads, [&] {
      block_select_kernel<T>(g, input.data(), values.data(), indices.data(), true, largest);
    });
  }
  ++cases;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<T>& row = input_rows[size_t(r)];
    std::vector<int64_t> order = std::vector<int64_t>(size_t(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return selection_key(row[size_t(a)], largest) > selection_key(row[size_t(b)], largest);
    });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t got = indices[size_t(r * k + j)];
      Bits<T> expected_bits;
      std::memcpy(&expected_bits, &row[size_t(order[size_t(j)])], sizeof(T));
      if (got != order[size_t(j)] || values[size_t(r * k + j)] != expected_bits) {
        std::fprintf(stderr, "FAIL %s rows=%lld n=%lld k=%lld data=%d largest=%d: row %lld rank %lld "
                     "index %lld, expected %lld\n", name, (long long)rows, (long long)n,
                     (long long)k, int(data), int(largest), (long long)r, (long long)j,
                     (long long)got, (long long)order[size_t(j)]);
        ++failures;
        return;
      }
    }
  }
}

template <class T>
void run_type(const char* name, bool quick) {
  struct Shape { int64_t n, k; };
  const Shape shapes[] = {{1, 1}, {100, 1}, {100, 37}, {700, 64}, {1500, 1000},
                          {3000, 2048}, {5000, 129}, {2049, 2048}};
  for (const Shape& s : shapes) {
    for (Data data : {Data::Random, Data::FewDistinct, Data::Special}) {
      if (std::is_integral_v<T> && data == Data::Special) continue;
      for (bool largest : {true, false}) {
        if (quick && !largest && data != Data::FewDistinct) continue;
        run_case<T>(2, s.n, s.k, data, largest, name);
      }
    }
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  run_type<float>("f32", quick);
  run_type<double>("f64", quick);
  run_type<bf16_bits>("bf16", quick);
  run_type<int8_t>("i8", quick);
  std::printf("block kernel emulation: %d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
