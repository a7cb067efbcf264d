// Fault-injection sweep: for every backend available, every entry point that allocates or runs
// work, and every kind of failure point, make the 1st, 2nd, ... failure point fail until the
// call runs clean. Each injected failure must surface as its documented status and message,
// leave caller-provided outputs byte-for-byte untouched, leave the allocating variant's outputs
// NULL, and leak nothing (the library's live-allocation counter, and LeakSanitizer when built
// with it). The clean run at the end of each sweep must give the correct result (for a call a
// backend refuses, its documented refusal).
//
// Besides the library's own failure points, a fifth kind fails every host allocation the call
// makes through operator new (std containers, strings, std::function, anything), by replacing
// operator new in this program: the library's calls bind to it. ASan builds skip that kind,
// as ASan owns operator new there.
//
// Every sweep runs twice: on a fresh context (scratch not yet allocated, so its allocation
// points are reached; the counter is checked after the context is destroyed) and on a warmed
// context (scratch cached; the counter must not move across the failed call, which catches
// caller-visible memory a failed call forgot in the context).
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <vector>

#include "metaltopk.h"
#include "metaltopk_testing.h"
#include "ragged_model.hpp"

// clang says so through __has_feature, GCC (before 14) only through __SANITIZE_*__.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MTK_SWEEP_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MTK_SWEEP_SANITIZED 1
#endif
#if !defined(MTK_SWEEP_SANITIZED)
#define MTK_SWEEP_OPERATOR_NEW 1
#endif

namespace {

// The operator-new failure point: while armed, the `target`-th allocation throws.
std::atomic<bool> new_armed{false};
std::atomic<uint64_t> new_seen{0}, new_target{0};

}  // namespace

