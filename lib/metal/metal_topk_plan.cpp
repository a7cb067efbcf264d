#include "metal_topk_plan.hpp"

#include <algorithm>
#include <limits>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace mtk {

using namespace metal_plan_support;

namespace {

// Must match lib/metal/mtk_dialect.h (scan_scratch_words) and topk_kernels.h (kSelectionWords).
constexpr uint32_t kSelectionWords = MTK_RADIX_BINS + 4;
uint32_t scan_scratch_words(uint32_t threads) { return 2 * kSimdWidth + threads; }

// choose_radix_digit gives one histogram bin to each thread.
constexpr uint32_t kMinSelectThreads = MTK_RADIX_BINS;
constexpr size_t kWorkspaceAlignment = 256;

uint64_t next_pow2(uint64_t value) {
  uint64_t p = 1;
  while (p < value) p <<= 1;
  return p;
}

uint64_t checked_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    fail(MTK_ERROR_OUT_OF_MEMORY, "Metal workspace size overflows (", a, " * ", b, " bytes)");
  }
  return a * b;
}

uint32_t key_bytes(mtk_dtype dtype) { return dtype == MTK_INT64 ? 8u : 4u; }

uint32_t key_bits(mtk_dtype dtype) { return static_cast<uint32_t>(require_dtype(dtype, "input").size * 8); }

void validate_limits(const MetalLimits& l) {
  if (l.max_threads < kMinSelectThreads || l.max_threads > kSimdWidth * kSimdWidth ||
      l.max_threads % kSimdWidth != 0) {
    fail(MTK_ERROR_INTERNAL, "Metal max_threads = ", l.max_threads, " must be a multiple of 32 in [256, 1024]");
  }
  if (l.sort_tile_max < 2 || (l.sort_tile_max & (l.sort_tile_max - 1)) != 0) {
    fail(MTK_ERROR_INTERNAL, "Metal sort_tile_max = ", l.sort_tile_max, " must be a power of two >= 2");
  }
  if (l.huge_max_blocks == 0 || l.huge_block_min_elems == 0) {
    fail(MTK_ERROR_INTERNAL, "Metal huge-row limits must be positive");
  }
}

// Threadgroup buffer sizes of one dispatch; the rest stay at the 16-byte minimum.
struct TgBytes {
  uint64_t bytes[kMetalThreadgroupBuffers] = {0, 0, 0, 0, 0};
  uint64_t total() const {
    uint64_t sum = 0;
    for (uint64_t b : bytes) sum += threadgroup_buffer_bytes(b);
    return sum;
  }
};

// Plans a dense problem, or a ragged one (`ragged` non-null, `problem` its dense form): the
// selection kernels then pick min(k, n) winners of each row's window (the most any row has)
// and mtk_ragged_finish pads and transforms.
class PlanBuilder {
 public:
  PlanBuilder(const TopkProblem& problem, const RaggedProblem* ragged, const MetalLimits& limits)
      : problem_(problem), ragged_(ragged), limits_(limits), suffix_(metal_dtype_suffix(problem.dtype)) {}

