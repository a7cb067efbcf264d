#include "validate.hpp"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

#include "abi_enums.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "tensor_checks.hpp"
#include "versioned_params.hpp"

namespace mtk {
namespace {

constexpr VersionedLayout<mtk_router_params> kRouterParams{
    "mtk_router_params", "MTK_ROUTER_PARAMS_INIT",
    offsetof(mtk_router_params, k) + sizeof(mtk_router_params::k), MTK_ROUTER_PARAMS_INIT};
constexpr VersionedLayout<mtk_ragged_params> kRaggedParams{
    "mtk_ragged_params", "MTK_RAGGED_PARAMS_INIT",
    offsetof(mtk_ragged_params, lengths) + sizeof(mtk_ragged_params::lengths),
    MTK_RAGGED_PARAMS_INIT};

bool multiply_overflows(int64_t a, int64_t b, int64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
bool add_overflows(int64_t a, int64_t b, int64_t* out) { return __builtin_add_overflow(a, b, out); }

}  // namespace

CheckedTensor check_descriptor(const mtk_tensor* t, const char* name, bool data_required) {
  if (t == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, name, " is NULL");
  if (t->ndim < 0 || t->ndim > MTK_MAX_NDIM) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".ndim = ", t->ndim, " is outside [0, ", MTK_MAX_NDIM,
         "]");
  }
  CheckedTensor out;
  int64_t numel = 1;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] < 0) {
      fail(MTK_ERROR_INVALID_ARGUMENT, name, ".sizes[", d, "] = ", t->sizes[d], " is negative");
    }
    if (multiply_overflows(numel, t->sizes[d], &numel)) {
      fail(MTK_ERROR_INVALID_ARGUMENT, name, ": the product of sizes overflows int64 at sizes[", d,
           "] = ", t->sizes[d]);
    }
  }
  const int raw_dtype = abi_enum_value(t->dtype);
  out.dtype = is_known_dtype(raw_dtype) ? dtype_info(t->dtype) : nullptr;
  if (out.dtype == nullptr) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, name, ".dtype = ", raw_dtype, " is not a known mtk_dtype");
  }
  out.numel = numel;
  if (numel == 0) return out;
  if (t->data == nullptr && data_required) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".data is NULL for ", numel, " elements");
  }
  // Lowest and highest element offsets, with every product and sum checked.
  int64_t low = 0, high = 0;
  for (int d = 0; d < t->ndim; ++d) {
    int64_t reach = 0;
    if (multiply_overflows(t->sizes[d] - 1, t->strides[d], &reach)) {
      fail(MTK_ERROR_INVALID_ARGUMENT, name, ": strides[", d, "] = ", t->strides[d],
           " times sizes[", d, "] - 1 overflows int64");
    }
    if (add_overflows(reach < 0 ? low : high, reach, reach < 0 ? &low : &high)) {
      fail(MTK_ERROR_INVALID_ARGUMENT, name, ": the element extent overflows int64 at dim ", d);
    }
  }
  const int64_t item = static_cast<int64_t>(out.dtype->size);
  int64_t low_bytes = 0, high_bytes = 0;
  if (multiply_overflows(low, item, &low_bytes) || multiply_overflows(high, item, &high_bytes) ||
      add_overflows(high_bytes, item - 1, &high_bytes)) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ": the byte extent overflows int64");
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(t->data);
  out.span.empty = false;
  out.span.first = base + static_cast<uintptr_t>(low_bytes);
  out.span.last = base + static_cast<uintptr_t>(high_bytes);
  if ((low_bytes < 0 && out.span.first > base) || (high_bytes > 0 && out.span.last < base)) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ": the data address plus its extent wraps around");
  }
  return out;
}

