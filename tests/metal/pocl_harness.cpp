// Runs the Metal top-k kernels on the CPU through PoCL and checks them bit for bit.
//
// The kernels (lib/metal/*.metal, unchanged) are compiled offline to SPIR by `make test-metal`
// and wrapped in OpenCL entry points (pocl_kernels.clcpp). Every case is planned by
// lib/metal/metal_topk_plan.cpp exactly as the Metal backend plans it, so what runs here is the plan's
// sequence of kernels, grids, threadgroup sizes and threadgroup memory. Each result is compared
// with the CPU backend through the library's C ABI and with a brute-force stable sort, values as
// bits and indices exactly (as index-ordered sets for sorted = false, whose order is unspecified).
//
// usage: pocl_harness <kernels.bc>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "metal/metal_topk_plan.hpp"
#include "core/ordered_key.hpp"
#include "metaltopk.h"
#include "pocl_runtime.hpp"
#include "pocl_test_data.hpp"
#include "pocl_topk_support.hpp"

namespace {

using mtk::MetalDispatch;
using mtk::MetalLimits;
using mtk::MetalPlan;
using mtk::MetalShapeClass;

using namespace mtk_pocl;

// ---- Test tensors ------------------------------------------------------------------------

// The contract's order as an unsigned key (lib/core/ordered_key.hpp), widened to 64 bits.
uint64_t selection_key(mtk_dtype d, uint64_t bits, bool largest) {
  uint64_t key = 0, all = 0;
  switch (d) {
    case MTK_FLOAT32: key = mtk::key_from_f32_bits(uint32_t(bits)); all = 0xffffffffu; break;
    case MTK_FLOAT16: key = mtk::key_from_f16_bits(uint16_t(bits)); all = 0xffff; break;
    case MTK_BFLOAT16: key = mtk::key_from_bf16_bits(uint16_t(bits)); all = 0xffff; break;
    case MTK_INT8: key = mtk::key_from_i8(int8_t(bits)); all = 0xff; break;
    case MTK_UINT8: key = mtk::key_from_u8(uint8_t(bits)); all = 0xff; break;
    case MTK_INT16: key = mtk::key_from_i16(int16_t(bits)); all = 0xffff; break;
    case MTK_INT32: key = mtk::key_from_i32(int32_t(bits)); all = 0xffffffffu; break;
    default: key = mtk::key_from_i64(int64_t(bits)); all = ~uint64_t(0); break;
  }
  return largest ? key : key ^ all;
}

enum class Data { Random, Ties, Mixed };
enum class Layout { Contiguous, Transposed, NegativeDim, Stepped, Broadcast, StridedOutputs };

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::NegativeDim: return "negative-stride";
    case Layout::Stepped: return "stepped";
    case Layout::Broadcast: return "zero-stride";
    case Layout::StridedOutputs: return "strided-outputs";
  }
  return "?";
}

struct Case {
  std::vector<int64_t> sizes;
  int dim;
  int64_t k;
  bool largest;
  bool sorted;
  mtk_dtype index_dtype;
  Layout layout;
  Data data;
  MetalLimits limits;
  MetalShapeClass expected_class;
};

