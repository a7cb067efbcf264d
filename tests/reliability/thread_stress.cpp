// Threading stress for ThreadSanitizer: many threads share one context (its locks, scratch and
// caches under contention, and a thread resizing its pool meanwhile), then every thread owns a
// context. Calls mix shapes, dims, dtypes, k, both directions, the allocating and workspace
// variants, the router, ragged rows with every option (mtk_topk_ragged and its workspace
// variant), the sampling entries (all four, and the workspace variant), and calls that fail on
// purpose (each thread must see its own error message). Every result is checked against a
// brute-force reference, or, for the router and sampling, against the single-threaded run.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "metaltopk.h"
#include "ragged_model.hpp"

namespace {

std::atomic<int> failures{0};
std::atomic<long> calls{0};

void report(const std::string& what) {
  if (failures.fetch_add(1) < 20) std::fprintf(stderr, "FAIL %s\n", what.c_str());
}

struct DtypeCase {
  mtk_dtype dtype;
  size_t size;
  bool is_float;
};

const DtypeCase kDtypes[] = {
    {MTK_FLOAT32, 4, true}, {MTK_FLOAT64, 8, true}, {MTK_FLOAT16, 2, true},
    {MTK_BFLOAT16, 2, true}, {MTK_INT8, 1, false}, {MTK_UINT8, 1, false},
    {MTK_INT16, 2, false}, {MTK_INT32, 4, false}, {MTK_INT64, 8, false},
};

double half_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

// (is NaN, numeric value): the contract's order, with -0.0 == +0.0 for free.
struct Rank {
  bool nan;
  double value;
};

Rank rank_of(const DtypeCase& t, const unsigned char* p) {
  switch (t.dtype) {
    case MTK_FLOAT32: { float v; std::memcpy(&v, p, 4); return {std::isnan(v), v}; }
    case MTK_FLOAT64: { double v; std::memcpy(&v, p, 8); return {std::isnan(v), v}; }
    case MTK_FLOAT16: { uint16_t b; std::memcpy(&b, p, 2); double v = half_to_double(b); return {std::isnan(v), v}; }
    case MTK_BFLOAT16: {
      uint16_t b; std::memcpy(&b, p, 2);
      const uint32_t wide = static_cast<uint32_t>(b) << 16;
      float v; std::memcpy(&v, &wide, 4);
      return {std::isnan(v), v};
    }
    case MTK_INT8: return {false, static_cast<double>(static_cast<int8_t>(*p))};
    case MTK_UINT8: return {false, static_cast<double>(*p)};
    case MTK_INT16: { int16_t v; std::memcpy(&v, p, 2); return {false, static_cast<double>(v)}; }
    case MTK_INT32: { int32_t v; std::memcpy(&v, p, 4); return {false, static_cast<double>(v)}; }
    case MTK_INT64: { int64_t v; std::memcpy(&v, p, 8); return {false, static_cast<double>(v)}; }
  }
  return {false, 0.0};
}

// Tie-heavy data with NaNs of both signs, infinities and signed zeros for the float types.
// Integers stay small, so the double ranks are exact.
std::vector<unsigned char> random_data(const DtypeCase& t, size_t count, std::mt19937_64& rng) {
  std::vector<unsigned char> bytes(count * t.size);
  for (size_t i = 0; i < count; ++i) {
    const int pick = static_cast<int>(rng() % 100);
    const int small = static_cast<int>(rng() % 41) - 20;
    unsigned char* p = bytes.data() + i * t.size;
    switch (t.dtype) {
      case MTK_FLOAT32: {
        float v = pick < 3 ? NAN : pick < 5 ? -NAN : pick < 7 ? INFINITY : pick < 9 ? -0.0f
                                                                                    : small * 0.5f;
        std::memcpy(p, &v, 4);
        break;
      }
      case MTK_FLOAT64: {
        double v = pick < 3 ? NAN : pick < 5 ? -INFINITY : pick < 7 ? -0.0 : small * 0.25;
        std::memcpy(p, &v, 8);
        break;
      }
      case MTK_FLOAT16: {  // NaN with a payload, -inf, -0, or small exact values
        uint16_t v = pick < 3 ? 0x7e01 : pick < 5 ? 0xfc00 : pick < 7 ? 0x8000
                   : static_cast<uint16_t>(0x3c00 + (small & 0xf) * 0x40);
        std::memcpy(p, &v, 2);
        break;
      }
      case MTK_BFLOAT16: {
        uint16_t v = pick < 3 ? 0xffc1 : pick < 5 ? 0x7f80 : pick < 7 ? 0x8000
                   : static_cast<uint16_t>(0x3f80 + (small & 0xf) * 0x10);
        std::memcpy(p, &v, 2);
        break;
      }
      default: {
        const int64_t v = t.dtype == MTK_UINT8 ? small + 20 : small;
        std::memcpy(p, &v, t.size);  // little-endian: the low bytes hold the value
        break;
      }
    }
  }
  return bytes;
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

// One random top-k call on `ctx`, checked. `label` names the thread in failure messages.
// A CPU workspace size depends on the context's thread count, and the header forbids racing
// mtk_context_set_num_threads with other calls, so the phase that resizes the pool concurrently
// (to stress the pool itself) leaves out the workspace variant.
void random_topk(mtk_context ctx, std::mt19937_64& rng, const std::string& label,
                 bool pool_resized_concurrently) {
  const DtypeCase& t = kDtypes[rng() % (sizeof kDtypes / sizeof kDtypes[0])];
  const bool long_rows = rng() % 8 == 0;
  const int64_t a = long_rows ? 1 + rng() % 3 : 1 + rng() % 48;
  const int64_t b = long_rows ? 20000 + rng() % 60000 : 1 + rng() % 700;
  const int dim = static_cast<int>(rng() % 2);
  const int64_t n = dim == 0 ? a : b;
  const int64_t k = rng() % 4 == 0 ? n : static_cast<int64_t>(rng() % (std::min<int64_t>(n, 64) + 1));
  const int largest = static_cast<int>(rng() % 2);
  int variant = static_cast<int>(rng() % 3);  // plain, workspace, alloc
  if (variant == 1 && pool_resized_concurrently) variant = 0;
  const std::vector<unsigned char> x = random_data(t, static_cast<size_t>(a * b), rng);
  const int64_t out_a = dim == 0 ? k : a, out_b = dim == 0 ? b : k;
  const size_t out_count = static_cast<size_t>(out_a * out_b);
  std::vector<unsigned char> values(out_count * t.size);
  std::vector<int64_t> indices(out_count);
  const mtk_tensor in = matrix(const_cast<unsigned char*>(x.data()), t.dtype, a, b);
  const mtk_tensor v = matrix(values.data(), t.dtype, out_a, out_b);
  const mtk_tensor i = matrix(indices.data(), MTK_INT64, out_a, out_b);
  mtk_status status;
  if (variant == 0) {
    status = mtk_topk(ctx, &in, k, dim, largest, 1, &v, &i, nullptr);
  } else if (variant == 1) {
    size_t bytes = 0;
    status = mtk_topk_workspace_size(ctx, &in, k, dim, largest, 1, MTK_INT64, &bytes);
    std::vector<unsigned char> workspace(bytes);
    if (status == MTK_SUCCESS) {
      status = mtk_topk_with_workspace(ctx, &in, k, dim, largest, 1, &v, &i, workspace.data(),
                                       bytes, nullptr);
    }
  } else {
    mtk_tensor vo{}, io{};
    status = mtk_topk_alloc(ctx, &in, k, dim, largest, 1, MTK_INT64, &vo, &io, nullptr);
    if (status == MTK_SUCCESS) {
      if (out_count > 0) {
        std::memcpy(values.data(), vo.data, values.size());
        std::memcpy(indices.data(), io.data, indices.size() * 8);
      }
      mtk_tensor_free(ctx, &vo);
      mtk_tensor_free(ctx, &io);
    }
  }
  calls.fetch_add(1, std::memory_order_relaxed);
  const std::string what = label + " dtype " + std::to_string(t.dtype) + " [" +
                           std::to_string(a) + "x" + std::to_string(b) + "] dim " +
                           std::to_string(dim) + " k " + std::to_string(k) + " variant " +
                           std::to_string(variant);
  if (status != MTK_SUCCESS) {
    report(what + ": " + mtk_last_error_message());
    return;
  }
  const int64_t rows = dim == 0 ? b : a;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    auto offset = [&](int64_t along) { return dim == 0 ? along * b + r : r * b + along; };
    auto rank = [&](int64_t along) { return rank_of(t, x.data() + offset(along) * t.size); };
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      const Rank rp = rank(p), rq = rank(q);
      if (rp.nan != rq.nan) return largest ? rp.nan : rq.nan;
      if (rp.nan) return false;
      return largest ? rp.value > rq.value : rp.value < rq.value;
    });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t out = dim == 0 ? j * out_b + r : r * out_b + j;
      if (indices[out] != order[j] ||
          std::memcmp(values.data() + out * t.size, x.data() + offset(order[j]) * t.size,
                      t.size) != 0) {
        report(what + ": wrong result at row " + std::to_string(r) + " position " +
               std::to_string(j));
        return;
      }
    }
  }
}

