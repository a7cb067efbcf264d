// Runs the Metal top-k kernels on ragged rows (mtk_topk_ragged) and without values (indices
// only, in mtk_topk and mtk_topk_ragged) on the CPU through PoCL, and compares each result bit
// for bit with the CPU backend through the library's C ABI: indices exactly, values as bits,
// sorted = 0 as sets of (index, value) over each row's winners, padding exactly.
//
// Every case is planned by lib/metal/metal_topk_plan.cpp as the Metal backend plans it
// (make_metal_ragged_plan, or make_metal_plan for dense indices-only calls), every tensor lies in
// its own buffer bound as the glue binds it (absent ones and absent values bind the input, which
// must come back unchanged), and the harness checks independently that each row's padding starts
// at min(k, clipped length) with index -1 and all-zero value bits.
//
// usage: pocl_ragged_harness <kernels.bc>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "metal/metal_topk_plan.hpp"
#include "metaltopk.h"
#include "pocl_runtime.hpp"
#include "pocl_test_data.hpp"
#include "pocl_topk_support.hpp"

namespace {

using mtk::MetalDispatch;
using mtk::MetalLimits;
using mtk::MetalPlan;

using namespace mtk_pocl;

constexpr mtk_dtype kAbsent = MTK_FLOAT64;  // a per-row tensor that is not passed

struct Case {
  int64_t rows, n, k;
  bool largest, sorted, with_values;
  mtk_dtype index_dtype;
  mtk_dtype lengths_dtype;
  mtk_dtype starts_dtype;  // kAbsent: windows start at 0
  mtk_index_transform transform;
  mtk_dtype offsets_dtype;       // RAGGED
  int64_t page_size;             // PAGE_TABLE
  mtk_dtype page_table_dtype;    // PAGE_TABLE
  mtk_dtype row_to_batch_dtype;  // PAGE_TABLE; kAbsent: b = r
  int64_t vector_stride;         // of every per-row tensor, in elements
  int64_t row_pad;               // input elements between rows
  MetalLimits limits;
  bool ragged = true;  // false: a dense mtk_topk call without values
};

void put(std::vector<unsigned char>& bytes, mtk_dtype dtype, int64_t at, int64_t value) {
  std::memcpy(&bytes[size_t(at) * dtype_size(dtype)], &value, dtype_size(dtype));  // little-endian
}

// A [size] vector of int32 or int64 entries `stride` elements apart.
HostTensor row_vector(mtk_dtype dtype, int64_t stride, const std::vector<int64_t>& values) {
  const int64_t size = int64_t(values.size());
  HostTensor t = host_vector(dtype, size, stride, 0);
  for (int64_t i = 0; i < size; ++i) put(t.bytes, dtype, i * stride, values[size_t(i)]);
  return t;
}

HostTensor matrix(mtk_dtype dtype, int64_t rows, int64_t cols, int64_t row_stride, unsigned char fill) {
  HostTensor t;
  t.bytes.assign(size_t(std::max<int64_t>(rows * row_stride, 1)) * dtype_size(dtype), fill);
  t.descriptor.dtype = dtype;
  t.descriptor.ndim = 2;
  t.descriptor.sizes[0] = rows;
  t.descriptor.sizes[1] = cols;
  t.descriptor.strides[0] = row_stride;
  t.descriptor.strides[1] = 1;
  return t;
}

mtk::RowVector plan_vector(const HostTensor* t) {
  if (t == nullptr) return mtk::RowVector{};
  return mtk::RowVector{t->bytes.data(), t->descriptor.dtype, t->descriptor.strides[0]};
}

// One call's tensors: input and outputs, then the per-row tensors (null when absent).
struct CallTensors {
  HostTensor input, values, indices;
  HostTensor lengths, starts, offsets, page_table, row_to_batch;
  std::vector<int64_t> length_values, start_values, batch_values;
  int64_t batches = 0;
  bool has_starts = false, has_offsets = false, has_table = false, has_row_to_batch = false;
};

// Lengths that reach every clipping rule: negative, 0, 1, k - 1, k, k + 1, the row, past it.
int64_t pick_length(std::mt19937_64& rng, int64_t row, int64_t n, int64_t k) {
  const int64_t choices[] = {-3, 0, 1, k - 1, k, k + 1, n, n + 5, int64_t(rng() % uint64_t(n + 1)),
                             int64_t(rng() % uint64_t(n + 1))};
  return choices[size_t(row + int64_t(rng() % 3)) % (sizeof choices / sizeof choices[0])];
}

int64_t pick_start(std::mt19937_64& rng, int64_t row, int64_t n) {
  const int64_t choices[] = {0, -2, n / 3, n, n + 7, int64_t(rng() % uint64_t(n + 1)), 1};
  return choices[size_t(row) % (sizeof choices / sizeof choices[0])];
}

CallTensors make_tensors(const Case& c, mtk_dtype dtype, uint32_t seed) {
  std::mt19937_64 rng(seed);
  CallTensors t;
  const size_t es = dtype_size(dtype);
  t.input = matrix(dtype, c.rows, c.n, c.n + c.row_pad, 0);
  const std::vector<uint64_t> specials = special_bits(dtype);
  for (size_t off = 0; off + es <= t.input.bytes.size(); off += es) {
    uint64_t bits = rng();
    if (rng() & 1) bits = specials[rng() % specials.size()];
    std::memcpy(&t.input.bytes[off], &bits, es);
  }
  t.values = matrix(dtype, c.rows, c.k, c.k, 0xa5);  // canaries: every position must be written
  t.indices = matrix(c.index_dtype, c.rows, c.k, c.k, 0xa5);
  if (!c.ragged) return t;

  for (int64_t r = 0; r < c.rows; ++r) t.length_values.push_back(pick_length(rng, r, c.n, c.k));
  t.lengths = row_vector(c.lengths_dtype, c.vector_stride, t.length_values);
  t.has_starts = c.starts_dtype != kAbsent;
  if (t.has_starts) {
    for (int64_t r = 0; r < c.rows; ++r) t.start_values.push_back(pick_start(rng, r, c.n));
    t.starts = row_vector(c.starts_dtype, c.vector_stride, t.start_values);
  }
  if (c.transform == MTK_INDEX_TRANSFORM_RAGGED) {
    std::vector<int64_t> offsets;
    const bool wide = c.offsets_dtype == MTK_INT64;
    for (int64_t r = 0; r < c.rows; ++r) {
      // Some offsets overflow int32 indices or wrap around int64.
      const int64_t big = wide ? (r % 4 == 1 ? INT64_MAX - 3 : int64_t(1) << 33) : INT32_MAX - 2;
      offsets.push_back(r % 3 == 0 ? big : int64_t(rng() % 100000) - 50000);
    }
    t.offsets = row_vector(c.offsets_dtype, c.vector_stride, offsets);
    t.has_offsets = true;
  }
  if (c.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
    t.has_row_to_batch = c.row_to_batch_dtype != kAbsent;
    t.batches = t.has_row_to_batch ? 3 : c.rows;
    const int64_t pages = (c.n + c.page_size - 1) / c.page_size + 1;
    t.page_table = matrix(c.page_table_dtype, t.batches, pages, pages, 0);
    const bool wide = c.page_table_dtype == MTK_INT64;
    for (int64_t e = 0; e < t.batches * pages; ++e) {
      const int64_t page = e % 7 == 3 ? (wide ? int64_t(1) << 40 : INT32_MAX) : int64_t(rng() % 4096);
      put(t.page_table.bytes, c.page_table_dtype, e, page);
    }
    t.has_table = true;
    if (t.has_row_to_batch) {
      // -1 and `batches` are rows without a page table (all padding).
      for (int64_t r = 0; r < c.rows; ++r) t.batch_values.push_back(int64_t(rng() % 5) - 1);
      t.row_to_batch = row_vector(c.row_to_batch_dtype, c.vector_stride, t.batch_values);
    }
  }
  return t;
}

struct Outputs {
  std::vector<unsigned char> values, indices, input_after;
};

// The number of winners row r has: min(k, its clipped window), computed here from the
// contract's words, not from the library's helpers.
int64_t expected_winners(const Case& c, const CallTensors& t, int64_t r) {
  if (!c.ragged) return c.k;
  int64_t start = t.has_starts ? t.start_values[size_t(r)] : 0;
  start = std::min(std::max<int64_t>(start, 0), c.n);
  int64_t length = std::min(std::max<int64_t>(t.length_values[size_t(r)], 0), c.n - start);
  if (t.has_row_to_batch && (t.batch_values[size_t(r)] < 0 || t.batch_values[size_t(r)] >= t.batches)) length = 0;
  return std::min(c.k, length);
}

class Harness {
 public:
  explicit Harness(const std::string& spir) : pocl_(spir) {}

