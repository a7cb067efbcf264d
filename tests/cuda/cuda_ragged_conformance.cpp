// CUDA-backend conformance of mtk_topk_ragged (docs/CONTRACT.md, "Ragged rows") and of
// indices-only calls, through the C ABI: every result is compared bit for bit with the CPU
// backend's (its own conformance against an independent reference is tests/test_ragged.py).
// Cases: f32, f16, bf16, int32 and f64 rows; int32 and int64 lengths and starts; lengths below
// 0, 0, 1, below k, k, past the row; starts below 0 and past the row; k = 1, 512, 2048 and 4096
// (past the shared-memory sort); 1 to 300 rows of up to 2^20 elements, so that both the block
// and the multi-block plan run; every index transform (page sizes 1 and 64, with and without
// row_to_batch); no values; int32 indices; unsorted results compared as sets. Then one CUDA
// graph: captured once, replayed with lengths and starts changed on the device in between.
//
// Usage: cuda_ragged_conformance [--quick] (--quick: rows * n <= 2^18, for the sanitizers).
// Exits 0 when every case passes, 1 on a mismatch, 2 when no CUDA device is available.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "conformance_support.hpp"
#include "metaltopk.h"

namespace {

using namespace conformance;

int failures = 0;
int cases = 0;

// Random bits with many ties and special values: small integers in the float formats (exact in
// each), an eighth of them NaN, infinities or signed zeros.
std::vector<uint8_t> make_input(mtk_dtype d, size_t count, std::mt19937_64& rng) {
  const size_t size = dtype_size(d);
  std::vector<uint8_t> bytes(count * size);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t raw = rng();
    const int small = int(raw % 2001) - 1000;
    const bool special = (raw >> 20) % 8 == 0;
    const int which = int((raw >> 24) % 6);
    uint8_t* p = bytes.data() + i * size;
    switch (d) {
      case MTK_FLOAT32: {
        const uint32_t specials[] = {0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u,
                                     0x80000000u, 0u};
        float f = float(small) / 8;
        uint32_t b;
        std::memcpy(&b, &f, 4);
        if (special) b = specials[which];
        std::memcpy(p, &b, 4);
        break;
      }
      case MTK_FLOAT64: {
        const uint64_t specials[] = {0x7ff8000000000000ull, 0xfff8000000000000ull,
                                     0x7ff0000000000000ull, 0xfff0000000000000ull,
                                     0x8000000000000000ull, 0ull};
        double f = double(small) / 8;
        uint64_t b;
        std::memcpy(&b, &f, 8);
        if (special) b = specials[which];
        std::memcpy(p, &b, 8);
        break;
      }
      case MTK_BFLOAT16: {
        const uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f80, 0xff80, 0x8000, 0};
        float f = float(small % 256);
        uint32_t w;
        std::memcpy(&w, &f, 4);
        uint16_t b = uint16_t(w >> 16);
        if (special) b = specials[which];
        std::memcpy(p, &b, 2);
        break;
      }
      case MTK_FLOAT16: {
        // Any pattern but the NaNs' payloads is fine: the ranking is by bits.
        const uint16_t specials[] = {0x7e00, 0xfe00, 0x7c00, 0xfc00, 0x8000, 0};
        uint16_t b = uint16_t(raw & 0xffff);
        if ((b & 0x7c00) == 0x7c00) b &= 0xbfff;  // no accidental NaN or infinity
        if (special) b = specials[which];
        std::memcpy(p, &b, 2);
        break;
      }
      default: {
        int32_t v = special ? int32_t(raw >> 32) : small;
        std::memcpy(p, &v, 4);
        break;
      }
    }
  }
  return bytes;
}

enum class Transform { None, Ragged, PageTable };

struct Case {
  mtk_dtype dtype;
  int64_t rows, n, k;
  mtk_dtype lengths_dtype;
  bool with_starts;
  mtk_dtype starts_dtype;
  Transform transform;
  int64_t page_size;
  bool with_row_to_batch;
  bool with_values, sorted, largest, index32;
};