  MetalPlan build() {
    const RowGeometry& g = problem_.geometry;
    if (g.n > kMetalMaxRowLength) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "row length ", g.n, " exceeds the Metal backend's limit of ",
           kMetalMaxRowLength, " elements");
    }
    rows_ = to_u32(static_cast<uint64_t>(g.rows), "rows");
    n_ = static_cast<uint64_t>(g.n);
    k_ = static_cast<uint64_t>(std::min(g.k, g.n));
    kb_ = key_bytes(problem_.dtype);
    if (problem_.sorted && k_ > (uint64_t(1) << 31)) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "sorted top-k with k = ", k_, " exceeds the Metal backend's limit of 2^31");
    }
    sort_size_ = next_pow2(k_);
    fill_params();
    plan_.shape_class = MetalShapeClass::ShortRows;
    if (k_ > 0) plan_selection();
    if (ragged_ != nullptr) plan_ragged_finish();
    plan_.workspace_bytes = workspace_;
    return plan_;
  }

 private:
  void plan_selection() {
    const RowGeometry& g = problem_.geometry;
    const bool huge = g.n >= limits_.huge_row_min_n && g.rows <= limits_.huge_row_max_rows;
    bool sort_pending = problem_.sorted;
    if (huge) {
      plan_.shape_class = MetalShapeClass::HugeRows;
      plan_multi_pass();
    } else {
      sort_pending = plan_row_kernel();
    }
    if (sort_pending) plan_sort();
  }

  void plan_ragged_finish() {
    const uint64_t k = static_cast<uint64_t>(problem_.geometry.k);
    const uint32_t threads = threads_for(k, kSimdWidth);
    add(MetalKernel::RaggedFinish, (k + threads - 1) / threads, rows_, threads, TgBytes{});
  }

  void fill_params() {
    const RowGeometry& g = problem_.geometry;
    MtkTopkParams& p = plan_.params;
    p = MtkTopkParams{};
    p.n = g.n;
    p.k = g.k;
    p.input_stride = g.input_stride;
    p.values_stride = g.values_stride;
    p.indices_stride = g.indices_stride;
    p.batch_ndim = static_cast<mtk_u32>(g.batch_ndim);
    for (int d = 0; d < g.batch_ndim; ++d) {
      p.batch_sizes[d] = g.batch_sizes[d];
      p.input_batch_strides[d] = g.input_batch_strides[d];
      p.values_batch_strides[d] = g.values_batch_strides[d];
      p.indices_batch_strides[d] = g.indices_batch_strides[d];
    }
    p.largest = problem_.largest ? 1u : 0u;
    p.index_is_64 = problem_.index_dtype == MTK_INT64 ? 1u : 0u;
    p.sort_size = static_cast<mtk_u32>(sort_size_);
    p.has_values = problem_.values != nullptr ? 1u : 0u;
    if (ragged_ != nullptr) fill_ragged_params();
  }

  void fill_ragged_params() {
    const RaggedProblem& r = *ragged_;
    MtkTopkParams& p = plan_.params;
    p.ragged = 1u;
    p.transform = static_cast<mtk_u32>(r.transform);
    p.lengths = row_vector(r.lengths);
    p.starts = row_vector(r.starts);
    p.offsets = row_vector(r.offsets);
    p.row_to_batch = row_vector(r.row_to_batch);
    if (r.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
      p.page_table_batches = r.page_table_batch;
      p.page_table_batch_stride = r.page_table_batch_stride;
      p.page_table_page_stride = r.page_table_page_stride;
      p.page_size = r.page_size;
      p.page_table_is_64 = r.page_table_dtype == MTK_INT64 ? 1u : 0u;
    }
  }

  // Bases are set per call (set_metal_ragged_buffer_offsets).
  static MtkRowVector row_vector(const RowVector& v) {
    MtkRowVector out{};
    out.present = v.data != nullptr ? 1u : 0u;
    out.stride = v.stride;
    out.is_64 = v.dtype == MTK_INT64 ? 1u : 0u;
    return out;
  }

  // Reserves an aligned workspace region and returns its byte offset.
  uint64_t reserve(uint64_t bytes) {
    const uint64_t offset = round_up(workspace_, kWorkspaceAlignment);
    workspace_ = offset + bytes;
    return offset;
  }

  void add(MetalKernel kernel, uint64_t groups_x, uint64_t groups_y, uint32_t threads,
           const TgBytes& tg, MtkPassParams pass = MtkPassParams{}) {
    if (tg.total() > limits_.threadgroup_memory_bytes) {
      fail(MTK_ERROR_INTERNAL, "Metal plan for ", metal_kernel_name(kernel), " needs ", tg.total(),
           " bytes of threadgroup memory, over the limit of ", limits_.threadgroup_memory_bytes);
    }
    MetalDispatch d;
    d.kernel = kernel;
    d.function = std::string(metal_kernel_name(kernel)) + "_" + suffix_;
    d.threadgroups_x = to_u32(groups_x, "threadgroups per row");
    d.threadgroups_y = to_u32(groups_y, "rows");
    d.threads = threads;
    for (int i = 0; i < kMetalThreadgroupBuffers; ++i) {
      d.threadgroup_bytes[i] = static_cast<uint32_t>(threadgroup_buffer_bytes(tg.bytes[i]));
    }
    d.pass = pass;
    plan_.dispatches.push_back(d);
  }

  // Threads for a kernel that walks `work` items per threadgroup, with at least `floor`.
  uint32_t threads_for(uint64_t work, uint32_t floor) const {
    const uint64_t wanted = std::max<uint64_t>(round_up(work, kSimdWidth), floor);
    return static_cast<uint32_t>(std::min<uint64_t>(next_pow2(wanted), limits_.max_threads));
  }

  // One threadgroup per row. Returns whether a separate sort is still needed.
  bool plan_row_kernel() {
    const uint32_t threads_short = threads_for(n_, kMinSelectThreads);
    const uint32_t threads_long = limits_.max_threads;
    const uint64_t staging_keys = sort_size_ * kb_;
    const uint64_t staging_indices = sort_size_ * 4;
    const bool can_stage = problem_.sorted && sort_size_ <= limits_.sort_tile_max;

    auto selection = [&](uint32_t threads, bool cache, bool stage) {
      TgBytes tg;
      tg.bytes[kTgSelectionWords] = kSelectionWords * 4;
      tg.bytes[kTgScanScratch] = scan_scratch_words(threads) * 4;
      if (stage) {
        tg.bytes[kTgSortKeys] = staging_keys;
        tg.bytes[kTgSortIndices] = staging_indices;
      }
      if (cache) tg.bytes[kTgKeyCache] = n_ * kb_;
      return tg;
    };
    const size_t budget = limits_.threadgroup_memory_bytes;

    // Prefer caching the keys (one device read) and sorting in the same kernel; give up the
    // in-kernel sort before the cache, and the cache last.
    if (static_cast<int64_t>(n_) <= limits_.short_row_max_n) {
      for (bool stage : {can_stage, false}) {
        const TgBytes tg = selection(threads_short, true, stage);
        if (tg.total() <= budget) {
          plan_.shape_class = MetalShapeClass::ShortRows;
          plan_.params.sort_in_threadgroup = stage ? 1u : 0u;
          add(MetalKernel::RowsShort, 1, rows_, threads_short, tg);
          return problem_.sorted && !stage;
        }
      }
    }
    plan_.shape_class = MetalShapeClass::LongRows;
    bool stage = can_stage && selection(threads_long, false, true).total() <= budget;
    plan_.params.sort_in_threadgroup = stage ? 1u : 0u;
    add(MetalKernel::RowsLong, 1, rows_, threads_long, selection(threads_long, false, stage));
    return problem_.sorted && !stage;
  }

  // Many threadgroups per row: per digit a histogram pass and a choose pass, then a three-pass
  // ordered compaction. Block histograms go through device memory, so no device atomics.
  void plan_multi_pass() {
    const uint32_t threads = limits_.max_threads;
    uint64_t block_elems = std::max<uint64_t>(limits_.huge_block_min_elems, (n_ + limits_.huge_max_blocks - 1) / limits_.huge_max_blocks);
    block_elems = round_up(block_elems, threads);
    const uint64_t blocks = (n_ + block_elems - 1) / block_elems;
    MtkTopkParams& p = plan_.params;
    p.block_elems = to_u32(block_elems, "elements per threadgroup");
    p.blocks_per_row = to_u32(blocks, "threadgroups per row");
    p.ws_row_state = reserve(checked_mul(rows_, sizeof(MtkRowState)));
    p.ws_block_hist = reserve(checked_mul(checked_mul(rows_, blocks), MTK_RADIX_BINS * 4));
    p.ws_block_counts = reserve(checked_mul(checked_mul(rows_, blocks), 2 * 4));

    TgBytes histogram;
    histogram.bytes[kTgSelectionWords] = kSelectionWords * 4;
    TgBytes choose = histogram;
    choose.bytes[kTgScanScratch] = scan_scratch_words(kMinSelectThreads) * 4;
    TgBytes scan_only;
    scan_only.bytes[kTgScanScratch] = scan_scratch_words(threads) * 4;

    const uint32_t bits = key_bits(problem_.dtype);
    for (uint32_t shift = bits; shift >= MTK_RADIX_BITS;) {
      shift -= MTK_RADIX_BITS;
      MtkPassParams pass{};
      pass.shift = shift;
      pass.first = shift + MTK_RADIX_BITS == bits ? 1u : 0u;
      add(MetalKernel::RadixHistogram, blocks, rows_, threads, histogram, pass);
      add(MetalKernel::RadixChoose, 1, rows_, kMinSelectThreads, choose, pass);
    }
    add(MetalKernel::SelectCount, blocks, rows_, threads, scan_only);
    const uint32_t offset_threads = threads_for(blocks, kSimdWidth);
    TgBytes offsets;
    offsets.bytes[kTgScanScratch] = scan_scratch_words(offset_threads) * 4;
    add(MetalKernel::SelectOffsets, 1, rows_, offset_threads, offsets);
    add(MetalKernel::SelectScatter, blocks, rows_, threads, scan_only);
  }

  // Sorts the k winners already in the outputs (in index order) by (key desc, index asc).
  void plan_sort() {
    const uint64_t entry = kb_ + 4;
    const size_t budget = limits_.threadgroup_memory_bytes;
    TgBytes whole;
    whole.bytes[kTgSortKeys] = sort_size_ * kb_;
    whole.bytes[kTgSortIndices] = sort_size_ * 4;
    if (sort_size_ <= limits_.sort_tile_max && whole.total() <= budget) {
      add(MetalKernel::SortRows, 1, rows_, threads_for(sort_size_ / 2, kSimdWidth), whole);
      return;
    }
    // The widest tile that fits beside the other (minimum-size) buffers.
    uint64_t tile = limits_.sort_tile_max;
    while (tile > 2 && tile * entry + 3 * kTgGranule > budget) tile >>= 1;
    TgBytes tile_bytes;
    tile_bytes.bytes[kTgSortKeys] = tile * kb_;
    tile_bytes.bytes[kTgSortIndices] = tile * 4;

    MtkTopkParams& p = plan_.params;
    p.sort_tile = static_cast<mtk_u32>(tile);
    p.ws_sort_keys = reserve(checked_mul(checked_mul(rows_, sort_size_), kb_));
    p.ws_sort_indices = reserve(checked_mul(checked_mul(rows_, sort_size_), 4));

    const uint32_t threads = limits_.max_threads;
    const uint32_t tile_threads = threads_for(tile / 2, kSimdWidth);
    const TgBytes none;
    add(MetalKernel::SortLoad, (sort_size_ + threads - 1) / threads, rows_, threads, none);
    MtkPassParams pass{};
    pass.size_lo = 2;
    pass.size_hi = static_cast<mtk_u32>(tile);
    add(MetalKernel::BitonicTile, sort_size_ / tile, rows_, tile_threads, tile_bytes, pass);
    for (uint64_t size = tile * 2; size <= sort_size_; size *= 2) {
      for (uint64_t stride = size / 2; stride >= tile; stride /= 2) {
        MtkPassParams step{};
        step.size_lo = static_cast<mtk_u32>(size);
        step.size_hi = static_cast<mtk_u32>(size);
        step.stride = static_cast<mtk_u32>(stride);
        add(MetalKernel::BitonicStep, (sort_size_ / 2 + threads - 1) / threads, rows_, threads, none, step);
      }
      MtkPassParams merge{};
      merge.size_lo = static_cast<mtk_u32>(size);
      merge.size_hi = static_cast<mtk_u32>(size);
      add(MetalKernel::BitonicTile, sort_size_ / tile, rows_, tile_threads, tile_bytes, merge);
    }
    add(MetalKernel::SortStore, (k_ + threads - 1) / threads, rows_, threads, none);
  }

  const TopkProblem& problem_;
  const RaggedProblem* ragged_;
  const MetalLimits& limits_;
  const char* suffix_;
  MetalPlan plan_{};
  uint32_t rows_ = 0;
  uint64_t n_ = 0, k_ = 0, kb_ = 0, sort_size_ = 0;
  uint64_t workspace_ = 0;
};

}  // namespace