  bool run(const Case& c, mtk_dtype dtype, uint32_t seed) {
    CallTensors t = make_tensors(c, dtype, seed);
    char label[320];
    std::snprintf(label, sizeof label, "%s %s rows=%lld n=%lld k=%lld %s %s %s idx%d lengths%s starts%s transform=%d%s",
                  c.ragged ? "ragged" : "dense", mtk::metal_dtype_suffix(dtype), (long long)c.rows, (long long)c.n,
                  (long long)c.k, c.largest ? "largest" : "smallest", c.sorted ? "sorted" : "unsorted",
                  c.with_values ? "values" : "indices-only", int(dtype_size(c.index_dtype) * 8),
                  c.ragged ? (c.lengths_dtype == MTK_INT32 ? "32" : "64") : "-",
                  t.has_starts ? (c.starts_dtype == MTK_INT32 ? "32" : "64") : "-", int(c.transform),
                  c.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE
                      ? (" page_size=" + std::to_string(c.page_size) + (t.has_row_to_batch ? " row_to_batch" : "")).c_str()
                      : "");
    MetalPlan plan;
    const Outputs metal = run_metal(c, dtype, t, plan);
    const Outputs cpu = run_cpu(c, t);
    bool ok = compare(c, dtype, t, metal, cpu, label);
    if (!c.with_values && metal.input_after != t.input.bytes) {
      std::printf("FAIL %s: the input changed (something wrote through the values binding)\n", label);
      ok = false;
    }
    if (!ok) return false;
    for (const MetalDispatch& d : plan.dispatches) ++kernel_runs_[d.function];
    return true;
  }

