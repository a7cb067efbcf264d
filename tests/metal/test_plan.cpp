// Unit tests of the Metal plans (lib/metal/metal_topk_plan, metal_router_plan, mpsgraph_plan):
// for top-k, shape-class choice for the benchmark shapes, Apple's 32 KB threadgroup-memory
// limit, grids covering every element, workspace regions, the overflow and dtype checks, and, by
// emulating the bitonic kernels on the host, that the planned sort passes really sort; then
// MPSGraph routing and the router's plan.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "metal/metal_router_plan.hpp"
#include "metal/metal_topk_plan.hpp"
#include "metal/mpsgraph_plan.hpp"
#include "../host_expect.hpp"

namespace {

using mtk::MetalDispatch;
using mtk::MetalKernel;
using mtk::MetalLimits;
using mtk::MetalPlan;
using mtk::MetalShapeClass;

mtk::TopkProblem problem(mtk_dtype dtype, int64_t rows, int64_t n, int64_t k, bool sorted = true) {
  mtk::TopkProblem p{};
  p.dtype = dtype;
  p.index_dtype = MTK_INT64;
  p.largest = true;
  p.sorted = sorted;
  p.geometry.n = n;
  p.geometry.k = k;
  p.geometry.rows = rows;
  p.geometry.batch_ndim = 1;
  p.geometry.batch_sizes[0] = rows;
  p.geometry.input_batch_strides[0] = n;
  p.geometry.values_batch_strides[0] = k;
  p.geometry.indices_batch_strides[0] = k;
  // Plans never dereference these; a non-null values pointer means values are written.
  static char placeholder;
  p.values = &placeholder;
  p.indices = &placeholder;
  return p;
}

// A ragged problem over [rows, n]: contiguous int32 lengths, no starts, no transform.
mtk::RaggedProblem ragged_problem(mtk_dtype dtype, int64_t rows, int64_t n, int64_t k) {
  static const int32_t placeholder_lengths = 0;
  mtk::RaggedProblem r{};
  r.dense = problem(dtype, rows, n, k);
  r.lengths = mtk::RowVector{&placeholder_lengths, MTK_INT32, 1};
  r.transform = MTK_INDEX_TRANSFORM_NONE;
  return r;
}

std::vector<MetalKernel> kernels(const MetalPlan& plan) {
  std::vector<MetalKernel> out;
  for (const MetalDispatch& d : plan.dispatches) out.push_back(d.kernel);
  return out;
}

// Returns the status a call throws, or MTK_SUCCESS.
mtk_status status_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const mtk::Error& e) {
    return e.status();
  }
  return MTK_SUCCESS;
}

// Invariants every dispatch of every plan must hold.
void check_dispatches(const MetalPlan& plan, const mtk::TopkProblem& p, const MetalLimits& limits) {
  for (const MetalDispatch& d : plan.dispatches) {
    uint64_t total = 0;
    for (uint32_t bytes : d.threadgroup_bytes) {
      EXPECT(bytes >= 16 && bytes % 16 == 0);
      total += bytes;
    }
    EXPECT(total <= limits.threadgroup_memory_bytes);
    EXPECT(d.threads % 32 == 0 && d.threads >= 32 && d.threads <= limits.max_threads);
    EXPECT(d.threadgroups_y == uint64_t(p.geometry.rows));
    EXPECT(d.function == std::string(mtk::metal_kernel_name(d.kernel)) + "_" + mtk::metal_dtype_suffix(p.dtype));
    switch (d.kernel) {
      case MetalKernel::RowsShort:
      case MetalKernel::RowsLong:
      case MetalKernel::RadixChoose:
        EXPECT(d.threads >= 256);  // one histogram bin per thread
        EXPECT(d.threadgroups_x == 1);
        break;
      case MetalKernel::RadixHistogram:
      case MetalKernel::SelectCount:
      case MetalKernel::SelectScatter:
        EXPECT(d.threadgroups_x == plan.params.blocks_per_row);
        break;
      default:
        break;
    }
  }
  if (plan.params.sort_in_threadgroup) {
    const uint64_t key_bytes = p.dtype == MTK_INT64 ? 8 : 4;
    EXPECT(plan.dispatches.front().threadgroup_bytes[mtk::kTgSortKeys] >= plan.params.sort_size * key_bytes);
    EXPECT(plan.dispatches.front().threadgroup_bytes[mtk::kTgSortIndices] >= plan.params.sort_size * 4);
  }
}

// Host copy of the kernels' bitonic compare-exchange (topk_kernels.h), used to run the planned
// sequence of sort passes on real data.
struct Entry {
  uint64_t key;
  uint32_t index;
};
bool precedes(const Entry& a, const Entry& b) { return a.key > b.key || (a.key == b.key && a.index < b.index); }