bool ranks_before(const DtypeCase& t, const unsigned char* row, int largest, int64_t p,
                  int64_t q) {
  const Rank rp = rank_of(t, row + p * t.size), rq = rank_of(t, row + q * t.size);
  if (rp.nan != rq.nan) return largest ? rp.nan : rq.nan;
  if (rp.nan) return false;
  return largest ? rp.value > rq.value : rp.value < rq.value;
}

mtk_tensor vector_of(void* data, mtk_dtype dtype, int64_t size) {
  mtk_tensor v = matrix(data, dtype, size, 1);
  v.ndim = 1;
  return v;
}

// One random ragged call: windows of any length and start, either index transform, indices
// only, int32 or int64 indices; checked against ragged_model.hpp. As random_topk, the phase that
// resizes the pool concurrently leaves out the workspace variant.
void random_ragged(mtk_context ctx, std::mt19937_64& rng, const std::string& label,
                   bool pool_resized_concurrently) {
  const DtypeCase& t = kDtypes[rng() % (sizeof kDtypes / sizeof kDtypes[0])];
  const int64_t rows = 1 + static_cast<int64_t>(rng() % 24);
  const int64_t n = 1 + static_cast<int64_t>(rng() % (rng() % 8 == 0 ? 30000 : 600));
  const int64_t k = rng() % 4 == 0 ? n + static_cast<int64_t>(rng() % 5)
                                   : static_cast<int64_t>(rng() % (std::min<int64_t>(n, 80) + 1));
  const int largest = static_cast<int>(rng() % 2);
  const auto transform = static_cast<mtk_index_transform>(rng() % 3);
  const bool with_values = rng() % 2 == 0, with_starts = rng() % 2 == 0;
  const bool with_row_to_batch = rng() % 2 == 0;
  const mtk_dtype index_dtype = rng() % 2 ? MTK_INT32 : MTK_INT64;
  const int64_t page_size = 1 + static_cast<int64_t>(rng() % 7);
  const bool workspace_variant = rng() % 2 == 0 && !pool_resized_concurrently;

  const std::vector<unsigned char> x = random_data(t, static_cast<size_t>(rows * n), rng);
  std::vector<int64_t> lengths(static_cast<size_t>(rows)), offsets(lengths.size());
  std::vector<int32_t> starts(lengths.size()), row_to_batch(lengths.size());
  const int64_t batch = with_row_to_batch ? 1 + static_cast<int64_t>(rng() % rows) : rows;
  const int64_t pages = (n + page_size - 1) / page_size + static_cast<int64_t>(rng() % 2);
  std::vector<int32_t> table(static_cast<size_t>(batch * pages));
  for (size_t r = 0; r < lengths.size(); ++r) {
    lengths[r] = static_cast<int64_t>(rng() % static_cast<uint64_t>(n + 6)) - 3;
    starts[r] = static_cast<int32_t>(rng() % static_cast<uint64_t>(n + 4)) - 2;
    offsets[r] = static_cast<int64_t>(rng());  // any value: the sum wraps
    row_to_batch[r] = static_cast<int32_t>(rng() % static_cast<uint64_t>(batch + 2)) - 1;
  }
  for (int32_t& entry : table) entry = static_cast<int32_t>(rng());
  const mtk_tensor lengths_t = vector_of(lengths.data(), MTK_INT64, rows);
  const mtk_tensor starts_t = vector_of(starts.data(), MTK_INT32, rows);
  const mtk_tensor offsets_t = vector_of(offsets.data(), MTK_INT64, rows);
  const mtk_tensor row_to_batch_t = vector_of(row_to_batch.data(), MTK_INT32, rows);
  const mtk_tensor table_t = matrix(table.data(), MTK_INT32, batch, pages);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_t;
  params.starts = with_starts ? &starts_t : nullptr;
  params.transform = transform;
  if (transform == MTK_INDEX_TRANSFORM_RAGGED) params.offsets = &offsets_t;
  if (transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
    params.page_table = &table_t;
    params.page_size = page_size;
    params.row_to_batch = with_row_to_batch ? &row_to_batch_t : nullptr;
  }

  const size_t out_count = static_cast<size_t>(rows * k);
  const size_t index_size = index_dtype == MTK_INT32 ? 4 : 8;
  std::vector<unsigned char> values(out_count * t.size, 0xA5), indices(out_count * index_size);
  const mtk_tensor in = matrix(const_cast<unsigned char*>(x.data()), t.dtype, rows, n);
  const mtk_tensor v = matrix(values.data(), t.dtype, rows, k);
  const mtk_tensor i = matrix(indices.data(), index_dtype, rows, k);
  const mtk_tensor* values_out = with_values ? &v : nullptr;
  mtk_status status;
  if (workspace_variant) {
    size_t bytes = 0;
    status = mtk_topk_ragged_workspace_size(ctx, &in, k, largest, 1, &params, index_dtype,
                                            &bytes);
    std::vector<unsigned char> workspace(bytes);
    if (status == MTK_SUCCESS) {
      status = mtk_topk_ragged_with_workspace(ctx, &in, k, largest, 1, &params, values_out, &i,
                                              workspace.data(), bytes, nullptr);
    }
  } else {
    status = mtk_topk_ragged(ctx, &in, k, largest, 1, &params, values_out, &i, nullptr);
  }
  calls.fetch_add(1, std::memory_order_relaxed);
  const std::string what = label + " ragged dtype " + std::to_string(t.dtype) + " [" +
                           std::to_string(rows) + "x" + std::to_string(n) + "] k " +
                           std::to_string(k) + " transform " + std::to_string(transform) +
                           (with_values ? "" : " indices only") +
                           (workspace_variant ? " workspace" : "");
  if (status != MTK_SUCCESS) {
    report(what + ": " + mtk_last_error_message());
    return;
  }
  const std::vector<unsigned char> zero(t.size, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const unsigned char* row = x.data() + static_cast<size_t>(r * n) * t.size;
    int64_t b = r;
    if (transform == MTK_INDEX_TRANSFORM_PAGE_TABLE && with_row_to_batch) {
      b = row_to_batch[static_cast<size_t>(r)];
    }
    const bool no_table = transform == MTK_INDEX_TRANSFORM_PAGE_TABLE && (b < 0 || b >= batch);
    const ragged_model::Window w = ragged_model::window(
        n, no_table ? 0 : lengths[static_cast<size_t>(r)],
        with_starts ? starts[static_cast<size_t>(r)] : 0);
    const std::vector<int64_t> won = ragged_model::winners(
        w, k, [&](int64_t p, int64_t q) { return ranks_before(t, row, largest, p, q); });
    for (int64_t j = 0; j < k; ++j) {
      const size_t out = static_cast<size_t>(r * k + j);
      int64_t want = -1;
      const unsigned char* want_value = zero.data();
      if (j < static_cast<int64_t>(won.size())) {
        const int64_t at = won[static_cast<size_t>(j)];
        want = at;
        if (transform == MTK_INDEX_TRANSFORM_RAGGED) {
          want = ragged_model::wrapping_add(offsets[static_cast<size_t>(r)], at);
        } else if (transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
          want = ragged_model::paged(table[static_cast<size_t>(b * pages + at / page_size)],
                                     page_size, at);
        }
        want = ragged_model::stored(want, index_dtype);
        want_value = row + static_cast<size_t>(w.start + at) * t.size;
      }
      int64_t got = 0;
      if (index_size == 4) {
        int32_t narrow;
        std::memcpy(&narrow, indices.data() + out * 4, 4);
        got = narrow;
      } else {
        std::memcpy(&got, indices.data() + out * 8, 8);
      }
      const bool values_ok =
          with_values ? std::memcmp(values.data() + out * t.size, want_value, t.size) == 0
                      : values[out * t.size] == 0xA5;  // indices only: values untouched
      if (got != want || !values_ok) {
        report(what + ": wrong result at row " + std::to_string(r) + " position " +
               std::to_string(j));
        return;
      }
    }
  }
}