  const std::map<std::string, int>& kernel_runs() const { return kernel_runs_; }

 private:
  mtk::RaggedProblem problem_of(const Case& c, mtk_dtype dtype, CallTensors& t) const {
    mtk::RaggedProblem p{};
    mtk::TopkProblem& d = p.dense;
    d.dtype = dtype;
    d.index_dtype = c.index_dtype;
    d.largest = c.largest;
    d.sorted = c.sorted;
    d.input = t.input.bytes.data();
    d.values = c.with_values ? t.values.bytes.data() : nullptr;
    d.indices = t.indices.bytes.data();
    mtk::RowGeometry& g = d.geometry;
    g.n = c.n;
    g.k = c.k;
    g.rows = c.rows;
    g.batch_ndim = 1;
    g.batch_sizes[0] = c.rows;
    g.input_batch_strides[0] = c.n + c.row_pad;
    g.values_batch_strides[0] = c.k;
    g.indices_batch_strides[0] = c.k;
    if (!c.ragged) return p;
    p.lengths = plan_vector(&t.lengths);
    p.starts = plan_vector(t.has_starts ? &t.starts : nullptr);
    p.transform = c.transform;
    p.offsets = plan_vector(t.has_offsets ? &t.offsets : nullptr);
    p.row_to_batch = plan_vector(t.has_row_to_batch ? &t.row_to_batch : nullptr);
    if (t.has_table) {
      p.page_table = t.page_table.bytes.data();
      p.page_table_dtype = c.page_table_dtype;
      p.page_table_batch = t.page_table.descriptor.sizes[0];
      p.page_table_pages = t.page_table.descriptor.sizes[1];
      p.page_table_batch_stride = t.page_table.descriptor.strides[0];
      p.page_table_page_stride = 1;
      p.page_size = c.page_size;
    }
    return p;
  }

  Outputs run_metal(const Case& c, mtk_dtype dtype, CallTensors& t, MetalPlan& plan) {
    const mtk::RaggedProblem problem = problem_of(c, dtype, t);
    plan = c.ragged ? mtk::make_metal_ragged_plan(problem, c.limits) : mtk::make_metal_plan(problem.dense, c.limits);
    mtk::set_metal_buffer_offsets(plan, dtype, c.index_dtype, 0, 0, 0);
    if (c.ragged) mtk::set_metal_ragged_buffer_offsets(plan, problem, {0, 0, 0, 0, 0});

    ClBuffer in = pocl_.buffer(t.input.bytes.size(), t.input.bytes.data());
    ClBuffer values = pocl_.buffer(t.values.bytes.size(), t.values.bytes.data());
    ClBuffer indices = pocl_.buffer(t.indices.bytes.size(), t.indices.bytes.data());
    ClBuffer params = pocl_.buffer(sizeof plan.params, &plan.params);
    std::vector<ClBuffer> ragged;
    cl_mem ragged_slots[mtk::kMetalRaggedBuffers];
    const HostTensor* sources[mtk::kMetalRaggedBuffers] = {
        c.ragged ? &t.lengths : nullptr, t.has_starts ? &t.starts : nullptr, t.has_offsets ? &t.offsets : nullptr,
        t.has_table ? &t.page_table : nullptr, t.has_row_to_batch ? &t.row_to_batch : nullptr};
    for (int r = 0; r < mtk::kMetalRaggedBuffers; ++r) {
      ragged_slots[r] = in.get();  // as the glue binds an absent tensor
      if (sources[r] == nullptr) continue;
      ragged.push_back(pocl_.buffer(sources[r]->bytes.size(), sources[r]->bytes.data()));
      ragged_slots[r] = ragged.back().get();
    }
    run_dispatches(pocl_, plan, in.get(), c.with_values ? values.get() : in.get(), indices.get(), params.get(),
                   ragged_slots);
    Outputs out;
    out.values.resize(t.values.bytes.size());
    out.indices.resize(t.indices.bytes.size());
    out.input_after.resize(t.input.bytes.size());
    pocl_.read(values, out.values.data(), out.values.size());
    pocl_.read(indices, out.indices.data(), out.indices.size());
    pocl_.read(in, out.input_after.data(), out.input_after.size());
    return out;
  }