const char* metal_kernel_name(MetalKernel kernel) {
  switch (kernel) {
    case MetalKernel::RowsShort: return "mtk_rows_short";
    case MetalKernel::RowsLong: return "mtk_rows_long";
    case MetalKernel::RadixHistogram: return "mtk_radix_histogram";
    case MetalKernel::RadixChoose: return "mtk_radix_choose";
    case MetalKernel::SelectCount: return "mtk_select_count";
    case MetalKernel::SelectOffsets: return "mtk_select_offsets";
    case MetalKernel::SelectScatter: return "mtk_select_scatter";
    case MetalKernel::SortRows: return "mtk_sort_rows";
    case MetalKernel::SortLoad: return "mtk_sort_load";
    case MetalKernel::BitonicTile: return "mtk_bitonic_tile";
    case MetalKernel::BitonicStep: return "mtk_bitonic_step";
    case MetalKernel::SortStore: return "mtk_sort_store";
    case MetalKernel::RaggedFinish: return "mtk_ragged_finish";
  }
  return "unknown";
}

MetalLimits metal_limits_for_pipelines(uint64_t pipeline_max_threads) {
  return limits_for_pipeline(pipeline_max_threads, kMinSelectThreads, "top-k");
}

void set_metal_buffer_offsets(MetalPlan& plan, mtk_dtype dtype, mtk_dtype index_dtype,
                              size_t input_bytes, size_t values_bytes, size_t indices_bytes) {
  const size_t element = require_dtype(dtype, "input").size;
  plan.params.input_base = element_offset(input_bytes, element, "input");
  plan.params.values_base = element_offset(values_bytes, element, "values");
  plan.params.indices_base = element_offset(indices_bytes, require_dtype(index_dtype, "indices").size, "indices");
}