void compare_exchange(std::vector<Entry>& e, uint64_t i, uint64_t stride, uint64_t size) {
  const uint64_t j = i + stride;
  const bool forward = (i & size) == 0;
  if (forward ? precedes(e[j], e[i]) : precedes(e[i], e[j])) std::swap(e[i], e[j]);
}

void emulate_sort(const MetalPlan& plan, std::vector<Entry>& e) {
  const uint64_t width = plan.params.sort_size;
  for (const MetalDispatch& d : plan.dispatches) {
    if (d.kernel == MetalKernel::BitonicTile) {
      const uint64_t tile = plan.params.sort_tile;
      for (uint64_t base = 0; base < width; base += tile) {
        for (uint64_t size = d.pass.size_lo;; size <<= 1) {
          for (uint64_t stride = std::min(size, tile) >> 1; stride > 0; stride >>= 1) {
            for (uint64_t t = 0; t < tile / 2; ++t) compare_exchange(e, base + 2 * t - (t & (stride - 1)), stride, size);
          }
          if (size >= d.pass.size_hi) break;
        }
      }
    } else if (d.kernel == MetalKernel::BitonicStep) {
      for (uint64_t t = 0; t < width / 2; ++t) {
        compare_exchange(e, 2 * t - (t & (d.pass.stride - 1)), d.pass.stride, d.pass.size_lo);
      }
    }
  }
}

void test_moe_shapes_are_one_short_kernel() {
  for (mtk_dtype dtype : {MTK_BFLOAT16, MTK_FLOAT32}) {
    const auto p = problem(dtype, 4096, 256, 8);
    const MetalPlan plan = mtk::make_metal_plan(p);
    EXPECT(plan.shape_class == MetalShapeClass::ShortRows);
    EXPECT(kernels(plan) == std::vector<MetalKernel>{MetalKernel::RowsShort});
    EXPECT(plan.params.sort_in_threadgroup == 1);
    EXPECT(plan.params.sort_size == 8);
    EXPECT(plan.dispatches[0].threads == 256);
    EXPECT(plan.dispatches[0].threadgroups_y == 4096);
    EXPECT(plan.workspace_bytes == 0);
    check_dispatches(plan, p, MetalLimits());
  }
  // 512 experts, top-10, and unsorted.
  const auto p = problem(MTK_BFLOAT16, 4096, 512, 10, false);
  const MetalPlan plan = mtk::make_metal_plan(p);
  EXPECT(kernels(plan) == std::vector<MetalKernel>{MetalKernel::RowsShort});
  EXPECT(plan.params.sort_in_threadgroup == 0);
  EXPECT(plan.dispatches[0].threads == 512);
  check_dispatches(plan, p, MetalLimits());
}

void test_sampling_rows_are_long() {
  const auto p = problem(MTK_FLOAT32, 64, 151936, 50);
  const MetalPlan plan = mtk::make_metal_plan(p);
  EXPECT(plan.shape_class == MetalShapeClass::LongRows);
  EXPECT(kernels(plan) == std::vector<MetalKernel>{MetalKernel::RowsLong});
  EXPECT(plan.params.sort_in_threadgroup == 1);
  EXPECT(plan.dispatches[0].threads == 1024);
  check_dispatches(plan, p, MetalLimits());

  // k = 1024 still sorts inside the row kernel; k = 4000 needs the device-memory sort.
  const auto wide = problem(MTK_FLOAT32, 256, 151936, 1024);
  const MetalPlan wide_plan = mtk::make_metal_plan(wide);
  EXPECT(kernels(wide_plan) == std::vector<MetalKernel>{MetalKernel::RowsLong});
  check_dispatches(wide_plan, wide, MetalLimits());
  const auto wider = problem(MTK_FLOAT32, 256, 151936, 4000);
  const MetalPlan wider_plan = mtk::make_metal_plan(wider);
  EXPECT(wider_plan.params.sort_in_threadgroup == 0);
  EXPECT(wider_plan.dispatches.size() > 2 && wider_plan.dispatches[1].kernel == MetalKernel::SortLoad);
  EXPECT(wider_plan.workspace_bytes >= 256ull * 4096 * 8);
  check_dispatches(wider_plan, wider, MetalLimits());
}