// A call that must fail, and the thread's own message for it.
void failing_call(mtk_context ctx, std::mt19937_64& rng, const std::string& label) {
  const int64_t k = 1000 + static_cast<int64_t>(rng() % 1000);
  float x[4] = {1, 2, 3, 4}, v[4];
  int64_t i[4];
  const mtk_tensor in = matrix(x, MTK_FLOAT32, 1, 4), vo = matrix(v, MTK_FLOAT32, 1, 4),
                   io = matrix(i, MTK_INT64, 1, 4);
  const mtk_status status = mtk_topk(ctx, &in, k, 1, 1, 1, &vo, &io, nullptr);
  const std::string expected = "k = " + std::to_string(k) + " is out of range";
  if (status != MTK_ERROR_INVALID_ARGUMENT ||
      std::string(mtk_last_error_message()).find(expected) == std::string::npos) {
    report(label + ": expected its own message \"" + expected + "\", got \"" +
           mtk_last_error_message() + "\"");
  }
}

// The router, compared bit for bit with a result computed before the threads started.
struct RouteCase {
  int64_t tokens, experts, k;
  std::vector<float> logits;
  std::vector<float> weights;
  std::vector<int32_t> ids;
};

mtk_status run_route(mtk_context ctx, RouteCase& c, std::vector<float>& weights,
                     std::vector<int32_t>& ids) {
  weights.assign(static_cast<size_t>(c.tokens * c.k), 0.0f);
  ids.assign(static_cast<size_t>(c.tokens * c.k), -1);
  const mtk_tensor l = matrix(c.logits.data(), MTK_FLOAT32, c.tokens, c.experts);
  const mtk_tensor w = matrix(weights.data(), MTK_FLOAT32, c.tokens, c.k);
  const mtk_tensor i = matrix(ids.data(), MTK_INT32, c.tokens, c.k);
  const mtk_router_params params{sizeof params, c.k, MTK_SCORING_SOFTMAX, nullptr, 0, 0, 1, 1.0f};
  return mtk_moe_route(ctx, &l, &params, &w, &i, nullptr);
}