MetalExtents metal_tensor_extents(const TopkProblem& problem) {
  const RowGeometry& g = problem.geometry;
  const size_t element = require_dtype(problem.dtype, "input").size;
  const size_t index = require_dtype(problem.index_dtype, "indices").size;
  return MetalExtents{
      extent(g.batch_sizes, g.input_batch_strides, g.batch_ndim, g.n, g.input_stride, element),
      problem.values != nullptr
          ? extent(g.batch_sizes, g.values_batch_strides, g.batch_ndim, g.k, g.values_stride, element)
          : ByteExtent{0, 0},
      extent(g.batch_sizes, g.indices_batch_strides, g.batch_ndim, g.k, g.indices_stride, index)};
}

MetalRaggedTensors metal_ragged_tensors(const RaggedProblem& problem) {
  MetalRaggedTensors t{};
  const int64_t rows = problem.dense.geometry.rows;
  const auto row_vector = [&](MetalRaggedBuffer slot, const RowVector& v) {
    if (v.data == nullptr) return;
    t.data[slot] = v.data;
    t.extents[slot] = extent(nullptr, nullptr, 0, rows, v.stride, require_dtype(v.dtype, "ragged params").size);
  };
  row_vector(kRaggedLengths, problem.lengths);
  row_vector(kRaggedStarts, problem.starts);
  row_vector(kRaggedOffsets, problem.offsets);
  row_vector(kRaggedRowToBatch, problem.row_to_batch);
  // An empty table is never read: no row has a batch in it, or no row has candidates.
  if (problem.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE && problem.page_table_batch > 0 &&
      problem.page_table_pages > 0) {
    t.data[kRaggedPageTable] = problem.page_table;
    t.extents[kRaggedPageTable] =
        extent(&problem.page_table_batch, &problem.page_table_batch_stride, 1, problem.page_table_pages,
               problem.page_table_page_stride, require_dtype(problem.page_table_dtype, "params.page_table").size);
  }
  return t;
}