// An output must not write one element twice: sorted by |stride|, each dim must step past the
// whole extent of the dims inside it. An empty output writes nothing, whatever its strides.
void check_no_self_overlap(const mtk_tensor& t, const char* name) {
  std::pair<uint64_t, int64_t> dims[MTK_MAX_NDIM];  // (|stride|, size)
  int count = 0;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] == 0) return;
    const int64_t stride = t.strides[d];
    const uint64_t magnitude = stride < 0 ? uint64_t{0} - static_cast<uint64_t>(stride)
                                          : static_cast<uint64_t>(stride);  // INT64_MIN too
    if (t.sizes[d] > 1) dims[count++] = {magnitude, t.sizes[d]};
  }
  // Insertion sort of at most MTK_MAX_NDIM dims. (std::sort on this array trips GCC 12's
  // -Warray-bounds, a false positive past its 16-element insertion threshold, and the router's
  // warp emulation builds this file with -Werror.)
  for (int i = 1; i < count; ++i) {
    for (int j = i; j > 0 && dims[j] < dims[j - 1]; --j) std::swap(dims[j], dims[j - 1]);
  }
  // Elements spanned by the dims inside the current one. Each dim's reach fits int64, but their
  // sum need not: 128 bits hold it.
  unsigned __int128 inner_extent = 1;
  for (int i = 0; i < count; ++i) {
    if (dims[i].first < inner_extent) {
      fail(MTK_ERROR_INVALID_ARGUMENT, name,
           " has overlapping elements (a stride of ", dims[i].first,
           " steps inside the extent of its inner dims); outputs must not alias themselves");
    }
    inner_extent += static_cast<unsigned __int128>(dims[i].first) *
                    static_cast<uint64_t>(dims[i].second - 1);
  }
}

void check_disjoint(const ByteSpan& a, const char* a_name, const ByteSpan& b, const char* b_name) {
  if (a.empty || b.empty) return;
  if (a.first <= b.last && b.first <= a.last) {
    fail(MTK_ERROR_INVALID_ARGUMENT, a_name, " and ", b_name, " overlap in memory");
  }
}

void check_output_shape(const mtk_tensor& t, const char* name, const OutputShape& expected) {
  if (t.ndim != expected.ndim) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".ndim = ", t.ndim, " does not match the expected ",
         expected.ndim);
  }
  for (int d = 0; d < expected.ndim; ++d) {
    if (t.sizes[d] != expected.sizes[d]) {
      fail(MTK_ERROR_INVALID_ARGUMENT, name, ".sizes[", d, "] = ", t.sizes[d],
           " does not match the expected ", expected.sizes[d]);
    }
  }
}

namespace {

void check_values_dtype(const mtk_tensor& values, const mtk_tensor& input) {
  if (values.dtype != input.dtype) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "values.dtype = ", dtype_name(values.dtype),
         " does not match input.dtype = ", dtype_name(input.dtype));
  }
}

// The contract allows int32 indices only for dimensions shorter than 2^31.
void check_index_dtype(mtk_dtype dtype, const char* name, int64_t dim_size) {
  if (dtype != MTK_INT64 && dtype != MTK_INT32) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".dtype = ", dtype_name(dtype),
         " must be int64 or int32");
  }
  if (dtype == MTK_INT32 && dim_size > std::numeric_limits<int32_t>::max()) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name,
         ".dtype = int32 cannot be used for a dimension of size ", dim_size,
         " (int32 indices need fewer than 2^31 elements)");
  }
}

// Batch dims of the three tensors, merged where all three are mergeable.
struct BatchDim {
  int64_t size, in, val, idx;
};

// Whether `outer` == `inner` * `count`; false where the product overflows (strides of empty
// tensors are not bounded by the descriptor checks, and stride * size may exceed the extent).
bool steps_over(int64_t outer, int64_t inner, int64_t count) {
  int64_t product;
  return !multiply_overflows(inner, count, &product) && outer == product;
}

void collapse_batch_dims(const mtk_tensor& in, const mtk_tensor& val, const mtk_tensor& idx,
                         int dim, RowGeometry& g) {
  BatchDim dims[MTK_MAX_NDIM];
  int count = 0;
  for (int d = 0; d < in.ndim; ++d) {
    if (d == dim || in.sizes[d] == 1) continue;
    BatchDim next{in.sizes[d], in.strides[d], val.strides[d], idx.strides[d]};
    if (count > 0) {
      BatchDim& outer = dims[count - 1];
      int64_t merged_size;
      if (steps_over(outer.in, next.in, next.size) && steps_over(outer.val, next.val, next.size) &&
          steps_over(outer.idx, next.idx, next.size) &&
          !multiply_overflows(outer.size, next.size, &merged_size)) {
        outer = BatchDim{merged_size, next.in, next.val, next.idx};
        continue;
      }
    }
    dims[count++] = next;
  }
  g.batch_ndim = count;
  g.rows = 1;
  for (int i = 0; i < count; ++i) {
    g.batch_sizes[i] = dims[i].size;
    g.input_batch_strides[i] = dims[i].in;
    g.values_batch_strides[i] = dims[i].val;
    g.indices_batch_strides[i] = dims[i].idx;
    // Only an empty input can overflow here (its sizes are unbounded once one is 0): 0 rows.
    if (multiply_overflows(g.rows, dims[i].size, &g.rows)) g.rows = 0;
  }
  for (int i = 0; i < count; ++i) {
    if (dims[i].size == 0) g.rows = 0;
  }
}

}  // namespace