// A strided view into an owned byte buffer: element 0 sits at byte `base`.
struct View {
  std::vector<int64_t> sizes, strides;
  size_t base = 0;
  size_t bytes = 0;
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int d = int(sizes.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * sizes[d + 1];
  return s;
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Lays out `sizes` (elements of `element` bytes) as `layout` asks.
View make_view(const std::vector<int64_t>& sizes, int dim, Layout layout, size_t element, bool is_input) {
  View v;
  v.sizes = sizes;
  const int nd = int(sizes.size());
  if (layout == Layout::Transposed || (layout == Layout::StridedOutputs && !is_input)) {
    // Memory order reversed: the first dim varies fastest.
    v.strides.assign(nd, 1);
    for (int d = 1; d < nd; ++d) v.strides[d] = v.strides[d - 1] * sizes[d - 1];
    v.bytes = size_t(product(sizes)) * element;
    return v;
  }
  v.strides = contiguous_strides(sizes);
  int64_t span = product(sizes);
  if (is_input && layout == Layout::Stepped) {
    for (int64_t& s : v.strides) s *= 2;
    span *= 2;
  }
  if (is_input && layout == Layout::Broadcast && nd > 1) {
    const int batch = dim == 0 ? 1 : 0;  // a batch dim repeats the same data
    std::vector<int64_t> rest = sizes;
    rest[batch] = 1;
    v.strides = contiguous_strides(rest);
    v.strides[batch] = 0;
    span = product(rest);
  }
  if (is_input && layout == Layout::NegativeDim) {
    v.base = size_t((sizes[dim] - 1) * v.strides[dim]) * element;
    v.strides[dim] = -v.strides[dim];
  }
  v.bytes = size_t(span) * element;
  return v;
}

// Calls `visit(offset_in_elements, coords)` for every element of `sizes` under `strides`.
void for_each_element(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                      const std::function<void(int64_t, const std::vector<int64_t>&)>& visit) {
  const int64_t count = product(sizes);
  std::vector<int64_t> coords(sizes.size(), 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t offset = 0;
    for (size_t d = 0; d < sizes.size(); ++d) offset += coords[d] * strides[d];
    visit(offset, coords);
    for (int d = int(sizes.size()) - 1; d >= 0; --d) {
      if (++coords[d] < sizes[d]) break;
      coords[d] = 0;
    }
  }
}

mtk_tensor descriptor(const View& v, mtk_dtype dtype, unsigned char* memory) {
  mtk_tensor t{};
  t.data = memory + v.base;
  t.dtype = dtype;
  t.ndim = int32_t(v.sizes.size());
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    t.sizes[d] = v.sizes[d];
    t.strides[d] = v.strides[d];
  }
  return t;
}

// The harness's own canonical form: every dim but `dim` is a batch dim, none collapsed.
mtk::RowGeometry geometry_of(const Case& c, const View& in, const View& values, const View& indices) {
  mtk::RowGeometry g;
  g.n = c.sizes[c.dim];
  g.k = c.k;
  g.rows = 1;
  for (int d = 0; d < int(c.sizes.size()); ++d) {
    if (d == c.dim) continue;
    const int b = g.batch_ndim++;
    g.batch_sizes[b] = c.sizes[d];
    g.input_batch_strides[b] = in.strides[d];
    g.values_batch_strides[b] = values.strides[d];
    g.indices_batch_strides[b] = indices.strides[d];
    g.rows *= c.sizes[d];
  }
  g.input_stride = in.strides[c.dim];
  g.values_stride = values.strides[c.dim];
  g.indices_stride = indices.strides[c.dim];
  return g;
}

const char* class_name(MetalShapeClass s) {
  switch (s) {
    case MetalShapeClass::ShortRows: return "short";
    case MetalShapeClass::LongRows: return "long";
    case MetalShapeClass::HugeRows: return "huge";
  }
  return "?";
}

struct Outputs {
  std::vector<unsigned char> values, indices;
};

class Harness {
 public:
  Harness(const std::string& spir) : pocl_(spir) {}