void test_huge_rows_are_multi_pass() {
  const auto p = problem(MTK_FLOAT32, 1, int64_t(1) << 28, 100);
  const MetalPlan plan = mtk::make_metal_plan(p);
  EXPECT(plan.shape_class == MetalShapeClass::HugeRows);
  const std::vector<MetalKernel> expected = {
      MetalKernel::RadixHistogram, MetalKernel::RadixChoose, MetalKernel::RadixHistogram, MetalKernel::RadixChoose,
      MetalKernel::RadixHistogram, MetalKernel::RadixChoose, MetalKernel::RadixHistogram, MetalKernel::RadixChoose,
      MetalKernel::SelectCount,    MetalKernel::SelectOffsets, MetalKernel::SelectScatter, MetalKernel::SortRows};
  EXPECT(kernels(plan) == expected);
  // Digits from the most significant, the row state initialised by the first pass only.
  const uint32_t shifts[4] = {24, 16, 8, 0};
  for (int d = 0; d < 4; ++d) {
    EXPECT(plan.dispatches[2 * d].pass.shift == shifts[d]);
    EXPECT(plan.dispatches[2 * d + 1].pass.shift == shifts[d]);
    EXPECT(plan.dispatches[2 * d].pass.first == (d == 0 ? 1u : 0u));
  }
  // The blocks cover the row exactly once.
  const MtkTopkParams& q = plan.params;
  EXPECT(q.block_elems % plan.dispatches[0].threads == 0);
  EXPECT(uint64_t(q.blocks_per_row) * q.block_elems >= uint64_t(p.geometry.n));
  EXPECT(uint64_t(q.blocks_per_row - 1) * q.block_elems < uint64_t(p.geometry.n));
  EXPECT(q.blocks_per_row <= MetalLimits().huge_max_blocks);
  // Workspace regions are aligned, ordered and inside the workspace.
  EXPECT(q.ws_row_state % 256 == 0 && q.ws_block_hist % 256 == 0 && q.ws_block_counts % 256 == 0);
  EXPECT(q.ws_row_state + sizeof(MtkRowState) <= q.ws_block_hist);
  EXPECT(q.ws_block_hist + uint64_t(q.blocks_per_row) * 256 * 4 <= q.ws_block_counts);
  EXPECT(q.ws_block_counts + uint64_t(q.blocks_per_row) * 8 <= plan.workspace_bytes);
  check_dispatches(plan, p, MetalLimits());

  // One digit per key byte: 8 for int64, 1 for uint8.
  const MetalPlan i64 = mtk::make_metal_plan(problem(MTK_INT64, 2, 1 << 20, 5, false));
  const MetalPlan u8 = mtk::make_metal_plan(problem(MTK_UINT8, 2, 1 << 20, 5, false));
  const auto histograms = [](const MetalPlan& pl) {
    int c = 0;
    for (const MetalDispatch& d : pl.dispatches) c += d.kernel == MetalKernel::RadixHistogram;
    return c;
  };
  EXPECT(histograms(i64) == 8);
  EXPECT(histograms(u8) == 1);
  EXPECT(i64.dispatches.back().kernel == MetalKernel::SelectScatter);  // unsorted: no sort pass
}

void test_planned_sort_sorts() {
  std::mt19937_64 rng(7);
  MetalLimits narrow;
  narrow.sort_tile_max = 64;
  for (int64_t k : {65, 100, 300, 1000, 4097}) {
    for (mtk_dtype dtype : {MTK_FLOAT32, MTK_INT64}) {
      const auto p = problem(dtype, 2, 10000, k);
      const MetalPlan plan = mtk::make_metal_plan(p, narrow);
      check_dispatches(plan, p, narrow);
      EXPECT(plan.params.sort_tile == 64);
      std::vector<Entry> e(plan.params.sort_size);
      for (uint64_t i = 0; i < e.size(); ++i) {
        // Few distinct keys so that the index tie-break matters; padding as the kernels pad.
        e[i] = i < uint64_t(k) ? Entry{rng() % 5, uint32_t(i)} : Entry{0, 0xffffffffu};
      }
      std::shuffle(e.begin(), e.begin() + k, rng);
      std::vector<Entry> want(e.begin(), e.begin() + k);
      std::sort(want.begin(), want.end(), precedes);
      emulate_sort(plan, e);
      bool same = true;
      for (int64_t i = 0; i < k; ++i) same = same && e[i].key == want[i].key && e[i].index == want[i].index;
      EXPECT(same);
    }
  }
}

void test_threadgroup_memory_limit_is_enforced() {
  // Whatever the limit, every dispatch fits it; a tight limit gives up the in-kernel sort and
  // the key cache rather than exceeding it.
  std::mt19937 rng(3);
  for (size_t limit : {size_t(32768), size_t(16384), size_t(8192)}) {
    MetalLimits l;
    l.threadgroup_memory_bytes = limit;
    for (int trial = 0; trial < 300; ++trial) {
      const mtk_dtype dtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_INT8, MTK_UINT8, MTK_INT16, MTK_INT32, MTK_INT64};
      const mtk_dtype dtype = dtypes[rng() % 8];
      const int64_t n = 1 + rng() % (trial % 3 == 0 ? 300000 : 6000);
      const int64_t k = 1 + rng() % n;
      const int64_t rows = 1 + rng() % 40;
      const auto p = problem(dtype, rows, n, k, rng() % 2);
      const MetalPlan plan = mtk::make_metal_plan(p, l);
      check_dispatches(plan, p, l);
    }
  }
  MetalLimits tight;
  tight.threadgroup_memory_bytes = 8192;
  const MetalPlan plan = mtk::make_metal_plan(problem(MTK_FLOAT32, 8, 4000, 8), tight);
  EXPECT(plan.shape_class == MetalShapeClass::LongRows);  // 16 KB of cached keys do not fit
}