namespace {
int check_dim_and_k(const mtk_tensor* input, int64_t k, int64_t dim) {
  const int64_t rank = input->ndim == 0 ? 1 : input->ndim;
  if (dim < -rank || dim >= rank) {
    fail(MTK_ERROR_INVALID_DIM, "dim = ", dim, " is out of range for a ", input->ndim,
         "-d input (expected ", -rank, " <= dim <= ", rank - 1, ")");
  }
  const int normalized = static_cast<int>(dim < 0 ? dim + rank : dim);
  const int64_t n = input->ndim == 0 ? 1 : input->sizes[normalized];
  if (k < 0 || k > n) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "k = ", k, " is out of range for a dimension of size ", n,
         " (expected 0 <= k <= ", n, ")");
  }
  return normalized;
}
}  // namespace

int validate_input_dim_k(const mtk_tensor* input, int64_t k, int64_t dim) {
  check_descriptor(input, "input");
  return check_dim_and_k(input, k, dim);
}

OutputShape topk_output_shape(const mtk_tensor& input, int64_t k, int normalized_dim) {
  OutputShape shape{input.ndim, {}};
  for (int d = 0; d < input.ndim; ++d) shape.sizes[d] = d == normalized_dim ? k : input.sizes[d];
  return shape;
}

TopkProblem make_topk_problem(const mtk_tensor* input, int64_t k, int64_t dim, int largest,
                              int sorted, const mtk_tensor* values, const mtk_tensor* indices,
                              OutputMemory outputs) {
  const CheckedTensor in = check_descriptor(input, "input");
  const int d = check_dim_and_k(input, k, dim);
  const bool provided = outputs == OutputMemory::CallerProvided;
  // NULL values: indices only. The checks keep one order with or without them.
  const bool with_values = values != nullptr;
  const CheckedTensor val = with_values ? check_descriptor(values, "values", provided)
                                        : CheckedTensor{};
  const CheckedTensor idx = check_descriptor(indices, "indices", provided);
  const OutputShape shape = topk_output_shape(*input, k, d);
  if (with_values) check_output_shape(*values, "values", shape);
  check_output_shape(*indices, "indices", shape);
  if (with_values) check_values_dtype(*values, *input);
  const int64_t n = input->ndim == 0 ? 1 : input->sizes[d];
  check_index_dtype(indices->dtype, "indices", n);
  if (with_values) check_no_self_overlap(*values, "values");
  check_no_self_overlap(*indices, "indices");
  if (provided) {
    check_disjoint(val.span, "values", in.span, "input");
    check_disjoint(idx.span, "indices", in.span, "input");
    check_disjoint(val.span, "values", idx.span, "indices");
  }

  TopkProblem p{};
  p.dtype = input->dtype;
  p.index_dtype = indices->dtype;
  p.largest = largest != 0;
  p.sorted = sorted != 0;
  p.input = input->data;
  p.values = values != nullptr ? values->data : nullptr;
  p.indices = indices->data;
  RowGeometry& g = p.geometry;
  g.n = n;
  // A 0-d input's outputs are 0-d too: they hold the element even for k = 0 (torch's rule).
  g.k = input->ndim == 0 ? 1 : k;
  if (input->ndim > 0) {
    g.input_stride = input->strides[d];
    // Without values, the indices' layout stands in for theirs: no batch dim merge then
    // depends on a tensor that is not there.
    const mtk_tensor& values_layout = values != nullptr ? *values : *indices;
    g.values_stride = values_layout.strides[d];
    g.indices_stride = indices->strides[d];
    collapse_batch_dims(*input, values_layout, *indices, d, g);
  }
  return p;
}