std::vector<RouteCase> route_cases;

void random_route(mtk_context ctx, std::mt19937_64& rng, const std::string& label) {
  RouteCase& c = route_cases[rng() % route_cases.size()];
  std::vector<float> weights;
  std::vector<int32_t> ids;
  calls.fetch_add(1, std::memory_order_relaxed);
  if (run_route(ctx, c, weights, ids) != MTK_SUCCESS) {
    report(label + " moe_route: " + mtk_last_error_message());
  } else if (weights != c.weights || ids != c.ids) {
    report(label + " moe_route: result differs from the single-threaded run");
  }
}

// The sampling entries, each compared bit for bit with a result computed before the threads
// started: their results are exact, so no thread, pool size or context may change a bit.
struct SamplingCase {
  mtk_sampling_op op;
  int64_t rows, n;
  std::vector<float> input, uniforms;
  std::vector<int32_t> top_k;
  std::vector<unsigned char> expected;
};

mtk_status run_sampling(mtk_context ctx, SamplingCase& c, std::vector<unsigned char>& out,
                        bool with_workspace) {
  const bool samples = c.op == MTK_SAMPLING_SAMPLE || c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  out.assign(static_cast<size_t>(c.rows * (samples ? 1 : c.n)) * 4, 0xA5);
  const mtk_tensor in = matrix(c.input.data(), MTK_FLOAT32, c.rows, c.n);
  const mtk_tensor top_k = vector_of(c.top_k.data(), MTK_INT32, c.rows);
  const mtk_tensor u = vector_of(c.uniforms.data(), MTK_FLOAT32, c.rows);
  const mtk_tensor o = samples ? vector_of(out.data(), MTK_INT32, c.rows)
                               : matrix(out.data(), MTK_FLOAT32, c.rows, c.n);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_k = &top_k;
  if (c.op != MTK_SAMPLING_TOP_K_MASK_LOGITS) {
    params.top_p_value = 0.9f;
    params.min_p_value = 0.01f;
  }
  if (c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS) params.temperature_value = 0.7f;
  const mtk_tensor* uniforms = samples ? &u : nullptr;
  if (with_workspace) {
    size_t bytes = 0;
    const mtk_status status =
        mtk_sampling_workspace_size(ctx, c.op, &in, &params, o.dtype, &bytes);
    if (status != MTK_SUCCESS) return status;
    std::vector<unsigned char> workspace(bytes);
    return mtk_sampling_with_workspace(ctx, c.op, &in, &params, uniforms, &o, workspace.data(),
                                       bytes, nullptr);
  }
  switch (c.op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS:
      return mtk_top_k_mask_logits(ctx, &in, &params, &o, nullptr);
    case MTK_SAMPLING_RENORM_PROBS: return mtk_renorm_probs(ctx, &in, &params, &o, nullptr);
    case MTK_SAMPLING_SAMPLE: return mtk_sample(ctx, &in, &params, uniforms, &o, nullptr);
    default: return mtk_sample_from_logits(ctx, &in, &params, uniforms, &o, nullptr);
  }
}