  // Runs one case; returns false (after printing why) on any mismatch.
  bool run(const Case& c, mtk_dtype dtype, uint32_t seed) {
    const size_t es = dtype_size(dtype);
    const size_t is = dtype_size(c.index_dtype);
    std::vector<int64_t> out_sizes = c.sizes;
    out_sizes[c.dim] = c.k;
    const View in = make_view(c.sizes, c.dim, c.layout, es, true);
    const View vals = make_view(out_sizes, c.dim, c.layout, es, false);
    const View idxs = make_view(out_sizes, c.dim, c.layout, is, false);

    std::vector<unsigned char> input(in.bytes);
    fill(input, dtype, c.data, seed);

    mtk::TopkProblem problem{};
    problem.dtype = dtype;
    problem.index_dtype = c.index_dtype;
    problem.largest = c.largest;
    problem.sorted = c.sorted;
    problem.geometry = geometry_of(c, in, vals, idxs);
    // The plan reads only whether values are written; these host addresses are never used.
    problem.input = input.data();
    problem.values = input.data();
    problem.indices = input.data();
    MetalPlan plan = mtk::make_metal_plan(problem, c.limits);
    mtk::set_metal_buffer_offsets(plan, dtype, c.index_dtype, in.base, vals.base, idxs.base);

    char label[256];
    std::snprintf(label, sizeof label, "%s %s n=%lld rows=%lld k=%lld %s %s %s idx%d", class_name(plan.shape_class),
                  mtk::metal_dtype_suffix(dtype), (long long)problem.geometry.n, (long long)problem.geometry.rows,
                  (long long)c.k, c.largest ? "largest" : "smallest", c.sorted ? "sorted" : "unsorted",
                  layout_name(c.layout), int(is * 8));
    // The extents the glue checks against its buffers must cover exactly the bytes laid out.
    const mtk::MetalExtents extents = mtk::metal_tensor_extents(problem);
    const auto inside = [](const mtk::ByteExtent& e, const View& v) {
      return e.first <= 0 && uint64_t(-e.first) <= v.base && v.base + e.first + e.bytes <= v.bytes;
    };
    if (!inside(extents.input, in) || !inside(extents.values, vals) || !inside(extents.indices, idxs)) {
      std::printf("FAIL %s: metal_tensor_extents reaches outside the tensors' memory\n", label);
      return false;
    }
    if (plan.shape_class != c.expected_class) {
      std::printf("FAIL %s: planned as %s, expected %s\n", label, class_name(plan.shape_class), class_name(c.expected_class));
      return false;
    }

    const Outputs metal = run_plan(plan, input, vals.bytes, idxs.bytes);
    const Outputs cpu = run_cpu(c, dtype, in, vals, idxs, input);
    const Outputs reference = run_reference(c, dtype, in, vals, idxs, input);
    bool ok = compare(c, dtype, vals, idxs, metal, cpu, label, "CPU backend");
    ok = compare(c, dtype, vals, idxs, metal, reference, label, "brute-force reference") && ok;
    if (!ok) return false;
    for (const MetalDispatch& d : plan.dispatches) ++kernel_runs_[d.function];
    ++class_runs_[std::string(class_name(plan.shape_class)) + " " + mtk::metal_dtype_suffix(dtype)];
    return true;
  }

  const std::map<std::string, int>& kernel_runs() const { return kernel_runs_; }
  const std::map<std::string, int>& class_runs() const { return class_runs_; }

 private:
  static void fill(std::vector<unsigned char>& bytes, mtk_dtype dtype, Data data, uint32_t seed) {
    std::mt19937_64 rng(seed);
    const size_t es = dtype_size(dtype);
    const std::vector<uint64_t> specials = special_bits(dtype);
    for (size_t off = 0; off + es <= bytes.size(); off += es) {
      uint64_t bits = rng();
      const bool pick_special = data == Data::Ties || (data == Data::Mixed && (rng() & 1));
      if (pick_special) bits = specials[rng() % specials.size()];
      std::memcpy(&bytes[off], &bits, es);
    }
  }

  Outputs run_plan(const MetalPlan& plan, const std::vector<unsigned char>& input, size_t values_bytes, size_t indices_bytes) {
    // Canary-filled outputs: anything the kernels write outside the result shows up as a mismatch.
    std::vector<unsigned char> canary_values(values_bytes, 0xa5), canary_indices(indices_bytes, 0xa5);
    ClBuffer in = pocl_.buffer(input.size(), input.data());
    ClBuffer values = pocl_.buffer(values_bytes, canary_values.data());
    ClBuffer indices = pocl_.buffer(indices_bytes, canary_indices.data());
    ClBuffer params = pocl_.buffer(sizeof plan.params, &plan.params);
    // A dense call binds the input in the ragged tensors' slots (never read).
    cl_mem ragged_slots[mtk::kMetalRaggedBuffers];
    for (cl_mem& slot : ragged_slots) slot = in.get();
    run_dispatches(pocl_, plan, in.get(), values.get(), indices.get(), params.get(), ragged_slots);
    Outputs out;
    out.values.resize(values_bytes);
    out.indices.resize(indices_bytes);
    pocl_.read(values, out.values.data(), values_bytes);
    pocl_.read(indices, out.indices.data(), indices_bytes);
    return out;
  }

  // `input` is a copy because mtk_tensor carries a non-const data pointer.
  Outputs run_cpu(const Case& c, mtk_dtype dtype, const View& in, const View& vals, const View& idxs,
                  std::vector<unsigned char> input) {
    Outputs out;
    out.values.assign(vals.bytes, 0xa5);
    out.indices.assign(idxs.bytes, 0xa5);
    const mtk_tensor ti = descriptor(in, dtype, input.data());
    const mtk_tensor tv = descriptor(vals, dtype, out.values.data());
    const mtk_tensor tx = descriptor(idxs, c.index_dtype, out.indices.data());
    check_mtk(mtk_topk(cpu_.get(), &ti, c.k, c.dim, c.largest, c.sorted, &tv, &tx, nullptr), "mtk_topk(cpu)");
    return out;
  }