namespace {

void require_index_tensor_dtype(const mtk_tensor& t, const char* name) {
  if (t.dtype != MTK_INT32 && t.dtype != MTK_INT64) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, name, ".dtype = ", dtype_name(t.dtype),
         " must be int32 or int64");
  }
}

// An int32 or int64 tensor of one entry per row of the input.
RowVector check_row_vector(const mtk_tensor* t, const char* name, int64_t rows, ByteSpan* span) {
  const CheckedTensor checked = check_descriptor(t, name);
  require_index_tensor_dtype(*t, name);
  if (t->ndim != 1) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".ndim = ", t->ndim, " must be 1 ([rows])");
  }
  if (t->sizes[0] != rows) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, ".sizes[0] = ", t->sizes[0],
         " does not match the input's ", rows, " rows");
  }
  *span = checked.span;
  return RowVector{t->data, t->dtype, t->strides[0]};
}

// A tensor of params that the chosen transform does not read is a caller's mistake (most
// likely a transform left unset), not something to ignore.
void require_unused(const mtk_tensor* t, const char* name, const char* transform) {
  if (t != nullptr) {
    fail(MTK_ERROR_INVALID_ARGUMENT, name, " is set but params.transform is not ", transform);
  }
}

}  // namespace

RaggedProblem make_ragged_problem(const mtk_tensor* input, int64_t k, int largest, int sorted,
                                  const mtk_ragged_params* given_params, const mtk_tensor* values,
                                  const mtk_tensor* indices, OutputMemory outputs) {
  const CheckedTensor in = check_descriptor(input, "input");
  if (input->ndim != 2) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "input.ndim = ", input->ndim, " must be 2 ([rows, n])");
  }
  if (k < 0) fail(MTK_ERROR_INVALID_ARGUMENT, "k = ", k, " is negative (expected k >= 0)");
  const mtk_ragged_params params = read_versioned_params(given_params, "params", kRaggedParams);
  const int64_t rows = input->sizes[0], n = input->sizes[1];

  constexpr int kParamTensors = 5;
  ByteSpan param_spans[kParamTensors];
  const char* param_names[kParamTensors] = {"params.lengths", "params.starts", "params.offsets",
                                            "params.page_table", "params.row_to_batch"};
  RaggedProblem p{};
  p.lengths = check_row_vector(params.lengths, "params.lengths", rows, &param_spans[0]);
  if (params.starts != nullptr) {
    p.starts = check_row_vector(params.starts, "params.starts", rows, &param_spans[1]);
  }
  const int transform = abi_enum_value(params.transform);
  switch (transform) {
    case MTK_INDEX_TRANSFORM_NONE:
      require_unused(params.offsets, "params.offsets", "MTK_INDEX_TRANSFORM_RAGGED");
      require_unused(params.page_table, "params.page_table", "MTK_INDEX_TRANSFORM_PAGE_TABLE");
      require_unused(params.row_to_batch, "params.row_to_batch", "MTK_INDEX_TRANSFORM_PAGE_TABLE");
      break;
    case MTK_INDEX_TRANSFORM_RAGGED:
      if (params.offsets == nullptr) {
        fail(MTK_ERROR_INVALID_ARGUMENT,
             "params.offsets is NULL but params.transform is MTK_INDEX_TRANSFORM_RAGGED");
      }
      p.offsets = check_row_vector(params.offsets, "params.offsets", rows, &param_spans[2]);
      require_unused(params.page_table, "params.page_table", "MTK_INDEX_TRANSFORM_PAGE_TABLE");
      require_unused(params.row_to_batch, "params.row_to_batch", "MTK_INDEX_TRANSFORM_PAGE_TABLE");
      break;
    case MTK_INDEX_TRANSFORM_PAGE_TABLE: {
      require_unused(params.offsets, "params.offsets", "MTK_INDEX_TRANSFORM_RAGGED");
      const mtk_tensor* table = params.page_table;
      if (table == nullptr) {
        fail(MTK_ERROR_INVALID_ARGUMENT,
             "params.page_table is NULL but params.transform is MTK_INDEX_TRANSFORM_PAGE_TABLE");
      }
      param_spans[3] = check_descriptor(table, "params.page_table").span;
      require_index_tensor_dtype(*table, "params.page_table");
      if (table->ndim != 2) {
        fail(MTK_ERROR_INVALID_ARGUMENT, "params.page_table.ndim = ", table->ndim,
             " must be 2 ([batch, pages])");
      }
      if (params.page_size < 1) {
        fail(MTK_ERROR_INVALID_ARGUMENT, "params.page_size = ", params.page_size,
             " must be at least 1");
      }
      // Every window index (< n) must find its page in the table.
      const int64_t pages_needed = n / params.page_size + (n % params.page_size != 0);
      if (table->sizes[1] < pages_needed) {
        fail(MTK_ERROR_INVALID_ARGUMENT, "params.page_table.sizes[1] = ", table->sizes[1],
             " pages of ", params.page_size, " cannot hold a row of ", n, " (", pages_needed,
             " pages needed)");
      }
      if (params.row_to_batch != nullptr) {
        p.row_to_batch =
            check_row_vector(params.row_to_batch, "params.row_to_batch", rows, &param_spans[4]);
      } else if (table->sizes[0] < rows) {
        fail(MTK_ERROR_INVALID_ARGUMENT, "params.page_table.sizes[0] = ", table->sizes[0],
             " has fewer batches than the input's ", rows,
             " rows, and params.row_to_batch is NULL (row r reads batch r)");
      }
      p.page_table = table->data;
      p.page_table_dtype = table->dtype;
      p.page_table_batch = table->sizes[0];
      p.page_table_pages = table->sizes[1];
      p.page_table_batch_stride = table->strides[0];
      p.page_table_page_stride = table->strides[1];
      p.page_size = params.page_size;
      break;
    }
    default:
      fail(MTK_ERROR_INVALID_ARGUMENT, "params.transform = ", transform,
           " is not a known mtk_index_transform");
  }
  p.transform = params.transform;

  const bool provided = outputs == OutputMemory::CallerProvided;
  const bool with_values = values != nullptr;  // NULL values: indices only
  const CheckedTensor val = with_values ? check_descriptor(values, "values", provided)
                                        : CheckedTensor{};
  const CheckedTensor idx = check_descriptor(indices, "indices", provided);
  const OutputShape shape{2, {rows, k}};
  if (with_values) check_output_shape(*values, "values", shape);
  check_output_shape(*indices, "indices", shape);
  if (with_values) check_values_dtype(*values, *input);
  check_index_dtype(indices->dtype, "indices", n);
  if (with_values) check_no_self_overlap(*values, "values");
  check_no_self_overlap(*indices, "indices");
  if (provided) {
    check_disjoint(val.span, "values", in.span, "input");
    check_disjoint(idx.span, "indices", in.span, "input");
    check_disjoint(val.span, "values", idx.span, "indices");
    for (int i = 0; i < kParamTensors; ++i) {
      check_disjoint(val.span, "values", param_spans[i], param_names[i]);
      check_disjoint(idx.span, "indices", param_spans[i], param_names[i]);
    }
  }

  TopkProblem& dense = p.dense;
  dense.dtype = input->dtype;
  dense.index_dtype = indices->dtype;
  dense.largest = largest != 0;
  dense.sorted = sorted != 0;
  dense.input = input->data;
  dense.values = with_values ? values->data : nullptr;
  dense.indices = indices->data;
  RowGeometry& g = dense.geometry;
  g.n = n;
  g.k = k;
  g.rows = rows;
  g.batch_ndim = 1;
  g.batch_sizes[0] = rows;
  // An empty input is read nowhere and any strides describe it: they stay out of the geometry,
  // where a row's offset could overflow (its rows still write their padding).
  const bool input_empty = rows == 0 || n == 0;
  g.input_batch_strides[0] = input_empty ? 0 : input->strides[0];
  g.values_batch_strides[0] = with_values ? values->strides[0] : 0;
  g.indices_batch_strides[0] = indices->strides[0];
  g.input_stride = input_empty ? 0 : input->strides[1];
  g.values_stride = with_values ? values->strides[1] : 0;
  g.indices_stride = indices->strides[1];
  return p;
}