  // Copies, since mtk_tensor carries non-const data pointers.
  Outputs run_cpu(const Case& c, CallTensors t) {
    const mtk_tensor input = t.input.bound();
    const mtk_tensor values = t.values.bound();
    const mtk_tensor indices = t.indices.bound();
    const mtk_tensor* values_arg = c.with_values ? &values : nullptr;
    if (!c.ragged) {
      check_mtk(mtk_topk(cpu_.get(), &input, c.k, 1, c.largest, c.sorted, values_arg, &indices, nullptr), "mtk_topk(cpu)");
    } else {
      const mtk_tensor lengths = t.lengths.bound(), starts = t.starts.bound(), offsets = t.offsets.bound(),
                       table = t.page_table.bound(), row_to_batch = t.row_to_batch.bound();
      mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
      params.lengths = &lengths;
      params.starts = t.has_starts ? &starts : nullptr;
      params.transform = c.transform;
      params.offsets = t.has_offsets ? &offsets : nullptr;
      params.page_table = t.has_table ? &table : nullptr;
      params.page_size = t.has_table ? c.page_size : 1;
      params.row_to_batch = t.has_row_to_batch ? &row_to_batch : nullptr;
      check_mtk(mtk_topk_ragged(cpu_.get(), &input, c.k, c.largest, c.sorted, &params, values_arg, &indices, nullptr),
                "mtk_topk_ragged(cpu)");
    }
    return Outputs{t.values.bytes, t.indices.bytes, {}};
  }

  static bool compare(const Case& c, mtk_dtype dtype, const CallTensors& t, const Outputs& got, const Outputs& want,
                      const char* label) {
    const size_t es = dtype_size(dtype), is = dtype_size(c.index_dtype);
    const uint64_t padding_index = is == 8 ? ~uint64_t(0) : 0xffffffffull;
    bool ok = true;
    int reported = 0;
    const auto report = [&](int64_t r, const char* what) {
      ok = false;
      if (reported++ < 3) std::printf("FAIL %s: row %lld: %s\n", label, (long long)r, what);
    };
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t winners = expected_winners(c, t, r);
      // (index, value bits) per position; values count only where they are written.
      std::vector<std::pair<uint64_t, uint64_t>> g, w;
      for (int64_t j = 0; j < c.k; ++j) {
        const size_t at = size_t(r * c.k + j);
        const uint64_t gv = c.with_values ? load_bits(&got.values[at * es], es) : 0;
        const uint64_t wv = c.with_values ? load_bits(&want.values[at * es], es) : 0;
        g.emplace_back(load_bits(&got.indices[at * is], is), gv);
        w.emplace_back(load_bits(&want.indices[at * is], is), wv);
        if (j >= winners && g.back() != std::make_pair(padding_index, uint64_t(0))) report(r, "padding is not index -1 with zero value bits");
      }
      if (!c.sorted) {
        std::sort(g.begin(), g.begin() + winners);
        std::sort(w.begin(), w.begin() + winners);
      }
      if (g != w) {
        for (size_t j = 0; j < g.size(); ++j) {
          if (g[j] == w[j]) continue;
          char what[200];
          std::snprintf(what, sizeof what, "position %zu of %lld winners: got index %llu value 0x%llx, want index %llu value 0x%llx",
                        j, (long long)winners, (unsigned long long)g[j].first, (unsigned long long)g[j].second,
                        (unsigned long long)w[j].first, (unsigned long long)w[j].second);
          report(r, what);
          break;
        }
      }
    }
    // Without values the Metal outputs' canaries must survive (nothing bound there).
    if (!c.with_values && got.values != std::vector<unsigned char>(got.values.size(), 0xa5)) report(-1, "values written");
    return ok;
  }