void test_rejections() {
  EXPECT(status_of([] { mtk::make_metal_plan(problem(MTK_FLOAT64, 1, 10, 1)); }) == MTK_ERROR_UNSUPPORTED_DTYPE);
  EXPECT(status_of([] { mtk::make_metal_plan(problem(MTK_FLOAT32, 1, mtk::kMetalMaxRowLength + 1, 1)); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([] { mtk::make_metal_plan(problem(MTK_INT8, 1, mtk::kMetalMaxRowLength, 1, false)); }) == MTK_SUCCESS);
  EXPECT(status_of([] {
           mtk::make_metal_plan(problem(MTK_INT8, 1, mtk::kMetalMaxRowLength, (int64_t(1) << 31) + 1, true));
         }) == MTK_ERROR_INVALID_ARGUMENT);
  MetalLimits bad;
  bad.max_threads = 100;
  EXPECT(status_of([&] { mtk::make_metal_plan(problem(MTK_FLOAT32, 1, 10, 1), bad); }) == MTK_ERROR_INTERNAL);
}

void test_buffer_offsets() {
  MetalPlan plan = mtk::make_metal_plan(problem(MTK_FLOAT16, 2, 10, 3));
  mtk::set_metal_buffer_offsets(plan, MTK_FLOAT16, MTK_INT32, 6, 40, 12);
  EXPECT(plan.params.input_base == 3 && plan.params.values_base == 20 && plan.params.indices_base == 3);
  EXPECT(status_of([&] { mtk::set_metal_buffer_offsets(plan, MTK_FLOAT16, MTK_INT64, 3, 0, 0); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([&] { mtk::set_metal_buffer_offsets(plan, MTK_FLOAT16, MTK_INT64, 0, 0, 4); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
}

void test_workspace_checks() {
  const MetalPlan plan = mtk::make_metal_plan(problem(MTK_FLOAT32, 1, 1 << 20, 10));
  EXPECT(plan.workspace_bytes > 0);
  EXPECT(status_of([&] { mtk::check_metal_workspace(plan, plan.workspace_bytes, 512); }) == MTK_SUCCESS);
  EXPECT(status_of([&] { mtk::check_metal_workspace(plan, plan.workspace_bytes - 1, 0); }) == MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([&] { mtk::check_metal_workspace(plan, plan.workspace_bytes, 8); }) == MTK_ERROR_INVALID_ARGUMENT);
}

void test_pipeline_thread_limits() {
  EXPECT(mtk::metal_limits_for_pipelines(1024).max_threads == 1024);
  EXPECT(mtk::metal_limits_for_pipelines(4096).max_threads == 1024);
  EXPECT(mtk::metal_limits_for_pipelines(900).max_threads == 896);
  EXPECT(status_of([] { mtk::metal_limits_for_pipelines(200); }) == MTK_ERROR_DEVICE);
  // A 896-thread cap still gives valid plans for every class.
  const MetalLimits l = mtk::metal_limits_for_pipelines(900);
  for (const auto& p : {problem(MTK_FLOAT32, 64, 151936, 50), problem(MTK_FLOAT32, 1, 1 << 24, 5000),
                        problem(MTK_BFLOAT16, 4096, 4096, 8)}) {
    const MetalPlan plan = mtk::make_metal_plan(p, l);
    check_dispatches(plan, p, l);
    if (plan.shape_class == MetalShapeClass::HugeRows) EXPECT(plan.params.block_elems % 896 == 0);
  }
}

void test_tensor_extents() {
  // [3, 5] float16 input flipped along dim (stride -1 from element 0 at the row end), outputs
  // [3, 2] contiguous, int32 indices with a gap of 2 between rows.
  mtk::TopkProblem p = problem(MTK_FLOAT16, 3, 5, 2);
  p.index_dtype = MTK_INT32;
  p.geometry.input_stride = -1;
  p.geometry.indices_batch_strides[0] = 4;
  const mtk::MetalExtents e = mtk::metal_tensor_extents(p);
  EXPECT(e.input.first == -8 && e.input.bytes == 30);  // elements -4 .. 10
  EXPECT(e.values.first == 0 && e.values.bytes == 12);
  EXPECT(e.indices.first == 0 && e.indices.bytes == 4 * 10);  // elements 0 .. 9
}

void test_ragged_plans() {
  using K = MetalKernel;
  // k above n: the selection is planned for n winners, the finish for all k positions.
  mtk::RaggedProblem r = ragged_problem(MTK_FLOAT32, 8, 100, 2048);
  MetalPlan plan = mtk::make_metal_ragged_plan(r);
  check_dispatches(plan, r.dense, MetalLimits());
  EXPECT(plan.params.ragged == 1 && plan.params.k == 2048 && plan.params.sort_size == 128);
  EXPECT(plan.params.has_values == 1 && plan.params.lengths.present == 1 && plan.params.starts.present == 0);
  EXPECT(kernels(plan) == (std::vector<K>{K::RowsShort, K::RaggedFinish}));
  EXPECT(uint64_t(plan.dispatches.back().threadgroups_x) * plan.dispatches.back().threads >= 2048);
  // Empty rows (n = 0): only the padding runs, without scratch.
  plan = mtk::make_metal_ragged_plan(ragged_problem(MTK_FLOAT16, 3, 0, 5));
  EXPECT(kernels(plan) == (std::vector<K>{K::RaggedFinish}) && plan.workspace_bytes == 0);
  // Huge rows: the multi-pass selection and the device-memory sort, then the finish.
  r = ragged_problem(MTK_BFLOAT16, 2, 1 << 20, 8192);
  plan = mtk::make_metal_ragged_plan(r);
  check_dispatches(plan, r.dense, MetalLimits());
  const std::vector<K> huge = kernels(plan);
  EXPECT(plan.shape_class == MetalShapeClass::HugeRows && huge.back() == K::RaggedFinish);
  EXPECT(std::count(huge.begin(), huge.end(), K::SortStore) == 1);
  // Dense plans never finish; indices only is a flag, and the values have no extent.
  mtk::TopkProblem dense = problem(MTK_INT8, 4, 300, 7);
  dense.values = nullptr;
  plan = mtk::make_metal_plan(dense);
  EXPECT(plan.params.has_values == 0 && plan.params.ragged == 0 && kernels(plan).back() != K::RaggedFinish);
  EXPECT(mtk::metal_tensor_extents(dense).values.bytes == 0);
}

void test_ragged_tensors() {
  // lengths int32 every 2nd entry, starts int64 walking backwards, row_to_batch int64, a
  // [2, 3] int32 page table with its pages 2 apart.
  static const int64_t entries[16] = {};
  mtk::RaggedProblem r = ragged_problem(MTK_FLOAT32, 4, 6, 2);
  r.lengths = mtk::RowVector{entries, MTK_INT32, 2};
  r.starts = mtk::RowVector{entries + 8, MTK_INT64, -1};
  r.row_to_batch = mtk::RowVector{entries, MTK_INT64, 1};
  r.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
  r.page_table = entries;
  r.page_table_dtype = MTK_INT32;
  r.page_table_batch = 2;
  r.page_table_pages = 3;
  r.page_table_batch_stride = 6;
  r.page_table_page_stride = 2;
  r.page_size = 2;
  const mtk::MetalRaggedTensors t = mtk::metal_ragged_tensors(r);
  EXPECT(t.data[mtk::kRaggedLengths] == entries && t.extents[mtk::kRaggedLengths].first == 0 &&
         t.extents[mtk::kRaggedLengths].bytes == 4 * 7);
  EXPECT(t.extents[mtk::kRaggedStarts].first == -24 && t.extents[mtk::kRaggedStarts].bytes == 32);
  EXPECT(t.data[mtk::kRaggedOffsets] == nullptr);
  EXPECT(t.extents[mtk::kRaggedPageTable].first == 0 && t.extents[mtk::kRaggedPageTable].bytes == 4 * 11);
  EXPECT(t.extents[mtk::kRaggedRowToBatch].bytes == 32);

  MetalPlan plan = mtk::make_metal_ragged_plan(r);
  EXPECT(plan.params.transform == MTK_METAL_TRANSFORM_PAGE_TABLE && plan.params.page_size == 2 &&
         plan.params.page_table_batches == 2 && plan.params.page_table_page_stride == 2 &&
         plan.params.page_table_is_64 == 0 && plan.params.starts.stride == -1 && plan.params.starts.is_64 == 1);
  mtk::set_metal_ragged_buffer_offsets(plan, r, {8, 64, 0, 12, 16});
  EXPECT(plan.params.lengths.base == 2 && plan.params.starts.base == 8 && plan.params.page_table_base == 3 &&
         plan.params.row_to_batch.base == 2 && plan.params.offsets.base == 0);
  EXPECT(status_of([&] { mtk::set_metal_ragged_buffer_offsets(plan, r, {8, 60, 0, 12, 16}); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  // An absent tensor's offset is never checked.
  EXPECT(status_of([&] { mtk::set_metal_ragged_buffer_offsets(plan, r, {8, 64, 3, 12, 16}); }) == MTK_SUCCESS);
}

void test_geometry_is_passed_through() {
  // Experts on dim 0 of a [256, 4096] tensor: 4096 rows of 256 elements 4096 apart.
  mtk::TopkProblem p = problem(MTK_BFLOAT16, 4096, 256, 8);
  p.geometry.input_stride = 4096;
  p.geometry.input_batch_strides[0] = 1;
  p.geometry.values_stride = 4096;
  p.geometry.values_batch_strides[0] = 1;
  const MetalPlan plan = mtk::make_metal_plan(p);
  EXPECT(plan.shape_class == MetalShapeClass::ShortRows);
  EXPECT(plan.params.input_stride == 4096 && plan.params.input_batch_strides[0] == 1);
  EXPECT(plan.params.values_stride == 4096 && plan.params.indices_stride == 1);
  EXPECT(plan.params.batch_ndim == 1 && plan.params.batch_sizes[0] == 4096);
  EXPECT(plan.params.n == 256 && plan.params.k == 8 && plan.params.largest == 1 && plan.params.index_is_64 == 1);
}

void test_mpsgraph_routing() {
  mtk::MpsGraphCapabilities old_os, new_os;
  new_os.macos14 = true;
  const mtk::MpsGraphBinding at_start;
  // MoE decode on the last dim: the graph, with the int64 cast on the GPU.
  const auto moe = problem(MTK_FLOAT16, 128, 256, 8);
  mtk::MpsGraphTopk r = mtk::plan_mpsgraph_topk(moe, old_os, at_start);
  EXPECT(r.use_graph && r.axis == 1 && !r.axis_form && !r.transpose && !r.negate && r.indices_int64);
  EXPECT(r.shape[0] == 128 && r.shape[1] == 256);
  // Smallest: bottomK on macOS 14, negation before.
  auto smallest = moe;
  smallest.largest = false;
  EXPECT(mtk::plan_mpsgraph_topk(smallest, old_os, at_start).negate);
  r = mtk::plan_mpsgraph_topk(smallest, new_os, at_start);
  EXPECT(r.use_graph && r.axis_form && !r.negate);
  // Experts on dim 0 ([n, rows] dense): transposes before macOS 14, axis 0 after.
  auto dim0 = moe;
  dim0.geometry.input_stride = dim0.geometry.values_stride = dim0.geometry.indices_stride = 128;
  dim0.geometry.input_batch_strides[0] = dim0.geometry.values_batch_strides[0] = 1;
  dim0.geometry.indices_batch_strides[0] = 1;
  r = mtk::plan_mpsgraph_topk(dim0, old_os, at_start);
  EXPECT(r.use_graph && r.axis == 0 && r.transpose && r.shape[0] == 256 && r.shape[1] == 128);
  r = mtk::plan_mpsgraph_topk(dim0, new_os, at_start);
  EXPECT(r.use_graph && r.axis == 0 && r.axis_form && !r.transpose);
  // Routed to the Metal kernels.
  EXPECT(!mtk::plan_mpsgraph_topk(problem(MTK_FLOAT32, 4, 256, 17), new_os, at_start).use_graph);
  EXPECT(!mtk::plan_mpsgraph_topk(problem(MTK_INT32, 4, 256, 8), new_os, at_start).use_graph);
  EXPECT(!mtk::plan_mpsgraph_topk(problem(MTK_BFLOAT16, 4, 256, 8), old_os, at_start).use_graph);
  EXPECT(mtk::plan_mpsgraph_topk(problem(MTK_BFLOAT16, 4, 256, 8), new_os, at_start).use_graph);
  mtk::MpsGraphBinding interior;
  interior.input_offset = 64;
  EXPECT(!mtk::plan_mpsgraph_topk(moe, new_os, interior).use_graph);
  mtk::MpsGraphBinding caller;
  caller.caller_command_buffer = true;
  EXPECT(!mtk::plan_mpsgraph_topk(moe, new_os, caller).use_graph);
  auto strided = moe;
  strided.geometry.input_stride = 2;
  strided.geometry.input_batch_strides[0] = 512;
  EXPECT(!mtk::plan_mpsgraph_topk(strided, new_os, at_start).use_graph);
  auto three_d = moe;
  three_d.geometry.batch_ndim = 2;
  three_d.geometry.batch_sizes[1] = 1;
  EXPECT(!mtk::plan_mpsgraph_topk(three_d, new_os, at_start).use_graph);
}

// ---- MoE router plan -------------------------------------------------------------------------

mtk::RouterProblem router(mtk_dtype dtype, int64_t tokens, int64_t experts, int64_t k, int64_t n_group = 1,
                          int64_t topk_group = 1) {
  mtk::RouterProblem p{};
  p.dtype = dtype;
  p.index_dtype = MTK_INT32;
  p.tokens = tokens;
  p.experts = experts;
  p.k = k;
  p.scoring = MTK_SCORING_SOFTMAX;
  p.n_group = n_group;
  p.topk_group = topk_group;
  p.renormalize = true;
  p.scale = 1.0f;
  p.logits_token_stride = experts;
  p.logits_expert_stride = 1;
  p.weights_token_stride = k;
  p.weights_k_stride = 1;
  p.ids_token_stride = k;
  p.ids_k_stride = 1;
  return p;
}

uint32_t padded(uint64_t bytes) { return uint32_t(std::max<uint64_t>((bytes + 15) / 16 * 16, 16)); }

// What the kernel needs (lib/metal/router_kernels.h), checked against any router plan.
void check_router_plan(const mtk::MetalRouterPlan& plan, const mtk::RouterProblem& p, const MetalLimits& limits) {
  uint64_t total = 0;
  for (uint32_t bytes : plan.threadgroup_bytes) {
    EXPECT(bytes >= 16 && bytes % 16 == 0);
    total += bytes;
  }
  EXPECT(total <= limits.threadgroup_memory_bytes);
  EXPECT(plan.threads % 32 == 0 && plan.threads >= 32 && plan.threads <= limits.max_threads);
  EXPECT(plan.threadgroups_y == uint64_t(p.tokens));
  EXPECT(plan.function == std::string("mtk_moe_route_") + mtk::metal_dtype_suffix(p.dtype));
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgScores] >= 4 * p.experts);
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgKeys] >= 4 * p.experts);
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgReduce] >= 4 * (64 + 2 * uint64_t(plan.threads)));
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgRoute] >= 4 * (2 * p.n_group + 2 * p.k));
}

void test_router_benchmark_shapes() {
  // DeepSeek-style 4096 tokens x 256 experts, top-8 in 8 groups keeping 4: one thread per expert.
  mtk::RouterProblem ds = router(MTK_BFLOAT16, 4096, 256, 8, 8, 4);
  ds.scoring = MTK_SCORING_SIGMOID;
  const float bias[256] = {};
  ds.bias = bias;
  ds.bias_stride = 1;
  ds.scale = 2.5f;
  ds.index_dtype = MTK_INT64;
  const mtk::MetalRouterPlan plan = mtk::make_metal_router_plan(ds);
  check_router_plan(plan, ds, MetalLimits());
  EXPECT(plan.function == "mtk_moe_route_bf16");
  EXPECT(plan.threads == 256);
  EXPECT(plan.threadgroups_y == 4096);
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgScores] == 1024);
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgKeys] == 1024);
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgReduce] == (64 + 512) * 4);
  EXPECT(plan.threadgroup_bytes[mtk::kRouterTgRoute] == padded((16 + 16) * 4));
  const MtkRouterParams& q = plan.params;
  EXPECT(q.experts == 256 && q.k == 8 && q.n_group == 8 && q.topk_group == 4);
  EXPECT(q.scoring == MTK_SCORING_SIGMOID && q.has_bias == 1 && q.renormalize == 1 && q.index_is_64 == 1);
  EXPECT(q.scale == 2.5f && q.logits_token_stride == 256 && q.logits_expert_stride == 1);
  EXPECT(q.weights_token_stride == 8 && q.ids_k_stride == 1 && q.bias_stride == 1);

  // 512 experts, top-10, float32 logits; odd expert counts round up to whole SIMD-groups.
  const mtk::MetalRouterPlan wide = mtk::make_metal_router_plan(router(MTK_FLOAT32, 7, 512, 10));
  EXPECT(wide.threads == 512 && wide.params.has_bias == 0 && wide.params.n_group == 1);
  EXPECT(mtk::make_metal_router_plan(router(MTK_FLOAT16, 1, 8, 2)).threads == 32);
  EXPECT(mtk::make_metal_router_plan(router(MTK_FLOAT16, 1, 200, 2)).threads == 224);
  EXPECT(mtk::make_metal_router_plan(router(MTK_FLOAT16, 1, 3000, 2)).threads == 1024);
}