#if defined(MTK_SWEEP_OPERATOR_NEW)
void* operator new(size_t bytes) {
  if (new_armed.load(std::memory_order_relaxed) &&
      new_seen.fetch_add(1, std::memory_order_relaxed) + 1 ==
          new_target.load(std::memory_order_relaxed)) {
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(bytes != 0 ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif

namespace {

int failures = 0;

void report(const std::string& where, const std::string& what) {
  ++failures;
  std::fprintf(stderr, "FAIL %s: %s\n", where.c_str(), what.c_str());
}

constexpr unsigned char kSentinel = 0x5A;

struct SiteKind {
  unsigned mask;  // 0: every operator new (see the top of this file)
  const char* name;
  mtk_status status;
  const char* message_part;
};

const SiteKind kSiteKinds[] = {
    {MTK_FAULT_HOST_ALLOCATION, "host-alloc", MTK_ERROR_OUT_OF_MEMORY, "host allocation failed"},
    {MTK_FAULT_DEVICE_ALLOCATION, "device-alloc", MTK_ERROR_OUT_OF_MEMORY, "injected fault"},
    {MTK_FAULT_DEVICE_CALL, "device-call", MTK_ERROR_DEVICE, "injected fault"},
    {MTK_FAULT_ENCODE_STEP, "encode", MTK_ERROR_DEVICE, "injected fault"},
#if defined(MTK_SWEEP_OPERATOR_NEW)
    {0, "operator-new", MTK_ERROR_OUT_OF_MEMORY, "host allocation failed"},
#endif
};

// Device memory from the context under test, freed on scope exit; filled and read through
// mtk_memcpy so the same code serves every backend.
class DeviceBuffer {
 public:
  DeviceBuffer(mtk_context ctx, size_t bytes) : ctx_(ctx), bytes_(bytes) {
    if (mtk_malloc(ctx, bytes, &ptr_) != MTK_SUCCESS) {
      std::fprintf(stderr, "mtk_malloc(%zu) failed: %s\n", bytes, mtk_last_error_message());
      std::abort();
    }
  }
  ~DeviceBuffer() { mtk_free(ctx_, ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  void upload(const void* host) const { copy(ptr_, host, MTK_COPY_HOST_TO_DEVICE); }
  void fill_sentinel() const {
    const std::vector<unsigned char> pattern(bytes_, kSentinel);
    upload(pattern.data());
  }
  std::vector<unsigned char> download() const {
    std::vector<unsigned char> host(bytes_);
    copy(host.data(), ptr_, MTK_COPY_DEVICE_TO_HOST);
    return host;
  }

 private:
  void copy(void* dst, const void* src, mtk_copy_kind kind) const {
    if (mtk_memcpy(ctx_, dst, src, bytes_, kind, nullptr) != MTK_SUCCESS ||
        mtk_synchronize(ctx_, nullptr) != MTK_SUCCESS) {
      std::fprintf(stderr, "copy failed: %s\n", mtk_last_error_message());
      std::abort();
    }
  }

  mtk_context ctx_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

bool all_sentinel(const std::vector<unsigned char>& bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](unsigned char b) { return b == kSentinel; });
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

// The outcome of one call as the sweep sees it.
struct Outcome {
  mtk_status status;
  std::string message;
  bool outputs_untouched;   // every caller-provided output byte still the sentinel
  bool alloc_outputs_null;  // mtk_topk_alloc's outputs NULL (true for other variants)
  bool result_correct;      // only meaningful on success
};

// Arms the failure points around exactly the call under test (setup and checks run unarmed) and
// records what the call did meanwhile. A mask of 0 runs the call clean.
class Injector {
 public:
  // n = 0: a clean run.
  Injector(unsigned mask, uint64_t n) : mask_(mask), n_(n) {}
  void arm() {
    live_before_ = mtk_testing_live_allocations();
    if (n_ == 0) return;
    if (mask_ != 0) {
      mtk_testing_fail_at(mask_, n_);
    } else {
      new_seen.store(0, std::memory_order_relaxed);
      new_target.store(n_, std::memory_order_relaxed);
      new_armed.store(true, std::memory_order_relaxed);
    }
  }
  void disarm() {
    if (n_ != 0) {
      points_seen_ = mask_ != 0 ? mtk_testing_failure_points_seen()
                                : new_seen.load(std::memory_order_relaxed);
    }
    new_armed.store(false, std::memory_order_relaxed);
    mtk_testing_reset();
    live_after_ = mtk_testing_live_allocations();
  }
  // Whether the n-th failure point was reached (and so failed).
  bool injected() const { return n_ != 0 && points_seen_ >= n_; }
  int64_t live_before() const { return live_before_; }
  int64_t live_after() const { return live_after_; }

 private:
  unsigned mask_;
  uint64_t n_;
  uint64_t points_seen_ = 0;
  int64_t live_before_ = 0, live_after_ = 0;
};

// One entry point on one problem: sets up its buffers on `ctx`, runs the call between
// injector.arm() and injector.disarm(), and checks what it can.
using Scenario = std::function<Outcome(mtk_context ctx, Injector& injector)>;

// ---- top-k ---------------------------------------------------------------------------------

struct TopkShape {
  int64_t a, b;  // input [a, b]
  int64_t k, dim;
  int largest;
};

// Ragged: mtk_topk_ragged with every length n (rows along the last dim only), whose result is
// the plain top-k's.
enum class TopkVariant { Plain, WithWorkspace, Alloc, Ragged, RaggedWithWorkspace };

// Distinct values per row: a permutation of 0..n-1 along dim, so the expected result is exact.
std::vector<float> topk_input(const TopkShape& s) {
  std::vector<float> x(static_cast<size_t>(s.a * s.b));
  const int64_t n = s.dim == 0 ? s.a : s.b;
  for (int64_t i = 0; i < s.a; ++i)
    for (int64_t j = 0; j < s.b; ++j) {
      const int64_t along = s.dim == 0 ? i : j, across = s.dim == 0 ? j : i;
      x[i * s.b + j] = static_cast<float>((along * 7919 + across * 13) % n);
    }
  return x;
}

bool topk_result_correct(const TopkShape& s, const std::vector<float>& x, const float* values,
                         const int64_t* indices) {
  const int64_t n = s.dim == 0 ? s.a : s.b, rows = s.dim == 0 ? s.b : s.a;
  const int64_t out_cols = s.dim == 0 ? s.b : s.k;
  for (int64_t r = 0; r < rows; ++r) {
    auto at = [&](int64_t along) { return s.dim == 0 ? x[along * s.b + r] : x[r * s.b + along]; };
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      return s.largest ? at(p) > at(q) : at(p) < at(q);
    });
    for (int64_t j = 0; j < s.k; ++j) {
      const int64_t out = s.dim == 0 ? j * out_cols + r : r * out_cols + j;
      if (indices[out] != order[j] || values[out] != at(order[j])) return false;
    }
  }
  return true;
}

Scenario topk_scenario(TopkShape s, TopkVariant variant) {
  return [s, variant](mtk_context ctx, Injector& injector) {
    const std::vector<float> x = topk_input(s);
    const int64_t out_a = s.dim == 0 ? s.k : s.a, out_b = s.dim == 0 ? s.b : s.k;
    const size_t out_count = static_cast<size_t>(out_a * out_b);
    DeviceBuffer input(ctx, x.size() * sizeof(float));
    input.upload(x.data());
    const mtk_tensor in = matrix(input.get(), MTK_FLOAT32, s.a, s.b);
    Outcome o{MTK_SUCCESS, "", true, true, false};
    std::vector<unsigned char> values_bytes, indices_bytes;

    if (variant == TopkVariant::Alloc) {
      mtk_tensor values{}, indices{};
      injector.arm();
      o.status = mtk_topk_alloc(ctx, &in, s.k, s.dim, s.largest, 1, MTK_INT64, &values, &indices,
                                nullptr);
      injector.disarm();
      o.message = mtk_last_error_message();
      o.alloc_outputs_null = values.data == nullptr && indices.data == nullptr;
      if (o.status == MTK_SUCCESS) {
        std::vector<float> v(out_count);
        std::vector<int64_t> idx(out_count);
        mtk_memcpy(ctx, v.data(), values.data, out_count * sizeof(float), MTK_COPY_DEVICE_TO_HOST,
                   nullptr);
        mtk_memcpy(ctx, idx.data(), indices.data, out_count * 8, MTK_COPY_DEVICE_TO_HOST, nullptr);
        mtk_synchronize(ctx, nullptr);
        o.result_correct = topk_result_correct(s, x, v.data(), idx.data());
        mtk_tensor_free(ctx, &values);
        mtk_tensor_free(ctx, &indices);
      }
      return o;
    }

    DeviceBuffer values(ctx, out_count * sizeof(float)), indices(ctx, out_count * 8);
    values.fill_sentinel();
    indices.fill_sentinel();
    const mtk_tensor v = matrix(values.get(), MTK_FLOAT32, out_a, out_b);
    const mtk_tensor i = matrix(indices.get(), MTK_INT64, out_a, out_b);
    if (variant == TopkVariant::Plain) {
      injector.arm();
      o.status = mtk_topk(ctx, &in, s.k, s.dim, s.largest, 1, &v, &i, nullptr);
      injector.disarm();
      o.message = mtk_last_error_message();
    } else if (variant == TopkVariant::Ragged || variant == TopkVariant::RaggedWithWorkspace) {
      const std::vector<int64_t> full_rows(static_cast<size_t>(s.a), s.b);
      DeviceBuffer lengths(ctx, full_rows.size() * sizeof(int64_t));
      lengths.upload(full_rows.data());
      mtk_tensor lengths_t = matrix(lengths.get(), MTK_INT64, s.a, 1);
      lengths_t.ndim = 1;
      mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
      params.lengths = &lengths_t;
      size_t bytes = 0;
      const bool with_workspace = variant == TopkVariant::RaggedWithWorkspace;
      if (with_workspace) {
        mtk_topk_ragged_workspace_size(ctx, &in, s.k, s.largest, 1, &params, MTK_INT64, &bytes);
      }
      DeviceBuffer workspace(ctx, bytes);
      injector.arm();
      o.status = with_workspace
                     ? mtk_topk_ragged_with_workspace(ctx, &in, s.k, s.largest, 1, &params, &v,
                                                      &i, workspace.get(), bytes, nullptr)
                     : mtk_topk_ragged(ctx, &in, s.k, s.largest, 1, &params, &v, &i, nullptr);
      injector.disarm();
      o.message = mtk_last_error_message();
    } else {
      size_t bytes = 0;
      mtk_topk_workspace_size(ctx, &in, s.k, s.dim, s.largest, 1, MTK_INT64, &bytes);
      DeviceBuffer workspace(ctx, bytes);
      injector.arm();
      o.status = mtk_topk_with_workspace(ctx, &in, s.k, s.dim, s.largest, 1, &v, &i,
                                         workspace.get(), bytes, nullptr);
      // Disarmed while the workspace lives: its mtk_free is the test's, not the call's, and
      // clears the message.
      injector.disarm();
      o.message = mtk_last_error_message();
    }
    mtk_synchronize(ctx, nullptr);
    values_bytes = values.download();
    indices_bytes = indices.download();
    o.outputs_untouched = all_sentinel(values_bytes) && all_sentinel(indices_bytes);
    if (o.status == MTK_SUCCESS) {
      o.result_correct =
          topk_result_correct(s, x, reinterpret_cast<const float*>(values_bytes.data()),
                              reinterpret_cast<const int64_t*>(indices_bytes.data()));
    }
    return o;
  };
}

// ---- ragged rows with their options ---------------------------------------------------------

// mtk_topk_ragged's own options: windows of every kind (empty, short, clipped, past the end),
// starts, both index transforms, indices only, int32 indices; and its workspace-size query.
enum class RaggedVariant { Plain, WithWorkspace, WorkspaceSize };

struct RaggedShape {
  int64_t rows, n, k;
  int largest;
  mtk_index_transform transform;
  bool starts, values, row_to_batch;
  mtk_dtype index_dtype;
  int64_t page_size = 1;
};

// Row r's length and start: the edge cases first, then spread out.
int64_t ragged_length(const RaggedShape& s, int64_t r) {
  const int64_t edges[] = {s.n, 0, s.k - 1, s.k + 3, -2, s.n + 5, 1};
  return r < 7 ? edges[r] : (r * 37) % (s.n + 1);
}
int64_t ragged_start(const RaggedShape& s, int64_t r) {
  return s.starts ? (r * 11) % (s.n + 3) - 1 : 0;
}

// The page table [batch, pages] and row_to_batch of a PAGE_TABLE shape.
struct PageTable {
  int64_t batch, pages;
  std::vector<int32_t> entries, row_to_batch;
};

PageTable page_table_of(const RaggedShape& s) {
  PageTable t;
  t.pages = (s.n + s.page_size - 1) / s.page_size + 1;
  t.batch = s.row_to_batch ? s.rows / 2 + 1 : s.rows;
  for (int64_t e = 0; e < t.batch * t.pages; ++e) {
    t.entries.push_back(static_cast<int32_t>(e * 5 + 1));
  }
  if (s.row_to_batch) {
    for (int64_t r = 0; r < s.rows; ++r) {
      t.row_to_batch.push_back(r % 5 == 4 ? -1 : static_cast<int32_t>((r * 3) % (t.batch + 1)));
    }
  }
  return t;
}

int64_t ragged_offset(int64_t r) { return r * 100003 - 7; }

// Indices [rows, k] and values [rows, k] (their bits) the contract gives; distinct values per
// row (topk_input's), so the order is exact.
void ragged_expected(const RaggedShape& s, const std::vector<float>& x, const PageTable& table,
                     std::vector<int64_t>& indices, std::vector<float>& values) {
  indices.assign(static_cast<size_t>(s.rows * s.k), -1);
  values.assign(static_cast<size_t>(s.rows * s.k), 0.0f);
  for (int64_t r = 0; r < s.rows; ++r) {
    const float* row = x.data() + r * s.n;
    int64_t batch = r;
    if (s.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE && s.row_to_batch) {
      batch = table.row_to_batch[static_cast<size_t>(r)];
      if (batch < 0 || batch >= table.batch) continue;  // no page table: all padding
    }
    const ragged_model::Window w =
        ragged_model::window(s.n, ragged_length(s, r), ragged_start(s, r));
    const std::vector<int64_t> won = ragged_model::winners(w, s.k, [&](int64_t p, int64_t q) {
      return s.largest ? row[p] > row[q] : row[p] < row[q];
    });
    for (size_t j = 0; j < won.size(); ++j) {
      const int64_t i = won[j];
      int64_t index = i;
      if (s.transform == MTK_INDEX_TRANSFORM_RAGGED) {
        index = ragged_model::wrapping_add(ragged_offset(r), i);
      } else if (s.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
        index = ragged_model::paged(table.entries[static_cast<size_t>(batch * table.pages +
                                                                      i / s.page_size)],
                                    s.page_size, i);
      }
      indices[static_cast<size_t>(r * s.k) + j] = ragged_model::stored(index, s.index_dtype);
      values[static_cast<size_t>(r * s.k) + j] = row[w.start + i];
    }
  }
}

mtk_tensor vector_of(void* data, mtk_dtype dtype, int64_t size) {
  mtk_tensor t = matrix(data, dtype, size, 1);
  t.ndim = 1;
  return t;
}

Scenario ragged_scenario(RaggedShape s, RaggedVariant variant) {
  return [s, variant](mtk_context ctx, Injector& injector) {
    const std::vector<float> x = topk_input({s.rows, s.n, s.k, -1, s.largest});
    const PageTable table = page_table_of(s);
    std::vector<int64_t> lengths, starts, offsets;
    for (int64_t r = 0; r < s.rows; ++r) {
      lengths.push_back(ragged_length(s, r));
      starts.push_back(ragged_start(s, r));
      offsets.push_back(ragged_offset(r));
    }
    DeviceBuffer input(ctx, x.size() * sizeof(float));
    DeviceBuffer lengths_dev(ctx, lengths.size() * 8), starts_dev(ctx, starts.size() * 8),
        offsets_dev(ctx, offsets.size() * 8), table_dev(ctx, table.entries.size() * 4),
        row_to_batch_dev(ctx, std::max<size_t>(table.row_to_batch.size(), 1) * 4);
    input.upload(x.data());
    lengths_dev.upload(lengths.data());
    starts_dev.upload(starts.data());
    offsets_dev.upload(offsets.data());
    table_dev.upload(table.entries.data());
    if (s.row_to_batch) row_to_batch_dev.upload(table.row_to_batch.data());
    const mtk_tensor in = matrix(input.get(), MTK_FLOAT32, s.rows, s.n);
    const mtk_tensor lengths_t = vector_of(lengths_dev.get(), MTK_INT64, s.rows);
    const mtk_tensor starts_t = vector_of(starts_dev.get(), MTK_INT64, s.rows);
    const mtk_tensor offsets_t = vector_of(offsets_dev.get(), MTK_INT64, s.rows);
    const mtk_tensor table_t = matrix(table_dev.get(), MTK_INT32, table.batch, table.pages);
    const mtk_tensor row_to_batch_t = vector_of(row_to_batch_dev.get(), MTK_INT32, s.rows);
    mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
    params.lengths = &lengths_t;
    params.starts = s.starts ? &starts_t : nullptr;
    params.transform = s.transform;
    if (s.transform == MTK_INDEX_TRANSFORM_RAGGED) params.offsets = &offsets_t;
    if (s.transform == MTK_INDEX_TRANSFORM_PAGE_TABLE) {
      params.page_table = &table_t;
      params.page_size = s.page_size;
      params.row_to_batch = s.row_to_batch ? &row_to_batch_t : nullptr;
    }
    Outcome o{MTK_SUCCESS, "", true, true, false};

    if (variant == RaggedVariant::WorkspaceSize) {
      // The answer of a context that never saw a fault.
      mtk_backend backend{};
      mtk_context_backend(ctx, &backend);
      mtk_context reference = nullptr;
      size_t expected = SIZE_MAX;
      if (mtk_context_create(backend, 0, &reference) == MTK_SUCCESS) {
        mtk_topk_ragged_workspace_size(reference, &in, s.k, s.largest, 1, &params,
                                       s.index_dtype, &expected);
        mtk_context_destroy(reference);
      }
      size_t bytes = SIZE_MAX;  // a failed call answers 0, as the library sets it first
      injector.arm();
      o.status = mtk_topk_ragged_workspace_size(ctx, &in, s.k, s.largest, 1, &params,
                                                s.index_dtype, &bytes);
      injector.disarm();
      o.message = mtk_last_error_message();
      o.outputs_untouched = bytes == 0;
      o.result_correct = expected != SIZE_MAX && bytes == expected;
      return o;
    }

    const size_t count = static_cast<size_t>(s.rows * s.k);
    const size_t index_size = s.index_dtype == MTK_INT32 ? 4 : 8;
    DeviceBuffer values(ctx, count * sizeof(float)), indices(ctx, count * index_size);
    values.fill_sentinel();
    indices.fill_sentinel();
    const mtk_tensor v = matrix(values.get(), MTK_FLOAT32, s.rows, s.k);
    const mtk_tensor i = matrix(indices.get(), s.index_dtype, s.rows, s.k);
    const mtk_tensor* values_out = s.values ? &v : nullptr;
    if (variant == RaggedVariant::WithWorkspace) {
      size_t bytes = 0;
      mtk_topk_ragged_workspace_size(ctx, &in, s.k, s.largest, 1, &params, s.index_dtype,
                                     &bytes);
      DeviceBuffer workspace(ctx, bytes);
      injector.arm();
      o.status = mtk_topk_ragged_with_workspace(ctx, &in, s.k, s.largest, 1, &params,
                                                values_out, &i, workspace.get(), bytes, nullptr);
      injector.disarm();  // before the workspace's mtk_free, which clears the message
      o.message = mtk_last_error_message();
    } else {
      injector.arm();
      o.status = mtk_topk_ragged(ctx, &in, s.k, s.largest, 1, &params, values_out, &i, nullptr);
      injector.disarm();
      o.message = mtk_last_error_message();
    }
    mtk_synchronize(ctx, nullptr);
    const std::vector<unsigned char> values_bytes = values.download();
    const std::vector<unsigned char> indices_bytes = indices.download();
    o.outputs_untouched = all_sentinel(values_bytes) && all_sentinel(indices_bytes);
    if (o.status == MTK_SUCCESS) {
      std::vector<int64_t> want_indices;
      std::vector<float> want_values;
      ragged_expected(s, x, table, want_indices, want_values);
      o.result_correct = true;
      for (size_t e = 0; e < count; ++e) {
        int64_t got = 0;
        if (index_size == 4) {
          int32_t narrow;
          std::memcpy(&narrow, indices_bytes.data() + e * 4, 4);
          got = narrow;
        } else {
          std::memcpy(&got, indices_bytes.data() + e * 8, 8);
        }
        if (got != want_indices[e]) o.result_correct = false;
      }
      // Indices only: the values buffer is not the call's and stays as it was.
      o.result_correct = o.result_correct &&
                         (s.values ? std::memcmp(values_bytes.data(), want_values.data(),
                                                 count * sizeof(float)) == 0
                                   : all_sentinel(values_bytes));
    }
    return o;
  };
}

// Whether the backend runs ragged rows (the others refuse them by name:
// tests/ragged/test_ragged_refusal.cpp).
bool runs_ragged(mtk_backend backend) {
  mtk_context ctx = nullptr;
  if (mtk_context_create(backend, 0, &ctx) != MTK_SUCCESS) return false;
  Injector clean(0, 0);
  const RaggedShape probe{2, 8, 2, 1, MTK_INDEX_TRANSFORM_NONE, false, true, false, MTK_INT64};
  const Outcome o = ragged_scenario(probe, RaggedVariant::Plain)(ctx, clean);
  mtk_context_destroy(ctx);
  return o.status != MTK_ERROR_BACKEND_UNAVAILABLE;
}

// ---- MoE router ----------------------------------------------------------------------------

struct RouteShape {
  int64_t tokens, experts, k;
  mtk_scoring scoring;
  int64_t n_group, topk_group;
  bool bias;
  // An older caller's smaller mtk_router_params: the members past it take their defaults.
  size_t params_size = sizeof(mtk_router_params);
};

// Router results are compared with the same library's unfaulted run: the router's numerics are
// the conformance suite's business; here what matters is that a faulted call changes nothing and
// that the clean run after a sweep is the same as one that never saw a fault.
struct RouteResult {
  std::vector<unsigned char> weights, ids;
};

Scenario route_scenario(RouteShape s, std::shared_ptr<RouteResult> expected) {
  return [s, expected](mtk_context ctx, Injector& injector) {
    std::vector<float> logits(static_cast<size_t>(s.tokens * s.experts));
    for (size_t i = 0; i < logits.size(); ++i) {
      logits[i] = static_cast<float>((i * 2654435761u) % 1000) / 250.0f - 2.0f;
    }
    std::vector<float> bias_host(static_cast<size_t>(s.experts));
    for (size_t e = 0; e < bias_host.size(); ++e) bias_host[e] = static_cast<float>(e % 7) * 0.01f;
    DeviceBuffer logits_dev(ctx, logits.size() * sizeof(float));
    DeviceBuffer bias_dev(ctx, bias_host.size() * sizeof(float));
    DeviceBuffer weights(ctx, static_cast<size_t>(s.tokens * s.k) * sizeof(float));
    DeviceBuffer ids(ctx, static_cast<size_t>(s.tokens * s.k) * sizeof(int32_t));
    logits_dev.upload(logits.data());
    bias_dev.upload(bias_host.data());
    weights.fill_sentinel();
    ids.fill_sentinel();
    mtk_tensor bias{};
    bias.data = bias_dev.get();
    bias.dtype = MTK_FLOAT32;
    bias.ndim = 1;
    bias.sizes[0] = s.experts;
    bias.strides[0] = 1;
    const mtk_router_params params{s.params_size, s.k,         s.scoring,
                                   s.bias ? &bias : nullptr, s.n_group, s.topk_group,
                                   1,             2.5f};
    const mtk_tensor l = matrix(logits_dev.get(), MTK_FLOAT32, s.tokens, s.experts);
    const mtk_tensor w = matrix(weights.get(), MTK_FLOAT32, s.tokens, s.k);
    const mtk_tensor i = matrix(ids.get(), MTK_INT32, s.tokens, s.k);
    Outcome o{MTK_SUCCESS, "", true, true, false};
    injector.arm();
    o.status = mtk_moe_route(ctx, &l, &params, &w, &i, nullptr);
    injector.disarm();
    o.message = mtk_last_error_message();
    mtk_synchronize(ctx, nullptr);
    RouteResult got{weights.download(), ids.download()};
    o.outputs_untouched = all_sentinel(got.weights) && all_sentinel(got.ids);
    if (o.status == MTK_SUCCESS) {
      if (expected->ids.empty()) *expected = got;  // the first clean run defines the result
      o.result_correct = got.weights == expected->weights && got.ids == expected->ids;
      const int32_t* id = reinterpret_cast<const int32_t*>(got.ids.data());
      for (int64_t t = 0; t < s.tokens; ++t) {
        std::vector<int32_t> row(id + t * s.k, id + (t + 1) * s.k);
        std::sort(row.begin(), row.end());
        if (std::adjacent_find(row.begin(), row.end()) != row.end() || row.front() < 0 ||
            row.back() >= s.experts) {
          o.result_correct = false;
        }
      }
    }
    return o;
  };
}

// ---- contexts ------------------------------------------------------------------------------

Scenario context_create_scenario(mtk_backend backend) {
  return [backend](mtk_context, Injector& injector) {
    static int not_a_context;
    mtk_context created = reinterpret_cast<mtk_context>(&not_a_context);  // must be overwritten
    injector.arm();
    Outcome o{mtk_context_create(backend, 0, &created), "", true, true, true};
    injector.disarm();
    o.message = mtk_last_error_message();
    o.alloc_outputs_null = o.status == MTK_SUCCESS || created == nullptr;
    if (o.status == MTK_SUCCESS) o.result_correct = mtk_context_destroy(created) == MTK_SUCCESS;
    return o;
  };
}

// ---- buffer registration -----------------------------------------------------------------

// mtk_register_buffer / mtk_unregister_buffer of a host array: the backends without foreign
// buffers refuse both by name, and a Metal context refuses to unregister what it never
// registered. Building those refusals allocates, so their failure points are swept like any
// other call's. Registering on Metal needs an id<MTLBuffer>, which C++ cannot make:
// tests/metal/test_memory_map.cpp tests those rules.
bool refuses_registration(mtk_backend backend) {
  return backend != MTK_BACKEND_METAL && backend != MTK_BACKEND_MPSGRAPH;
}

Scenario registration_scenario(bool unregister, const char* clean_message_part) {
  return [unregister, clean_message_part](mtk_context ctx, Injector& injector) {
    std::vector<unsigned char> host(64, kSentinel);
    static int not_a_pointer;
    void* registered = &not_a_pointer;  // must be overwritten with NULL
    Outcome o{MTK_SUCCESS, "", true, true, false};
    injector.arm();
    o.status = unregister ? mtk_unregister_buffer(ctx, host.data())
                          : mtk_register_buffer(ctx, host.data(), &registered);
    injector.disarm();
    o.message = mtk_last_error_message();
    o.outputs_untouched = all_sentinel(host);
    o.alloc_outputs_null = unregister || registered == nullptr;
    o.result_correct = o.message.find(clean_message_part) != std::string::npos;
    return o;
  };
}

// ---- the sweep -----------------------------------------------------------------------------

// Sweeps one scenario over one kind of failure point; returns how many points it made fail.
// The clean run must end with `clean_status` (MTK_SUCCESS but for calls the backend refuses).
uint64_t sweep(const std::string& where, mtk_backend backend, const Scenario& scenario,
               mtk_status clean_status, const SiteKind& kind, bool warm) {
  const uint64_t kMaxPoints = 10000;  // a runaway guard, far above any real call
  for (uint64_t n = 1; n <= kMaxPoints; ++n) {
    const std::string at = where + (warm ? " warm " : " cold ") + kind.name + " #" +
                           std::to_string(n);
    const int64_t live_at_start = mtk_testing_live_allocations();
    mtk_context ctx = nullptr;
    if (mtk_context_create(backend, 0, &ctx) != MTK_SUCCESS) {
      report(at, std::string("context creation failed: ") + mtk_last_error_message());
      return n - 1;
    }
    if (warm) {
      Injector clean(0, 0);
      scenario(ctx, clean);  // caches scratch, plans, pipelines
    }
    Injector injector(kind.mask, n);
    const Outcome o = scenario(ctx, injector);
    if (!injector.injected()) {
      if (o.status != clean_status) {
        report(at, "the clean run returned status " + std::to_string(o.status) + ", expected " +
                       std::to_string(clean_status) + ": " + o.message);
      } else if (!o.result_correct) {
        report(at, "the clean run gave a wrong result");
      }
    } else {
      if (o.status != kind.status || o.message.find(kind.message_part) == std::string::npos) {
        report(at, "status " + std::to_string(o.status) + " message \"" + o.message +
                       "\", expected status " + std::to_string(kind.status) + " and \"" +
                       kind.message_part + "\"");
      }
      if (!o.outputs_untouched) report(at, "a failed call wrote to its outputs");
      if (!o.alloc_outputs_null) report(at, "a failed call left an allocated output non-NULL");
      if (warm && injector.live_after() != injector.live_before()) {
        report(at, "live allocations went from " + std::to_string(injector.live_before()) +
                       " to " + std::to_string(injector.live_after()) + " across the failed call");
      }
    }
    mtk_context_destroy(ctx);
    const int64_t live_at_end = mtk_testing_live_allocations();
    if (live_at_end != live_at_start) {
      report(at, "live allocations went from " + std::to_string(live_at_start) + " to " +
                     std::to_string(live_at_end) + " after destroying the context");
    }
    if (!injector.injected()) return n - 1;
  }
  report(where, "more than 10000 failure points: runaway sweep");
  return kMaxPoints;
}

// ---- sampling ------------------------------------------------------------------------------

struct SamplingShape {
  int64_t rows, n;
  mtk_sampling_op op;
  bool with_workspace;
};

Scenario sampling_scenario(SamplingShape s, std::shared_ptr<std::vector<unsigned char>> expected) {
  return [s, expected](mtk_context ctx, Injector& injector) {
    const bool samples = s.op == MTK_SAMPLING_SAMPLE || s.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    std::vector<float> input(static_cast<size_t>(s.rows * s.n));
    for (size_t i = 0; i < input.size(); ++i) {
      input[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
    }
    std::vector<float> uniforms(static_cast<size_t>(s.rows));
    for (size_t r = 0; r < uniforms.size(); ++r) uniforms[r] = static_cast<float>(r % 10) / 10;
    DeviceBuffer input_dev(ctx, input.size() * sizeof(float));
    DeviceBuffer uniforms_dev(ctx, uniforms.size() * sizeof(float));
    DeviceBuffer out(ctx, static_cast<size_t>(s.rows * (samples ? 1 : s.n)) * sizeof(int64_t));
    input_dev.upload(input.data());
    uniforms_dev.upload(uniforms.data());
    out.fill_sentinel();
    mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
    params.top_k_value = 40;
    if (s.op != MTK_SAMPLING_TOP_K_MASK_LOGITS) {
      params.top_p_value = 0.9f;
      params.min_p_value = 0.01f;
    }
    if (s.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS) params.temperature_value = 0.7f;
    const mtk_tensor in = matrix(input_dev.get(), MTK_FLOAT32, s.rows, s.n);
    mtk_tensor u = matrix(uniforms_dev.get(), MTK_FLOAT32, s.rows, 1);
    u.ndim = 1;
    mtk_tensor o = matrix(out.get(), samples ? MTK_INT64 : MTK_FLOAT32, s.rows, s.n);
    if (samples) {
      o.ndim = 1;
      o.strides[0] = 1;
    }
    size_t bytes = 0;
    if (s.with_workspace) {
      mtk_sampling_workspace_size(ctx, s.op, &in, &params, o.dtype, &bytes);
    }
    DeviceBuffer workspace(ctx, std::max<size_t>(bytes, 1));
    Outcome outcome{MTK_SUCCESS, "", true, true, false};
    injector.arm();
    if (s.with_workspace) {
      outcome.status = mtk_sampling_with_workspace(ctx, s.op, &in, &params,
                                                   samples ? &u : nullptr, &o, workspace.get(),
                                                   bytes, nullptr);
    } else if (s.op == MTK_SAMPLING_TOP_K_MASK_LOGITS) {
      outcome.status = mtk_top_k_mask_logits(ctx, &in, &params, &o, nullptr);
    } else if (s.op == MTK_SAMPLING_RENORM_PROBS) {
      outcome.status = mtk_renorm_probs(ctx, &in, &params, &o, nullptr);
    } else if (s.op == MTK_SAMPLING_SAMPLE) {
      outcome.status = mtk_sample(ctx, &in, &params, &u, &o, nullptr);
    } else {
      outcome.status = mtk_sample_from_logits(ctx, &in, &params, &u, &o, nullptr);
    }
    injector.disarm();
    outcome.message = mtk_last_error_message();
    mtk_synchronize(ctx, nullptr);
    const std::vector<unsigned char> got = out.download();
    outcome.outputs_untouched = all_sentinel(got);
    if (outcome.status == MTK_SUCCESS) {
      if (expected->empty()) *expected = got;  // the first clean run defines the result
      outcome.result_correct = got == *expected;
    }
    return outcome;
  };
}

// Whether the backend runs the sampling filters (the others refuse them by name).
bool runs_sampling(mtk_backend backend) {
  mtk_context ctx = nullptr;
  if (mtk_context_create(backend, 0, &ctx) != MTK_SUCCESS) return false;
  Injector clean(0, 0);
  const SamplingShape probe{2, 64, MTK_SAMPLING_SAMPLE, false};
  const Outcome o =
      sampling_scenario(probe, std::make_shared<std::vector<unsigned char>>())(ctx, clean);
  mtk_context_destroy(ctx);
  return o.status != MTK_ERROR_BACKEND_UNAVAILABLE;
}

struct Entry {
  std::string variant;
  Scenario scenario;
  bool warm_too;  // also sweep on a context that already ran the call
  mtk_status clean_status = MTK_SUCCESS;  // what the call returns when nothing fails
};

std::vector<Entry> entries(mtk_backend backend) {
  std::vector<Entry> list;
  // Shapes that reach different plans: one short row, many rows, one long row with a large k,
  // k == n, and the reduction along dim 0.
  const TopkShape shapes[] = {
      {1, 256, 8, -1, 1}, {512, 1024, 50, -1, 1}, {1, 1 << 18, 1000, -1, 0},
      {300, 64, 64, -1, 1}, {4096, 256, 8, 0, 1},
  };
  const std::pair<TopkVariant, const char*> variants[] = {
      {TopkVariant::Plain, "mtk_topk"},
      {TopkVariant::WithWorkspace, "mtk_topk_with_workspace"},
      {TopkVariant::Alloc, "mtk_topk_alloc"},
  };
  for (const auto& [variant, name] : variants) {
    for (const TopkShape& s : shapes) {
      const std::string label = std::string(name) + " [" + std::to_string(s.a) + "x" +
                                std::to_string(s.b) + " k=" + std::to_string(s.k) +
                                " dim=" + std::to_string(s.dim) + "]";
      list.push_back({label, topk_scenario(s, variant), true});
    }
  }
  // Ragged rows where the backend runs them: full rows (the plain top-k's result), then every
  // option of their own.
  const std::pair<TopkVariant, const char*> ragged_variants[] = {
      {TopkVariant::Ragged, "mtk_topk_ragged"},
      {TopkVariant::RaggedWithWorkspace, "mtk_topk_ragged_with_workspace"},
  };
  const bool ragged = runs_ragged(backend);
  if (!ragged) {
    std::printf("%-8s ragged rows refused by name: their sweep skipped\n",
                mtk_backend_name(backend));
  }
  for (const auto& [variant, name] : ragged_variants) {
    if (!ragged) break;
    for (const TopkShape& s : shapes) {
      if (s.dim != -1) continue;
      const std::string label = std::string(name) + " [" + std::to_string(s.a) + "x" +
                                std::to_string(s.b) + " k=" + std::to_string(s.k) + "]";
      list.push_back({label, topk_scenario(s, variant), true});
    }
  }
  // Sampling where the backend runs it (CPU, CUDA, Metal; MPSGraph refuses it by name:
  // tests/sampling/test_sampling_refusal.cpp).
  const SamplingShape samplings[] = {
      {1, 4096, MTK_SAMPLING_TOP_K_MASK_LOGITS, false},
      {64, 1000, MTK_SAMPLING_RENORM_PROBS, false},
      {64, 1000, MTK_SAMPLING_SAMPLE, true},
      {1, 4096, MTK_SAMPLING_SAMPLE_FROM_LOGITS, false},
      {64, 1000, MTK_SAMPLING_SAMPLE_FROM_LOGITS, true},
  };
  const char* sampling_names[] = {"mtk_top_k_mask_logits", "mtk_renorm_probs", "mtk_sample",
                                  "mtk_sample_from_logits"};
  const bool sampling_runs = runs_sampling(backend);
  if (!sampling_runs) {
    std::printf("%-8s sampling refused by name: its sweep skipped\n", mtk_backend_name(backend));
  }
  for (const SamplingShape& sampling : samplings) {
    if (!sampling_runs) break;
    const std::string label = std::string(sampling_names[sampling.op]) +
                              (sampling.with_workspace ? " (workspace)" : "") + " [" +
                              std::to_string(sampling.rows) + "x" + std::to_string(sampling.n) +
                              "]";
    list.push_back({label,
                    sampling_scenario(sampling, std::make_shared<std::vector<unsigned char>>()),
                    true});
  }
  const RaggedShape ragged_shapes[] = {
      {9, 300, 16, 1, MTK_INDEX_TRANSFORM_NONE, true, false, false, MTK_INT64},
      {64, 5000, 512, 0, MTK_INDEX_TRANSFORM_RAGGED, false, true, false, MTK_INT32},
      {12, 700, 64, 1, MTK_INDEX_TRANSFORM_PAGE_TABLE, true, false, true, MTK_INT32, 16},
      {8, 40000, 2048, 1, MTK_INDEX_TRANSFORM_PAGE_TABLE, false, true, false, MTK_INT64, 3},
  };
  const char* transform_names[] = {"none", "ragged", "page table"};
  const std::pair<RaggedVariant, const char*> option_variants[] = {
      {RaggedVariant::Plain, "mtk_topk_ragged"},
      {RaggedVariant::WithWorkspace, "mtk_topk_ragged_with_workspace"},
      {RaggedVariant::WorkspaceSize, "mtk_topk_ragged_workspace_size"},
  };
  for (const auto& [variant, name] : option_variants) {
    if (!ragged) break;
    for (const RaggedShape& s : ragged_shapes) {
      const std::string label =
          std::string(name) + " [" + std::to_string(s.rows) + "x" + std::to_string(s.n) +
          " k=" + std::to_string(s.k) + " " + transform_names[s.transform] +
          (s.starts ? " starts" : "") + (s.values ? "" : " indices only") + "]";
      list.push_back({label, ragged_scenario(s, variant), true});
    }
  }
  const RouteShape routes[] = {
      {1, 256, 8, MTK_SCORING_SOFTMAX, 0, 0, false},
      {512, 256, 8, MTK_SCORING_SIGMOID, 8, 4, true},
      {300, 128, 6, MTK_SCORING_NONE, 0, 0, true},
      {64, 128, 4, MTK_SCORING_SOFTMAX, 4, 2, false, offsetof(mtk_router_params, renormalize)},
  };
  for (const RouteShape& r : routes) {
    const std::string label = "mtk_moe_route [" + std::to_string(r.tokens) + "x" +
                              std::to_string(r.experts) + " k=" + std::to_string(r.k) +
                              (r.n_group > 1 ? " grouped" : "") + (r.bias ? " bias" : "") +
                              (r.params_size < sizeof(mtk_router_params)
                                   ? " struct_size=" + std::to_string(r.params_size)
                                   : "") +
                              "]";
    list.push_back({label, route_scenario(r, std::make_shared<RouteResult>()), true});
  }
  if (refuses_registration(backend)) {
    list.push_back({"mtk_register_buffer (refused)",
                    registration_scenario(false, "registers no foreign buffers"), true,
                    MTK_ERROR_BACKEND_UNAVAILABLE});
    list.push_back({"mtk_unregister_buffer (refused)",
                    registration_scenario(true, "registers no foreign buffers"), true,
                    MTK_ERROR_BACKEND_UNAVAILABLE});
  } else {
    std::printf("%-8s mtk_register_buffer needs an id<MTLBuffer>: its sweep skipped\n",
                mtk_backend_name(backend));
    list.push_back({"mtk_unregister_buffer (never registered)",
                    registration_scenario(true, "is not the contents of a buffer registered"),
                    true, MTK_ERROR_INVALID_ARGUMENT});
  }
  list.push_back({"mtk_context_create", context_create_scenario(backend), false});
  return list;
}

}  // namespace

int main() {
  const int64_t live_at_start = mtk_testing_live_allocations();
  const mtk_backend backends[] = {MTK_BACKEND_CPU, MTK_BACKEND_CUDA, MTK_BACKEND_METAL,
                                  MTK_BACKEND_MPSGRAPH};
  uint64_t total = 0;
  for (mtk_backend backend : backends) {
    int available = 0;
    mtk_backend_query(backend, nullptr, &available);
    if (!available) {
      std::printf("%-8s not available here: skipped\n", mtk_backend_name(backend));
      continue;
    }
    uint64_t backend_total = 0;
    for (const Entry& entry : entries(backend)) {
      const std::string where = std::string(mtk_backend_name(backend)) + " " + entry.variant;
      std::string counts;
      uint64_t entry_total = 0;
      for (bool warm : {false, true}) {
        if (warm && !entry.warm_too) continue;
        counts += warm ? "  warm:" : "  cold:";
        for (const SiteKind& kind : kSiteKinds) {
          // A GPU runtime's own host allocations also go through operator new, and how it
          // reports their failure is its business: that kind is swept on the CPU backend only.
          if (kind.mask == 0 && backend != MTK_BACKEND_CPU) continue;
          const uint64_t points =
              sweep(where, backend, entry.scenario, entry.clean_status, kind, warm);
          counts += std::string(" ") + kind.name + "=" + std::to_string(points);
          entry_total += points;
        }
      }
      std::printf("%-8s %-52s %4" PRIu64 " failure points%s\n", mtk_backend_name(backend),
                  entry.variant.c_str(), entry_total, counts.c_str());
      std::fflush(stdout);
      backend_total += entry_total;
    }
    std::printf("%-8s total: %" PRIu64 " failure points exercised\n", mtk_backend_name(backend),
                backend_total);
    total += backend_total;
  }
  if (mtk_testing_live_allocations() != live_at_start) {
    report("process", "live allocations did not return to their starting value");
  }
  std::printf("fault sweep: %" PRIu64 " failure points exercised, %d failures\n", total, failures);
  return failures == 0 ? 0 : 1;
}