  PoclRuntime pocl_;
  CpuContext cpu_ = create_cpu_context();
  std::map<std::string, int> kernel_runs_;
};

std::vector<Case> cases() {
  const MetalLimits apple;
  const MetalLimits small = small_limits();
  MetalLimits narrow_sort;  // Apple's limits but a 64-wide sort tile: the device-memory sort
  narrow_sort.sort_tile_max = 64;
  const mtk_dtype I32 = MTK_INT32, I64 = MTK_INT64, NO = kAbsent;
  const mtk_index_transform NONE = MTK_INDEX_TRANSFORM_NONE, RAGGED = MTK_INDEX_TRANSFORM_RAGGED,
                            PAGED = MTK_INDEX_TRANSFORM_PAGE_TABLE;
  // rows, n, k, largest, sorted, values, index, lengths, starts, transform, offsets, page_size,
  // table, row_to_batch, vector stride, row pad, limits
  return {
      // k = 1 and 64 on short rows, both directions, unsorted as sets.
      {12, 300, 1, true, true, true, I64, I32, NO, NONE, NO, 1, NO, NO, 1, 0, apple},
      {12, 300, 64, false, false, true, I32, I64, I32, NONE, NO, 1, NO, NO, 1, 5, apple},
      {10, 300, 64, true, true, false, I64, I32, I64, RAGGED, I32, 1, NO, NO, 2, 0, apple},
      // k = 512 and 2048 on the longest short rows (a separate sort kernel at 2048) and long rows.
      {10, 4096, 512, true, true, true, I64, I32, I64, RAGGED, I64, 1, NO, NO, 1, 0, apple},
      {10, 4096, 2048, true, true, false, I32, I64, NO, PAGED, NO, 64, I32, I32, 1, 0, apple},
      {10, 5000, 2048, false, true, true, I64, I32, I32, PAGED, NO, 1, I64, NO, 1, 3, apple},
      {8, 5000, 512, true, false, true, I32, I64, I64, PAGED, NO, 64, I64, I64, 2, 0, apple},
      // k beyond the row: every row pads; k = n.
      {6, 1000, 2048, true, true, true, I64, I64, I32, RAGGED, I64, 1, NO, NO, 1, 0, apple},
      {9, 64, 64, false, true, true, I32, I32, I32, PAGED, NO, 1, I32, I64, 1, 1, apple},
      // Rows of no elements: only the padding kernel runs.
      {4, 0, 5, true, true, true, I64, I32, I64, NONE, NO, 1, NO, NO, 1, 0, apple},
      // Multi-pass rows (small limits), sorted through threadgroup or device memory.
      {4, 5000, 300, true, true, true, I64, I64, I64, RAGGED, I32, 1, NO, NO, 1, 0, small},
      {4, 5000, 100, false, false, false, I32, I32, NO, PAGED, NO, 64, I64, I64, 1, 2, small},
      {4, 4100, 2048, true, true, true, I64, I32, I32, PAGED, NO, 1, I32, NO, 1, 0, small},
      // The device-memory sort on Apple's row kernels.
      {6, 5000, 1500, true, true, false, I64, I64, I32, PAGED, NO, 3, I32, NO, 2, 0, narrow_sort},
      // Dense mtk_topk without values: every sort path reads keys from the input.
      {7, 37, 5, true, true, false, I64, NO, NO, NONE, NO, 1, NO, NO, 1, 0, apple, false},
      {2, 3000, 1500, true, true, false, I64, NO, NO, NONE, NO, 1, NO, NO, 1, 0, apple, false},
      {3, 5000, 17, false, true, false, I32, NO, NO, NONE, NO, 1, NO, NO, 1, 2, apple, false},
      {2, 5000, 2500, true, true, false, I64, NO, NO, NONE, NO, 1, NO, NO, 1, 0, apple, false},
      {2, 5000, 40, true, true, false, I64, NO, NO, NONE, NO, 1, NO, NO, 1, 0, small, false},
      {2, 5000, 1000, false, false, false, I32, NO, NO, NONE, NO, 1, NO, NO, 1, 0, small, false},
  };
}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, [](const char* spir) {
    Harness harness(spir);
    const auto [ran, failures] = run_in_every_dtype(harness, cases(), 1000);
    std::printf("PoCL ragged and indices-only: %d cases ran, %d matched the CPU backend bit for bit\n", ran,
                ran - failures);
    const int missing = report_kernel_runs(harness.kernel_runs(), mtk::MetalKernel::Last);
    if (missing > 0) std::printf("FAIL: %d kernel/dtype combinations never ran and matched\n", missing);
    return failures == 0 && missing == 0 ? 0 : 1;
  });
}