void test_router_threadgroup_memory_limit() {
  std::mt19937_64 rng(7);
  int planned = 0, rejected = 0, shrunk = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t experts = 1 + int64_t(rng() % 5000);
    const int64_t k = 1 + int64_t(rng() % uint64_t(experts));
    int64_t groups = 1;
    for (int64_t g : {2, 4, 8, 16, 32}) {
      if (experts % g == 0 && rng() % 2) groups = g;
    }
    MetalLimits limits;
    if (rng() % 3 == 0) limits.threadgroup_memory_bytes = 4096 + 16 * (rng() % 1024);
    if (rng() % 3 == 0) limits.max_threads = 32 * uint32_t(1 + rng() % 32);
    const mtk::RouterProblem p = router(MTK_FLOAT32, 3, experts, k, groups, groups);
    // Even one SIMD-group cannot hold the token: the only reason a plan may be refused.
    const uint64_t smallest = padded(4 * experts) * 2 + padded(4 * (64 + 64)) + padded(4 * (2 * groups + 2 * k));
    const mtk_status status = status_of([&] {
      const mtk::MetalRouterPlan plan = mtk::make_metal_router_plan(p, limits);
      check_router_plan(plan, p, limits);
      const uint64_t wanted = std::min<uint64_t>((experts + 31) / 32 * 32, limits.max_threads);
      EXPECT(plan.threads <= wanted);
      if (plan.threads < wanted) {
        ++shrunk;
        // The most threads that fit: one more SIMD-group would not have.
        const uint64_t one_more = padded(4 * experts) * 2 + padded(4 * (64 + 2 * (uint64_t(plan.threads) + 32))) +
                                  padded(4 * (2 * groups + 2 * k));
        EXPECT(one_more > limits.threadgroup_memory_bytes);
      }
    });
    if (status == MTK_SUCCESS) {
      ++planned;
      EXPECT(smallest <= limits.threadgroup_memory_bytes);
    } else {
      ++rejected;
      EXPECT(status == MTK_ERROR_INVALID_ARGUMENT);
      EXPECT(smallest > limits.threadgroup_memory_bytes);
    }
  }
  EXPECT(planned > 1000 && rejected > 100 && shrunk > 100);
  // Apple's 32 KB: 4000 experts with a small k still fit, 4096 do not.
  EXPECT(status_of([] { mtk::make_metal_router_plan(router(MTK_FLOAT32, 1, 4000, 8)); }) == MTK_SUCCESS);
  EXPECT(status_of([] { mtk::make_metal_router_plan(router(MTK_FLOAT32, 1, 4096, 8)); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  // More tokens than a grid dimension holds.
  EXPECT(status_of([] { mtk::make_metal_router_plan(router(MTK_FLOAT32, int64_t(1) << 32, 64, 8)); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
}

void test_router_limits_offsets_and_extents() {
  EXPECT(mtk::metal_router_limits_for_pipeline(100).max_threads == 96);
  EXPECT(mtk::metal_router_limits_for_pipeline(4096).max_threads == 1024);
  EXPECT(status_of([] { mtk::metal_router_limits_for_pipeline(31); }) == MTK_ERROR_DEVICE);
  EXPECT(mtk::make_metal_router_plan(router(MTK_FLOAT32, 2, 512, 8), mtk::metal_router_limits_for_pipeline(100))
             .threads == 96);

  mtk::RouterProblem p = router(MTK_FLOAT16, 5, 64, 4);
  p.index_dtype = MTK_INT64;
  const float bias[128] = {};
  p.bias = bias;
  p.bias_stride = 2;
  mtk::MetalRouterPlan plan = mtk::make_metal_router_plan(p);
  mtk::set_metal_router_buffer_offsets(plan, p, 6, 8, 12, 16);
  EXPECT(plan.params.logits_base == 3 && plan.params.bias_base == 2 && plan.params.weights_base == 3 &&
         plan.params.ids_base == 2);
  EXPECT(status_of([&] { mtk::set_metal_router_buffer_offsets(plan, p, 3, 8, 12, 16); }) == MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([&] { mtk::set_metal_router_buffer_offsets(plan, p, 6, 8, 12, 12); }) == MTK_ERROR_INVALID_ARGUMENT);
  p.bias = nullptr;
  mtk::set_metal_router_buffer_offsets(plan, p, 6, 3, 12, 16);  // no bias: its offset is not used
  EXPECT(plan.params.bias_base == 0);

  // Extents: negative token stride for the logits, transposed outputs, stepped bias.
  mtk::RouterProblem q = router(MTK_BFLOAT16, 4, 16, 3);
  q.logits_token_stride = -16;
  q.weights_token_stride = 1;
  q.weights_k_stride = 4;
  q.bias = bias;
  q.bias_stride = 3;
  const mtk::MetalRouterExtents e = mtk::metal_router_extents(q);
  EXPECT(e.logits.first == -3 * 16 * 2 && e.logits.bytes == 4 * 16 * 2);
  EXPECT(e.weights.first == 0 && e.weights.bytes == 12 * 4);
  EXPECT(e.ids.first == 0 && e.ids.bytes == 12 * 4);
  EXPECT(e.bias.first == 0 && e.bias.bytes == (15 * 3 + 1) * 4);
  q.bias = nullptr;
  EXPECT(mtk::metal_router_extents(q).bias.bytes == 0);
}

}  // namespace

int main() {
  test_mpsgraph_routing();
  test_moe_shapes_are_one_short_kernel();
  test_sampling_rows_are_long();
  test_huge_rows_are_multi_pass();
  test_planned_sort_sorts();
  test_threadgroup_memory_limit_is_enforced();
  test_rejections();
  test_buffer_offsets();
  test_geometry_is_passed_through();
  test_workspace_checks();
  test_tensor_extents();
  test_ragged_plans();
  test_ragged_tensors();
  test_pipeline_thread_limits();
  test_router_benchmark_shapes();
  test_router_threadgroup_memory_limit();
  test_router_limits_offsets_and_extents();
  if (g_failures) {
    std::printf("test_plan: %d failures\n", g_failures);
    return 1;
  }
  std::printf("test_plan: all Metal plan checks passed\n");
  return 0;
}