  // A stable sort of each row by key, descending: the contract's definition of the result.
  static Outputs run_reference(const Case& c, mtk_dtype dtype, const View& in, const View& vals, const View& idxs,
                               const std::vector<unsigned char>& input) {
    const size_t es = dtype_size(dtype), is = dtype_size(c.index_dtype);
    Outputs out;
    out.values.assign(vals.bytes, 0xa5);
    out.indices.assign(idxs.bytes, 0xa5);
    std::vector<int64_t> batch = c.sizes;
    batch[c.dim] = 1;
    for_each_element(batch, in.strides, [&](int64_t row_offset, const std::vector<int64_t>& coords) {
      std::vector<std::pair<uint64_t, int64_t>> row;
      for (int64_t i = 0; i < c.sizes[c.dim]; ++i) {
        const unsigned char* p = &input[in.base + size_t((row_offset + i * in.strides[c.dim]) * int64_t(es))];
        row.emplace_back(selection_key(dtype, load_bits(p, es), c.largest), i);
      }
      std::stable_sort(row.begin(), row.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
      for (int64_t j = 0; j < c.k; ++j) {
        int64_t vo = 0, xo = 0;
        for (size_t d = 0; d < coords.size(); ++d) {
          const int64_t at = int(d) == c.dim ? j : coords[d];
          vo += at * vals.strides[d];
          xo += at * idxs.strides[d];
        }
        const int64_t i = row[size_t(j)].second;
        std::memcpy(&out.values[size_t(vo) * es], &input[in.base + size_t((row_offset + i * in.strides[c.dim]) * int64_t(es))], es);
        std::memcpy(&out.indices[size_t(xo) * is], &i, is);  // little-endian: int32 takes the low half
      }
    });
    return out;
  }

  static bool compare(const Case& c, mtk_dtype dtype, const View& vals, const View& idxs, const Outputs& got,
                      const Outputs& want, const char* label, const char* against) {
    const size_t es = dtype_size(dtype), is = dtype_size(c.index_dtype);
    // Bytes outside the result (gaps of strided outputs) must be untouched canaries in both.
    if (got.values.size() != want.values.size() || got.indices.size() != want.indices.size()) return false;
    std::vector<int64_t> batch = vals.sizes;
    batch[c.dim] = 1;
    bool ok = true;
    int reported = 0;
    for_each_element(batch, contiguous_strides(batch), [&](int64_t, const std::vector<int64_t>& coords) {
      // (index, value bits) of the row's k results, in output order.
      std::vector<std::pair<uint64_t, uint64_t>> g, w;
      for (int64_t j = 0; j < c.k; ++j) {
        int64_t vo = 0, xo = 0;
        for (size_t d = 0; d < coords.size(); ++d) {
          const int64_t at = int(d) == c.dim ? j : coords[d];
          vo += at * vals.strides[d];
          xo += at * idxs.strides[d];
        }
        g.emplace_back(load_bits(&got.indices[size_t(xo) * is], is), load_bits(&got.values[size_t(vo) * es], es));
        w.emplace_back(load_bits(&want.indices[size_t(xo) * is], is), load_bits(&want.values[size_t(vo) * es], es));
      }
      if (!c.sorted) {
        std::sort(g.begin(), g.end());
        std::sort(w.begin(), w.end());
      }
      for (size_t j = 0; j < g.size(); ++j) {
        if (g[j] != w[j]) {
          ok = false;
          if (reported++ < 3) {
            std::printf("FAIL %s vs %s: row at [", label, against);
            for (int64_t x : coords) std::printf(" %lld", (long long)x);
            std::printf(" ] position %zu: got index %llu value 0x%llx, want index %llu value 0x%llx\n", j,
                        (unsigned long long)g[j].first, (unsigned long long)g[j].second,
                        (unsigned long long)w[j].first, (unsigned long long)w[j].second);
          }
          break;
        }
      }
    });
    return ok;
  }

  PoclRuntime pocl_;
  CpuContext cpu_ = create_cpu_context();
  std::map<std::string, int> kernel_runs_;
  std::map<std::string, int> class_runs_;
};

std::vector<Case> cases() {
  const MetalLimits apple;
  const MetalLimits small = small_limits();
  MetalLimits narrow_sort;  // Apple's limits but a 64-wide sort tile: the device-memory sort
  narrow_sort.sort_tile_max = 64;
  // A pipeline cap that is not a power of two (as register pressure can impose).
  const MetalLimits capped = mtk::metal_limits_for_pipelines(480);
  MetalLimits capped_small = small;
  capped_small.max_threads = 288;
  using S = MetalShapeClass;
  return {
      // Short rows: MoE-like shapes, every layout, both directions, both index widths.
      {{7, 37}, 1, 5, true, true, MTK_INT64, Layout::Contiguous, Data::Mixed, apple, S::ShortRows},
      {{3, 4, 256}, 2, 8, true, true, MTK_INT32, Layout::Contiguous, Data::Ties, apple, S::ShortRows},
      {{5, 37}, 1, 37, false, false, MTK_INT64, Layout::NegativeDim, Data::Mixed, apple, S::ShortRows},
      {{256, 6}, 0, 8, true, true, MTK_INT64, Layout::Transposed, Data::Random, apple, S::ShortRows},
      {{4, 3, 2, 50}, 3, 7, false, true, MTK_INT64, Layout::Broadcast, Data::Ties, apple, S::ShortRows},
      {{2, 1}, 1, 1, true, true, MTK_INT32, Layout::Contiguous, Data::Mixed, apple, S::ShortRows},
      {{3, 300}, 1, 33, true, true, MTK_INT64, Layout::StridedOutputs, Data::Ties, apple, S::ShortRows},
      // Short rows whose k winners are sorted by a second kernel (staging does not fit).
      {{2, 3000}, 1, 1500, true, true, MTK_INT64, Layout::Stepped, Data::Mixed, apple, S::ShortRows},
      // Long rows: sort in the row kernel, unsorted, and the device-memory bitonic sort.
      {{3, 5000}, 1, 17, true, true, MTK_INT64, Layout::Contiguous, Data::Mixed, apple, S::LongRows},
      {{2, 5000}, 1, 1000, false, false, MTK_INT32, Layout::Stepped, Data::Ties, apple, S::LongRows},
      {{2, 5000}, 1, 2500, true, true, MTK_INT64, Layout::Contiguous, Data::Random, apple, S::LongRows},
      {{5000, 2}, 0, 300, false, true, MTK_INT64, Layout::Transposed, Data::Mixed, narrow_sort, S::LongRows},
      // Huge rows: many threadgroups per row (small limits reach it with small inputs).
      {{2, 5000}, 1, 40, true, true, MTK_INT64, Layout::Contiguous, Data::Mixed, small, S::HugeRows},
      {{1, 4100}, 1, 2050, false, false, MTK_INT32, Layout::NegativeDim, Data::Ties, small, S::HugeRows},
      {{3, 3000}, 1, 200, true, true, MTK_INT64, Layout::StridedOutputs, Data::Random, small, S::HugeRows},
      {{1, 150000}, 1, 50, true, true, MTK_INT64, Layout::Contiguous, Data::Mixed, apple, S::HugeRows},
      // Threadgroups of 480 and 288 threads.
      {{3, 4500}, 1, 700, false, true, MTK_INT64, Layout::Contiguous, Data::Ties, capped, S::LongRows},
      {{2, 3000}, 1, 90, true, true, MTK_INT32, Layout::Contiguous, Data::Mixed, capped_small, S::HugeRows},
  };
}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, [](const char* spir) {
    Harness harness(spir);
    const auto [ran, failures] = run_in_every_dtype(harness, cases(), 1);
    std::printf("PoCL: %d kernel cases ran, %d matched the CPU backend and the reference bit for bit\n", ran, ran - failures);
    std::printf("per shape class and dtype (cases):\n");
    for (const auto& [name, count] : harness.class_runs()) std::printf("  %-12s %d\n", name.c_str(), count);
    // The dense kernels; mtk_ragged_finish is pocl_ragged_harness's.
    int missing = report_kernel_runs(harness.kernel_runs(), mtk::MetalKernel::SortStore);
    for (const char* cls : {"short", "long", "huge"}) {
      for (mtk_dtype dtype : kDtypes) {
        if (!harness.class_runs().count(std::string(cls) + " " + mtk::metal_dtype_suffix(dtype))) ++missing;
      }
    }
    if (missing > 0) std::printf("FAIL: %d kernel/dtype or class/dtype combinations never ran and matched\n", missing);
    return failures == 0 && missing == 0 ? 0 : 1;
  });
}