void set_metal_ragged_buffer_offsets(MetalPlan& plan, const RaggedProblem& problem,
                                     const size_t (&bytes)[kMetalRaggedBuffers]) {
  const MetalRaggedTensors tensors = metal_ragged_tensors(problem);
  MtkTopkParams& p = plan.params;
  const auto base = [&](MetalRaggedBuffer slot, const RowVector& v, const char* name) {
    return tensors.data[slot] != nullptr ? element_offset(bytes[slot], require_dtype(v.dtype, name).size, name) : 0;
  };
  p.lengths.base = base(kRaggedLengths, problem.lengths, "params.lengths");
  p.starts.base = base(kRaggedStarts, problem.starts, "params.starts");
  p.offsets.base = base(kRaggedOffsets, problem.offsets, "params.offsets");
  p.row_to_batch.base = base(kRaggedRowToBatch, problem.row_to_batch, "params.row_to_batch");
  p.page_table_base =
      tensors.data[kRaggedPageTable] != nullptr
          ? element_offset(bytes[kRaggedPageTable], require_dtype(problem.page_table_dtype, "params.page_table").size,
                           "params.page_table")
          : 0;
}

void check_metal_workspace(const MetalPlan& plan, size_t bytes, size_t offset_in_buffer) {
  if (bytes < plan.workspace_bytes) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes = ", bytes, " is smaller than the ", plan.workspace_bytes,
         " bytes this problem needs");
  }
  if (offset_in_buffer % kWorkspaceAlignment != 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "workspace lies ", offset_in_buffer, " bytes into its Metal buffer; it must be ",
         kWorkspaceAlignment, "-byte aligned");
  }
}

MetalPlan make_metal_plan(const TopkProblem& problem, const MetalLimits& limits) {
  validate_limits(limits);
  return PlanBuilder(problem, nullptr, limits).build();
}

MetalPlan make_metal_ragged_plan(const RaggedProblem& problem, const MetalLimits& limits) {
  validate_limits(limits);
  return PlanBuilder(problem.dense, &problem, limits).build();
}

}  // namespace mtk