std::vector<SamplingCase> sampling_cases;

// As random_topk, the phase that resizes the pool concurrently leaves out the workspace variant.
void random_sampling(mtk_context ctx, std::mt19937_64& rng, const std::string& label,
                     bool pool_resizes) {
  SamplingCase& c = sampling_cases[rng() % sampling_cases.size()];
  const bool with_workspace = !pool_resizes && rng() % 2 == 0;
  std::vector<unsigned char> out;
  calls.fetch_add(1, std::memory_order_relaxed);
  if (run_sampling(ctx, c, out, with_workspace) != MTK_SUCCESS) {
    report(label + " sampling op " + std::to_string(c.op) + ": " + mtk_last_error_message());
  } else if (out != c.expected) {
    report(label + " sampling op " + std::to_string(c.op) +
           ": result differs from the single-threaded run");
  }
}

void worker(mtk_context shared, int id, int iterations, bool own_context) {
  std::mt19937_64 rng(0x5eed + static_cast<uint64_t>(id) * 7919 + (own_context ? 1 : 0));
  mtk_context ctx = shared;
  if (own_context && mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) != MTK_SUCCESS) {
    report("context creation: " + std::string(mtk_last_error_message()));
    return;
  }
  const std::string label = std::string(own_context ? "own" : "shared") + " thread " +
                            std::to_string(id);
  for (int it = 0; it < iterations; ++it) {
    const int pick = static_cast<int>(rng() % 14);
    if (pick < 7) {
      random_topk(ctx, rng, label, !own_context);
    } else if (pick < 9) {
      random_ragged(ctx, rng, label, !own_context);
    } else if (pick < 11) {
      random_route(ctx, rng, label);
    } else if (pick < 13) {
      random_sampling(ctx, rng, label, !own_context);
    } else {
      failing_call(ctx, rng, label);
      mtk_cache_stats stats;
      mtk_context_cache_stats(ctx, &stats);
    }
  }
  if (own_context) mtk_context_destroy(ctx);
}

}  // namespace