RouterProblem make_router_problem(const mtk_tensor* logits, const mtk_router_params* given_params,
                                  const mtk_tensor* weights, const mtk_tensor* ids) {
  const CheckedTensor lg = check_descriptor(logits, "logits");
  if (logits->ndim != 2) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "logits.ndim = ", logits->ndim, " must be 2 ([tokens, experts])");
  }
  if (logits->dtype != MTK_FLOAT32 && logits->dtype != MTK_FLOAT16 &&
      logits->dtype != MTK_BFLOAT16) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, "logits.dtype = ", dtype_name(logits->dtype),
         " is not float32, float16 or bfloat16");
  }
  const mtk_router_params params = read_versioned_params(given_params, "params", kRouterParams);
  const int64_t tokens = logits->sizes[0], experts = logits->sizes[1];
  if (experts < 1) fail(MTK_ERROR_INVALID_ARGUMENT, "logits.sizes[1] = ", experts, " has no experts");
  if (params.k < 1 || params.k > experts) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "params.k = ", params.k, " is out of range for ", experts,
         " experts (expected 1 <= k <= ", experts, ")");
  }
  const int scoring = abi_enum_value(params.scoring);
  if (scoring != MTK_SCORING_SOFTMAX && scoring != MTK_SCORING_SIGMOID &&
      scoring != MTK_SCORING_NONE) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "params.scoring = ", scoring, " is not a known mtk_scoring");
  }
  int64_t n_group = params.n_group, topk_group = params.topk_group;
  if (n_group < 0) fail(MTK_ERROR_INVALID_ARGUMENT, "params.n_group = ", n_group, " is negative");
  if (n_group <= 1) {
    n_group = 1;
    topk_group = 1;
  } else {
    if (experts % n_group != 0) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "params.n_group = ", n_group, " does not divide ", experts,
           " experts");
    }
    if (topk_group < 1 || topk_group > n_group) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "params.topk_group = ", topk_group,
           " is out of range (expected 1 <= topk_group <= n_group = ", n_group, ")");
    }
    if (params.k > topk_group * (experts / n_group)) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "params.k = ", params.k, " exceeds the ",
           topk_group * (experts / n_group), " experts of the ", topk_group, " kept groups");
    }
  }
  CheckedTensor bias_span;
  if (params.bias != nullptr) {
    bias_span = check_descriptor(params.bias, "params.bias");
    if (params.bias->ndim != 1 || params.bias->sizes[0] != experts) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "params.bias must have shape [", experts, "]");
    }
    if (params.bias->dtype != MTK_FLOAT32) {
      fail(MTK_ERROR_UNSUPPORTED_DTYPE, "params.bias.dtype = ", dtype_name(params.bias->dtype),
           " must be float32");
    }
  }
  const CheckedTensor w = check_descriptor(weights, "weights");
  const CheckedTensor id = check_descriptor(ids, "ids");
  const OutputShape shape{2, {tokens, params.k}};
  check_output_shape(*weights, "weights", shape);
  check_output_shape(*ids, "ids", shape);
  if (weights->dtype != MTK_FLOAT32) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "weights.dtype = ", dtype_name(weights->dtype),
         " must be float32");
  }
  check_index_dtype(ids->dtype, "ids", experts);
  check_no_self_overlap(*weights, "weights");
  check_no_self_overlap(*ids, "ids");
  check_disjoint(w.span, "weights", lg.span, "logits");
  check_disjoint(id.span, "ids", lg.span, "logits");
  check_disjoint(w.span, "weights", id.span, "ids");
  check_disjoint(w.span, "weights", bias_span.span, "params.bias");
  check_disjoint(id.span, "ids", bias_span.span, "params.bias");

  RouterProblem p{};
  p.dtype = logits->dtype;
  p.index_dtype = ids->dtype;
  p.tokens = tokens;
  p.experts = experts;
  p.k = params.k;
  p.scoring = params.scoring;
  p.n_group = n_group;
  p.topk_group = topk_group;
  p.renormalize = params.renormalize != 0;
  p.scale = params.scale;
  p.logits = logits->data;
  p.logits_token_stride = logits->strides[0];
  p.logits_expert_stride = logits->strides[1];
  p.bias = params.bias != nullptr ? static_cast<const float*>(params.bias->data) : nullptr;
  p.bias_stride = params.bias != nullptr ? params.bias->strides[0] : 0;
  p.weights = static_cast<float*>(weights->data);
  p.weights_token_stride = weights->strides[0];
  p.weights_k_stride = weights->strides[1];
  p.ids = ids->data;
  p.ids_token_stride = ids->strides[0];
  p.ids_k_stride = ids->strides[1];
  return p;
}

}  // namespace mtk