// A per-row int32 or int64 tensor's bytes.
std::vector<uint8_t> row_vector_bytes(const std::vector<int64_t>& entries, mtk_dtype dtype) {
  std::vector<uint8_t> bytes(entries.size() * dtype_size(dtype));
  for (size_t i = 0; i < entries.size(); ++i) {
    if (dtype == MTK_INT32) {
      const int32_t v = int32_t(entries[i]);
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      std::memcpy(&bytes[i * 8], &entries[i], 8);
    }
  }
  return bytes;
}

// Host data of one case, and where each tensor lives for one backend.
struct Buffers {
  std::vector<uint8_t> input, lengths, starts, offsets, page_table, row_to_batch;
  int64_t batches = 0, pages = 0;
};

struct Outputs {
  std::vector<uint8_t> values, indices;
};

mtk_tensor vector_tensor(const void* data, mtk_dtype dtype, int64_t size) {
  mtk_tensor t{};
  t.data = const_cast<void*>(data);
  t.dtype = dtype;
  t.ndim = 1;
  t.sizes[0] = size;
  t.strides[0] = 1;
  return t;
}

mtk_tensor matrix_tensor(void* data, mtk_dtype dtype, int64_t rows, int64_t cols) {
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

// Device copies of a case's tensors (or the host ones for the CPU backend), freed on scope exit.
struct Placed {
  mtk_context ctx;
  bool device;
  std::vector<void*> owned;

  const void* place(const std::vector<uint8_t>& bytes) {
    if (!device || bytes.empty()) return bytes.empty() ? nullptr : bytes.data();
    void* p = nullptr;
    CHECK_OK(mtk_malloc(ctx, bytes.size(), &p));
    CHECK_OK(mtk_memcpy(ctx, p, bytes.data(), bytes.size(), MTK_COPY_HOST_TO_DEVICE, nullptr));
    owned.push_back(p);
    return p;
  }
  ~Placed() {
    for (void* p : owned) mtk_free(ctx, p);
  }
};

// Runs the case on `ctx` and returns its outputs' bytes (values all zero when not written).
Outputs run(mtk_context ctx, bool device, const Case& c, const Buffers& b) {
  Placed placed{ctx, device, {}};
  const size_t value_bytes = size_t(c.rows * c.k) * dtype_size(c.dtype);
  const size_t index_bytes = size_t(c.rows * c.k) * (c.index32 ? 4 : 8);
  Outputs out{std::vector<uint8_t>(value_bytes, 0xA5), std::vector<uint8_t>(index_bytes, 0xA5)};
  mtk_tensor input = matrix_tensor(const_cast<void*>(placed.place(b.input)), c.dtype, c.rows, c.n);
  void* values_at = const_cast<void*>(placed.place(out.values));
  void* indices_at = const_cast<void*>(placed.place(out.indices));
  if (!device) {
    values_at = out.values.data();
    indices_at = out.indices.data();
  }
  const mtk_tensor values = matrix_tensor(values_at, c.dtype, c.rows, c.k);
  const mtk_tensor indices =
      matrix_tensor(indices_at, c.index32 ? MTK_INT32 : MTK_INT64, c.rows, c.k);
  const mtk_tensor lengths = vector_tensor(placed.place(b.lengths), c.lengths_dtype, c.rows);
  const mtk_tensor starts = vector_tensor(placed.place(b.starts), c.starts_dtype, c.rows);
  const mtk_tensor offsets = vector_tensor(placed.place(b.offsets), MTK_INT64, c.rows);
  mtk_tensor page_table = matrix_tensor(const_cast<void*>(placed.place(b.page_table)), MTK_INT32,
                                        b.batches, b.pages);
  const mtk_tensor row_to_batch = vector_tensor(placed.place(b.row_to_batch), MTK_INT32, c.rows);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths;
  if (c.with_starts) params.starts = &starts;
  if (c.transform == Transform::Ragged) {
    params.transform = MTK_INDEX_TRANSFORM_RAGGED;
    params.offsets = &offsets;
  } else if (c.transform == Transform::PageTable) {
    params.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
    params.page_table = &page_table;
    params.page_size = c.page_size;
    if (c.with_row_to_batch) params.row_to_batch = &row_to_batch;
  }
  CHECK_OK(mtk_topk_ragged(ctx, &input, c.k, c.largest, c.sorted, &params,
                           c.with_values ? &values : nullptr, &indices, nullptr));
  if (device) {
    CHECK_OK(mtk_memcpy(ctx, out.values.data(), values_at, value_bytes,
                        MTK_COPY_DEVICE_TO_HOST, nullptr));
    CHECK_OK(mtk_memcpy(ctx, out.indices.data(), indices_at, index_bytes,
                        MTK_COPY_DEVICE_TO_HOST, nullptr));
    CHECK_OK(mtk_synchronize(ctx, nullptr));
  }
  return out;
}

// Row r's (index, value bits) pairs; unsorted results compare as sets, so their first `count`
// (the window's winners) are put in index order. A transformed index can be -1 too (offsets
// that wrap), so the winners are told from the padding by the count, not by the index.
std::vector<std::pair<int64_t, std::vector<uint8_t>>> row_entries(const Case& c, const Outputs& o,
                                                                   int64_t r, int64_t count) {
  const size_t size = dtype_size(c.dtype);
  std::vector<std::pair<int64_t, std::vector<uint8_t>>> entries;
  for (int64_t j = 0; j < c.k; ++j) {
    const size_t at = size_t(r * c.k + j);
    int64_t index;
    if (c.index32) {
      int32_t v;
      std::memcpy(&v, &o.indices[at * 4], 4);
      index = v;
    } else {
      std::memcpy(&index, &o.indices[at * 8], 8);
    }
    entries.emplace_back(index, std::vector<uint8_t>(o.values.begin() + long(at * size),
                                                     o.values.begin() + long((at + 1) * size)));
  }
  if (!c.sorted) std::sort(entries.begin(), entries.begin() + count);
  return entries;
}

// How many winners row r has: min(k, its clipped window's length), none without a page table.
int64_t window_count(const Case& c, int64_t length, int64_t start, int64_t batch,
                     int64_t batches) {
  const int64_t first = c.with_starts ? std::min(std::max(start, int64_t(0)), c.n) : 0;
  int64_t clipped = std::min(std::max(length, int64_t(0)), c.n - first);
  if (c.transform == Transform::PageTable && c.with_row_to_batch &&
      (batch < 0 || batch >= batches)) {
    clipped = 0;
  }
  return std::min(c.k, clipped);
}

void check(mtk_context cuda, mtk_context cpu, const Case& c, std::mt19937_64& rng) {
  ++cases;
  Buffers b;
  b.input = make_input(c.dtype, size_t(c.rows * c.n), rng);
  // Lengths and starts of every kind, picked at random per row.
  const int64_t n = c.n, k = c.k;
  const int64_t length_kinds[] = {-7, 0,     1,     k - 1, k,
                                  k + 1, n, n + 3, n / 2, int64_t(rng() % uint64_t(n + 1))};
  const int64_t start_kinds[] = {0, -5, 1, 3, n / 3, n - 1, n, n + 9};
  std::vector<int64_t> lengths(size_t(c.rows)), starts(size_t(c.rows)), offsets(size_t(c.rows)),
      row_to_batch(size_t(c.rows));
  b.batches = c.with_row_to_batch ? 5 : c.rows;
  b.pages = (n + c.page_size - 1) / c.page_size;
  std::vector<int64_t> page_table(size_t(b.batches * b.pages));
  for (int64_t r = 0; r < c.rows; ++r) {
    lengths[size_t(r)] = length_kinds[rng() % 10];
    starts[size_t(r)] = start_kinds[rng() % 8];
    offsets[size_t(r)] = r % 3 == 2 ? INT64_MAX - int64_t(rng() % 1000) : int64_t(rng() % 100000);
    // Every seventh row's batch is outside the table: that row has no candidates.
    row_to_batch[size_t(r)] = r % 7 == 6 ? (r % 2 != 0 ? b.batches : -1)
                                         : int64_t(rng() % uint64_t(b.batches));
  }
  for (int64_t& p : page_table) p = int64_t(rng() % 100000);
  b.lengths = row_vector_bytes(lengths, c.lengths_dtype);
  b.starts = row_vector_bytes(starts, c.starts_dtype);
  b.offsets = row_vector_bytes(offsets, MTK_INT64);
  b.page_table = row_vector_bytes(page_table, MTK_INT32);
  b.row_to_batch = row_vector_bytes(row_to_batch, MTK_INT32);

  const Outputs want = run(cpu, false, c, b);
  const Outputs got = run(cuda, true, c, b);
  for (int64_t r = 0; r < c.rows; ++r) {
    const int64_t count = window_count(c, lengths[size_t(r)], starts[size_t(r)],
                                       row_to_batch[size_t(r)], b.batches);
    const auto w = row_entries(c, want, r, count), g = row_entries(c, got, r, count);
    for (int64_t j = 0; j < k; ++j) {
      if (w[size_t(j)] != g[size_t(j)]) {
        std::fprintf(stderr,
                     "FAIL %s rows=%lld n=%lld k=%lld lengths=%s starts=%s transform=%d "
                     "page_size=%lld row_to_batch=%d values=%d sorted=%d largest=%d index32=%d: "
                     "row %lld (length %lld start %lld) rank %lld: index %lld, CPU %lld\n",
                     dtype_label(c.dtype), (long long)c.rows, (long long)n, (long long)k,
                     dtype_label(c.lengths_dtype),
                     c.with_starts ? dtype_label(c.starts_dtype) : "none", int(c.transform),
                     (long long)c.page_size, int(c.with_row_to_batch), int(c.with_values),
                     int(c.sorted), int(c.largest), int(c.index32), (long long)r,
                     (long long)lengths[size_t(r)], (long long)starts[size_t(r)], (long long)j,
                     (long long)g[size_t(j)].first, (long long)w[size_t(j)].first);
        ++failures;
        return;
      }
    }
  }
}

// mtk_topk with values = NULL equals mtk_topk's indices, on every plan path.
void check_dense_indices_only(mtk_context cuda, std::mt19937_64& rng) {
  struct Shape { int64_t rows, n, k; };
  const Shape shapes[] = {{64, 256, 8}, {300, 5000, 100}, {2, 150000, 1024}, {1, 300000, 5000},
                          {4, int64_t(1) << 20, 64}};
  for (const Shape& s : shapes) {
    for (mtk_dtype d : {MTK_FLOAT32, MTK_BFLOAT16, MTK_FLOAT64}) {
      ++cases;
      const std::vector<uint8_t> input = make_input(d, size_t(s.rows * s.n), rng);
      Placed placed{cuda, true, {}};
      const std::vector<uint8_t> output(size_t(s.rows * s.k) * 8, 0xA5);
      mtk_tensor in = matrix_tensor(const_cast<void*>(placed.place(input)), d, s.rows, s.n);
      const mtk_tensor values =
          matrix_tensor(const_cast<void*>(placed.place(output)), d, s.rows, s.k);
      const mtk_tensor with = matrix_tensor(const_cast<void*>(placed.place(output)), MTK_INT64,
                                            s.rows, s.k);
      const mtk_tensor without = matrix_tensor(const_cast<void*>(placed.place(output)),
                                               MTK_INT64, s.rows, s.k);
      CHECK_OK(mtk_topk(cuda, &in, s.k, 1, 1, 1, &values, &with, nullptr));
      CHECK_OK(mtk_topk(cuda, &in, s.k, 1, 1, 1, nullptr, &without, nullptr));
      std::vector<uint8_t> a(output.size()), b(output.size());
      CHECK_OK(mtk_memcpy(cuda, a.data(), with.data, a.size(), MTK_COPY_DEVICE_TO_HOST, nullptr));
      CHECK_OK(mtk_memcpy(cuda, b.data(), without.data, b.size(), MTK_COPY_DEVICE_TO_HOST,
                          nullptr));
      CHECK_OK(mtk_synchronize(cuda, nullptr));
      if (a != b) {
        std::fprintf(stderr,
                     "FAIL indices only: %s rows=%lld n=%lld k=%lld differ from mtk_topk's\n",
                     dtype_label(d), (long long)s.rows, (long long)s.n, (long long)s.k);
        ++failures;
      }
    }
  }
}

// A CUDA graph of one ragged call, captured once: replays after the lengths and starts change
// on the device (copies in the same stream, outside the graph) give each new windows' results.
void check_graph_replay(mtk_context cuda, mtk_context cpu, std::mt19937_64& rng) {
  const Case c{MTK_FLOAT32, 64, 100000, 2048, MTK_INT32, true, MTK_INT64, Transform::None, 1,
               false, true, true, true, false};
  const std::vector<uint8_t> input = make_input(c.dtype, size_t(c.rows * c.n), rng);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Placed placed{cuda, true, {}};
  const std::vector<uint8_t> zeros(size_t(c.rows * c.k) * 8, 0);
  mtk_tensor in = matrix_tensor(const_cast<void*>(placed.place(input)), c.dtype, c.rows, c.n);
  const mtk_tensor values = matrix_tensor(const_cast<void*>(placed.place(zeros)), c.dtype,
                                          c.rows, c.k);
  const mtk_tensor indices = matrix_tensor(const_cast<void*>(placed.place(zeros)), MTK_INT64,
                                           c.rows, c.k);
  const std::vector<uint8_t> vector_zeros(size_t(c.rows) * 8, 0);
  const mtk_tensor lengths = vector_tensor(placed.place(vector_zeros), MTK_INT32, c.rows);
  const mtk_tensor starts = vector_tensor(placed.place(vector_zeros), MTK_INT64, c.rows);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths;
  params.starts = &starts;
  // The first call outside the capture: plans and scratch are made there.
  CHECK_OK(mtk_topk_ragged(cuda, &in, c.k, 1, 1, &params, &values, &indices, stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CHECK_OK(mtk_topk_ragged(cuda, &in, c.k, 1, 1, &params, &values, &indices, stream));
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    ++cases;
    std::vector<int64_t> new_lengths(size_t(c.rows)), new_starts(size_t(c.rows));
    for (int64_t r = 0; r < c.rows; ++r) {
      new_lengths[size_t(r)] = int64_t(rng() % uint64_t(c.n + 100)) - 50;
      new_starts[size_t(r)] = int64_t(rng() % uint64_t(c.n / 2));
    }
    const std::vector<uint8_t> length_bytes = row_vector_bytes(new_lengths, MTK_INT32);
    const std::vector<uint8_t> start_bytes = row_vector_bytes(new_starts, MTK_INT64);
    CHECK_OK(mtk_memcpy(cuda, lengths.data, length_bytes.data(), length_bytes.size(),
                        MTK_COPY_HOST_TO_DEVICE, stream));
    CHECK_OK(mtk_memcpy(cuda, starts.data, start_bytes.data(), start_bytes.size(),
                        MTK_COPY_HOST_TO_DEVICE, stream));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    Outputs got{std::vector<uint8_t>(size_t(c.rows * c.k) * 4),
                std::vector<uint8_t>(size_t(c.rows * c.k) * 8)};
    CHECK_OK(mtk_memcpy(cuda, got.values.data(), values.data, got.values.size(),
                        MTK_COPY_DEVICE_TO_HOST, stream));
    CHECK_OK(mtk_memcpy(cuda, got.indices.data(), indices.data, got.indices.size(),
                        MTK_COPY_DEVICE_TO_HOST, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    Buffers b;
    b.input = input;
    b.lengths = length_bytes;
    b.starts = start_bytes;
    const Outputs want = run(cpu, false, c, b);
    if (want.values != got.values || want.indices != got.indices) {
      // Where: the first differing entry, its row's window, and whether the same call made
      // outside the graph differs too.
      int64_t at = 0;
      const auto* wi = reinterpret_cast<const int64_t*>(want.indices.data());
      const auto* gi = reinterpret_cast<const int64_t*>(got.indices.data());
      const auto* wv = reinterpret_cast<const uint32_t*>(want.values.data());
      const auto* gv = reinterpret_cast<const uint32_t*>(got.values.data());
      while (at < c.rows * c.k && wi[at] == gi[at] && wv[at] == gv[at]) ++at;
      const int64_t r = at / c.k;
      const Outputs direct = run(cuda, true, c, b);
      std::fprintf(stderr,
                   "FAIL graph replay %d: results differ from the CPU backend's: row %lld "
                   "(length %lld start %lld) rank %lld: index %lld value %08x, CPU %lld %08x; "
                   "the same call outside the graph %s\n",
                   replay, (long long)r, (long long)new_lengths[size_t(r)],
                   (long long)new_starts[size_t(r)], (long long)(at % c.k), (long long)gi[at],
                   gv[at], (long long)wi[at], wv[at],
                   direct.values == want.values && direct.indices == want.indices
                       ? "matches" : "differs too");
      ++failures;
    }
  }
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  CHECK_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_backend_runs()) return 2;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const auto [cuda, cpu] = create_contexts();
  std::mt19937_64 rng(20261203);

  // (rows, n, k): the block kernel (many rows, or short ones), the multi-block pipeline (few
  // long rows), k past n, past the shared-memory sort (4096) and at it (2048).
  struct Shape { int64_t rows, n, k; };
  const Shape shapes[] = {{1, 1, 1},         {3, 50, 512},       {300, 1000, 1},
                          {2000, 3000, 512}, {1200, 5000, 2048}, {300, 4000, 512},
                          {200, 9000, 2048}, {7, 3000, 4096},    {2, 70000, 512},
                          {5, 200000, 2048}, {3, 100000, 4096},  {1, int64_t(1) << 20, 2048},
                          {300, 300, 4096}};
  const mtk_dtype dtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_INT32, MTK_FLOAT64};
  const Transform transforms[] = {Transform::None, Transform::Ragged, Transform::PageTable};
  for (const Shape& s : shapes) {
    if (quick && s.rows * s.n > (int64_t(1) << 18)) continue;
    for (mtk_dtype d : dtypes) {
      for (Transform transform : transforms) {
        const uint64_t pick = rng();
        Case c{d, s.rows, s.n, s.k,
               (pick & 1) ? MTK_INT32 : MTK_INT64,
               (pick & 2) != 0,
               (pick & 4) ? MTK_INT32 : MTK_INT64,
               transform,
               (pick & 8) ? 64 : 1,
               (pick & 16) != 0,
               (pick & 32) != 0,
               (pick & 64) != 0,
               (pick & 128) != 0,
               (pick & 256) != 0};
        check(cuda, cpu, c, rng);
      }
    }
  }
  // Page sizes 1 and 64 with row_to_batch, values or not, on both plans.
  for (const Shape& s : {Shape{100, 5000, 512}, Shape{2, 300000, 2048}}) {
    if (quick && s.rows * s.n > (int64_t(1) << 18)) continue;
    for (int64_t page_size : {1, 64}) {
      for (bool with_values : {false, true}) {
        Case c{MTK_BFLOAT16, s.rows, s.n, s.k, MTK_INT32, true, MTK_INT32, Transform::PageTable,
               page_size, true, with_values, true, true, true};
        check(cuda, cpu, c, rng);
      }
    }
  }
  check_dense_indices_only(cuda, rng);
  if (!quick) check_graph_replay(cuda, cpu, rng);
  CHECK_OK(mtk_context_destroy(cuda));
  CHECK_OK(mtk_context_destroy(cpu));
  std::printf("ragged conformance: %d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