int main() {
  const int kThreads = 6, kIterations = 60;
  mtk_context shared;
  if (mtk_context_create(MTK_BACKEND_CPU, 0, &shared) != MTK_SUCCESS) {
    std::fprintf(stderr, "cannot create a CPU context: %s\n", mtk_last_error_message());
    return 1;
  }
  std::mt19937_64 rng(42);
  for (auto [tokens, experts, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 8},
                                    {64, 128, 8}, {300, 512, 10}}) {
    RouteCase c{tokens, experts, k, std::vector<float>(static_cast<size_t>(tokens * experts)), {}, {}};
    for (float& l : c.logits) l = static_cast<float>(rng() % 2000) / 500.0f - 2.0f;
    if (run_route(shared, c, c.weights, c.ids) != MTK_SUCCESS) {
      std::fprintf(stderr, "reference moe_route failed: %s\n", mtk_last_error_message());
      return 1;
    }
    route_cases.push_back(std::move(c));
  }
  for (auto [op, rows, n] : {std::tuple<mtk_sampling_op, int64_t, int64_t>{
                                 MTK_SAMPLING_TOP_K_MASK_LOGITS, 3, 5000},
                             {MTK_SAMPLING_RENORM_PROBS, 16, 3000},
                             {MTK_SAMPLING_SAMPLE, 64, 2000},
                             {MTK_SAMPLING_SAMPLE_FROM_LOGITS, 1, 40000},
                             {MTK_SAMPLING_SAMPLE_FROM_LOGITS, 33, 1000}}) {
    SamplingCase c{op, rows, n, std::vector<float>(static_cast<size_t>(rows * n)),
                   std::vector<float>(static_cast<size_t>(rows)),
                   std::vector<int32_t>(static_cast<size_t>(rows)), {}};
    for (float& x : c.input) x = static_cast<float>(rng() % 4000) / 1000.0f;  // ties included
    for (float& u : c.uniforms) u = static_cast<float>(rng() % 1000) / 1000.0f;
    for (int32_t& k : c.top_k) k = static_cast<int32_t>(rng() % 300) - 10;
    if (run_sampling(shared, c, c.expected, false) != MTK_SUCCESS) {
      std::fprintf(stderr, "reference sampling op %d failed: %s\n", static_cast<int>(op),
                   mtk_last_error_message());
      return 1;
    }
    sampling_cases.push_back(std::move(c));
  }

  // Phase 1: one context shared by every thread, one of them resizing its pool meanwhile.
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, shared, t, kIterations, false);
    threads.emplace_back([shared] {
      for (int r = 0; r < 20; ++r) {
        if (mtk_context_set_num_threads(shared, 1 + r % 3) != MTK_SUCCESS) {
          report(std::string("set_num_threads: ") + mtk_last_error_message());
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
    for (std::thread& t : threads) t.join();
  }
  // Phase 2: a context per thread, created and destroyed concurrently.
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, nullptr, t, kIterations, true);
    for (std::thread& t : threads) t.join();
  }
  mtk_context_destroy(shared);
  std::printf("thread stress: %ld calls on %d threads, %d failures\n", calls.load(), kThreads,
              failures.load());
  return failures.load() == 0 ? 0 : 1;
}
