// Exhaustive CUDA-backend conformance through the C ABI: every dtype, both directions, sorted
// and unsorted, int64/int32 indices, strided/negative/zero-stride inputs, strided outputs, and
// shapes straddling every switch point of the CUDA plan (warp / block / cluster / multi-block, the
// shared-memory sort limit, candidate-buffer overflow, large k on batched long rows). Each result
// is compared bit for bit with an independent host reference (the first k of a stable order
// under the contract, written here without the library's key mapping) and with the CPU backend.
//
// Usage: cuda_conformance [--quick | --cluster | --cluster-sanitize | --sampled | --large-k]
// (--quick: rows*n <= 50000 and fewer data kinds, for the sanitizers; --cluster: the same few
// data kinds on the cluster kernel's long shapes and three of its dtypes; --cluster-sanitize:
// the cluster kernel's code paths once each in ten launches, for memcheck and racecheck, which
// the quick set's sizes keep off that kernel (check_cluster_for_sanitizers); --sampled: only the
// sampled-threshold plans; --large-k: only k 2048-4096 on batched long rows, check_large_k).
// Exits 0 when every case passes, 1 on the first mismatch class (all mismatches are listed), 2
// when no CUDA device is available.
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

#include "conformance_support.hpp"
#include "metaltopk.h"

namespace {

using namespace conformance;

int failures = 0;
int cases = 0;
// Device runs of each case: the second checks that the result repeats bit for bit. The
// sanitizer sets run each case once, since a sanitizer multiplies every launch's time.
int device_runs = 2;

// ---- the reference's own view of values: (is_nan, numeric value) ----------------------------

double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(double(mant), -24);
  else if (exp == 31) v = mant ? NAN : INFINITY;
  else v = std::ldexp(double(mant | 0x400), exp - 25);
  return sign ? -v : v;
}

double bf16_to_double(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Total order for ranking: NaN above everything; -0 == +0 falls out of double comparison.
// int64 is compared as integers (doubles would merge neighbours).
struct Value {
  bool nan;
  double real;
  int64_t integer;
  bool is_int;
};

Value value_at(const uint8_t* p, mtk_dtype d) {
  Value v{false, 0, 0, false};
  switch (d) {
    case MTK_FLOAT32: { float f; std::memcpy(&f, p, 4); v.nan = std::isnan(f); v.real = f; break; }
    case MTK_FLOAT64: { double f; std::memcpy(&f, p, 8); v.nan = std::isnan(f); v.real = f; break; }
    case MTK_FLOAT16: { uint16_t h; std::memcpy(&h, p, 2); v.real = half_to_double(h); v.nan = std::isnan(v.real); break; }
    case MTK_BFLOAT16: { uint16_t h; std::memcpy(&h, p, 2); v.real = bf16_to_double(h); v.nan = std::isnan(v.real); break; }
    case MTK_INT8: v.is_int = true; v.integer = *reinterpret_cast<const int8_t*>(p); break;
    case MTK_UINT8: v.is_int = true; v.integer = *p; break;
    case MTK_INT16: { int16_t x; std::memcpy(&x, p, 2); v.is_int = true; v.integer = x; break; }
    case MTK_INT32: { int32_t x; std::memcpy(&x, p, 4); v.is_int = true; v.integer = x; break; }
    case MTK_INT64: { int64_t x; std::memcpy(&x, p, 8); v.is_int = true; v.integer = x; break; }
  }
  return v;
}

int compare(const Value& a, const Value& b) {
  if (a.is_int) return a.integer < b.integer ? -1 : a.integer > b.integer ? 1 : 0;
  if (a.nan || b.nan) return int(a.nan) - int(b.nan);
  return a.real < b.real ? -1 : a.real > b.real ? 1 : 0;
}

// ---- random inputs that stress the contract ----------------------------------------------

// Spikes: ones where the CUDA plan's 16384-sample threshold looks on rows of 2^22 (every 256th
// element from the 128th), zeros elsewhere, so the sample promises more candidates than exist.
enum class Data { Random, Special, FewDistinct, AllEqual, Ascending, Spikes };
const char* data_label(Data d) {
  static const char* names[] = {"random", "special", "few-distinct", "all-equal", "ascending",
                                "spikes"};
  return names[int(d)];
}

// Elements [begin, end) of the input, drawn from rng.
void fill_range(std::vector<uint8_t>& bytes, size_t begin, size_t end, mtk_dtype d, Data kind,
                std::mt19937_64& rng) {
  const size_t size = dtype_size(d);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::uniform_int_distribution<int> small(-2, 2);
  for (size_t i = begin; i < end; ++i) {
    uint64_t raw = rng();
    double x;
    switch (kind) {
      case Data::Random: x = normal(rng); break;
      case Data::Special: x = normal(rng); break;
      case Data::FewDistinct: x = small(rng); break;
      case Data::AllEqual: x = 1; break;
      case Data::Spikes: x = i % 256 == 128 ? 1 : 0; break;
      default: x = double(i % 100000) - 500; break;
    }
    uint8_t* p = bytes.data() + i * size;
    const bool special = kind == Data::Special && raw % 5 == 0;
    const int which = int((raw >> 8) % 8);
    switch (d) {
      case MTK_FLOAT32: {
        float f = float(x);
        uint32_t b;
        std::memcpy(&b, &f, 4);
        if (special) {
          const uint32_t specials[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u,
                                       0x7f800000u, 0xff800000u, 0x80000000u, 0x00000000u};
          b = specials[which];
        }
        std::memcpy(p, &b, 4);
        break;
      }
      case MTK_FLOAT64: {
        uint64_t b;
        std::memcpy(&b, &x, 8);
        if (special) {
          const uint64_t specials[] = {0x7ff8000000000000ull, 0xfff8000000000000ull,
                                       0x7ff0000000000001ull, 0xfff0000000abcdefull,
                                       0x7ff0000000000000ull, 0xfff0000000000000ull,
                                       0x8000000000000000ull, 0ull};
          b = specials[which];
        }
        std::memcpy(p, &b, 8);
        break;
      }
      case MTK_FLOAT16: case MTK_BFLOAT16: {
        uint16_t b;
        if (d == MTK_BFLOAT16) {
          float f = float(x);
          uint32_t w;
          std::memcpy(&w, &f, 4);
          b = uint16_t(w >> 16);
        } else {
          // Small integers and halves are exact in f16; the generator's reals round coarsely.
          const double r = std::round(x * 16) / 16;
          const bool neg = r < 0 || (r == 0 && std::signbit(r));
          double a = std::fabs(r);
          uint16_t bits = 0;
          if (a != 0) {
            int e;
            const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
            const int biased = e - 1 + 15;
            const uint16_t mant = uint16_t(std::lround((m * 2 - 1) * 1024)) & 0x3ff;
            bits = uint16_t((biased << 10) | mant);
          }
          b = uint16_t(bits | (neg ? 0x8000 : 0));
        }
        if (special) {
          const uint16_t specials16[] = {0x7e00, 0xfe00, 0x7c01, 0xfc23, 0x7c00, 0xfc00, 0x8000, 0};
          const uint16_t specialsbf[] = {0x7fc0, 0xffc0, 0x7f81, 0xff92, 0x7f80, 0xff80, 0x8000, 0};
          b = d == MTK_FLOAT16 ? specials16[which] : specialsbf[which];
        }
        std::memcpy(p, &b, 2);
        break;
      }
      default: {
        int64_t v = int64_t(std::llround(x * (kind == Data::Random ? 1000 : 1)));
        if (kind == Data::Special) v = int64_t(raw);  // full range, extremes included
        if (kind == Data::Special && which == 0) v = INT64_MIN;
        switch (d) {
          case MTK_INT8: { int8_t t = int8_t(v); std::memcpy(p, &t, 1); break; }
          case MTK_UINT8: { uint8_t t = uint8_t(v); std::memcpy(p, &t, 1); break; }
          case MTK_INT16: { int16_t t = int16_t(v); std::memcpy(p, &t, 2); break; }
          case MTK_INT32: { int32_t t = int32_t(v); std::memcpy(p, &t, 4); break; }
          default: std::memcpy(p, &v, 8); break;
        }
      }
    }
  }
}

// Runs task(i) for every i below `tasks`, on up to that many of the host's threads.
template <class Task>
void on_host_threads(size_t tasks, Task task) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < tasks; i = next++) task(i);
  };
  const size_t threads =
      std::min<size_t>(tasks, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> workers;
  for (size_t t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (std::thread& w : workers) w.join();
}

// Inputs of many elements (the large-k shapes hold up to 2^26) are drawn in chunks of 2^20, each
// from its own generator seeded by rng, on the host's threads; smaller ones in one sequence.
void fill(std::vector<uint8_t>& bytes, size_t count, mtk_dtype d, Data kind, std::mt19937_64& rng) {
  bytes.resize(count * dtype_size(d));
  constexpr size_t kChunk = size_t(1) << 20;
  if (count <= 4 * kChunk) {
    fill_range(bytes, 0, count, d, kind, rng);
    return;
  }
  const size_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<uint64_t> seeds(chunks);
  for (uint64_t& seed : seeds) seed = rng();
  on_host_threads(chunks, [&](size_t c) {
    std::mt19937_64 chunk_rng(seeds[c]);
    fill_range(bytes, c * kChunk, std::min(count, (c + 1) * kChunk), d, kind, chunk_rng);
  });
}

// ---- one case -----------------------------------------------------------------------------

struct Layout {
  const char* name;
  int64_t dim_stride_mult;  // stride along dim, in units of the row's natural stride
  bool reversed;            // negative stride along dim
  bool broadcast_rows;      // zero batch stride
  bool transposed;          // dim is 0 of a [n, rows] buffer
  int64_t out_stride;       // outputs' stride along dim
  int64_t base_offset = 0;  // elements before element 0 (a base pointer off vector alignment)
  bool dim0_outputs = false;  // outputs [k, rows] seen as [rows, k]: consecutive rows adjacent
};

// Element offset of (row, rank) in the outputs.
int64_t output_at(const Layout& layout, int64_t rows, int64_t k, int64_t row, int64_t rank) {
  return (layout.dim0_outputs ? rank * rows + row : row * k + rank) * layout.out_stride;
}

struct Case {
  mtk_dtype dtype;
  int64_t rows, n, k;
  Data data;
  Layout layout;
  bool largest, sorted, index32;
};

// Runs `c` on ctx; returns values (as raw bytes per [row][rank]) and indices.
void run_case(mtk_context ctx, bool device, const Case& c, const std::vector<uint8_t>& buffer,
              int64_t base_elem, mtk_tensor input, std::vector<uint8_t>& values_out,
              std::vector<int64_t>& indices_out, int repeat_check) {
  const size_t size = dtype_size(c.dtype);
  const int64_t out_elems = c.rows * c.k * c.layout.out_stride;
  const size_t index_size = c.index32 ? 4 : 8;
  void* in_dev = nullptr;
  void* val_dev = nullptr;
  void* idx_dev = nullptr;
  std::vector<uint8_t> host_values(out_elems * size, 0xA5), host_indices(out_elems * index_size, 0xA5);
  if (device) {
    CHECK_OK(mtk_malloc(ctx, buffer.size(), &in_dev));
    CHECK_OK(mtk_malloc(ctx, host_values.size(), &val_dev));
    CHECK_OK(mtk_malloc(ctx, host_indices.size(), &idx_dev));
    CHECK_OK(mtk_memcpy(ctx, in_dev, buffer.data(), buffer.size(), MTK_COPY_HOST_TO_DEVICE, nullptr));
    CHECK_OK(mtk_memcpy(ctx, val_dev, host_values.data(), host_values.size(), MTK_COPY_HOST_TO_DEVICE, nullptr));
    CHECK_OK(mtk_memcpy(ctx, idx_dev, host_indices.data(), host_indices.size(), MTK_COPY_HOST_TO_DEVICE, nullptr));
    input.data = static_cast<uint8_t*>(in_dev) + base_elem * size;
  } else {
    input.data = const_cast<uint8_t*>(buffer.data()) + base_elem * size;
    val_dev = host_values.data();
    idx_dev = host_indices.data();
  }
  mtk_tensor values{}, indices{};
  values.dtype = c.dtype;
  indices.dtype = c.index32 ? MTK_INT32 : MTK_INT64;
  values.ndim = indices.ndim = 2;
  values.sizes[0] = indices.sizes[0] = c.rows;
  values.sizes[1] = indices.sizes[1] = c.k;
  values.strides[0] = indices.strides[0] = output_at(c.layout, c.rows, c.k, 1, 0);
  values.strides[1] = indices.strides[1] = output_at(c.layout, c.rows, c.k, 0, 1);
  values.data = val_dev;
  indices.data = idx_dev;
  std::vector<uint8_t> first_values;
  std::vector<uint8_t> first_indices;
  for (int rep = 0; rep < repeat_check; ++rep) {
    CHECK_OK(mtk_topk(ctx, &input, c.k, 1, c.largest, c.sorted, &values, &indices, nullptr));
    if (device) {
      CHECK_OK(mtk_memcpy(ctx, host_values.data(), val_dev, host_values.size(), MTK_COPY_DEVICE_TO_HOST, nullptr));
      CHECK_OK(mtk_memcpy(ctx, host_indices.data(), idx_dev, host_indices.size(), MTK_COPY_DEVICE_TO_HOST, nullptr));
      CHECK_OK(mtk_synchronize(ctx, nullptr));
    }
    if (rep == 0) {
      first_values = host_values;
      first_indices = host_indices;
    } else if (first_values != host_values || first_indices != host_indices) {
      std::fprintf(stderr, "  nondeterministic result on repeat %d\n", rep);
      ++failures;
    }
  }
  if (device) {
    CHECK_OK(mtk_free(ctx, in_dev));
    CHECK_OK(mtk_free(ctx, val_dev));
    CHECK_OK(mtk_free(ctx, idx_dev));
  }
  values_out.assign(c.rows * c.k * size, 0);
  indices_out.assign(c.rows * c.k, 0);
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.k; ++j) {
      const int64_t at = output_at(c.layout, c.rows, c.k, r, j);
      std::memcpy(&values_out[(r * c.k + j) * size], &host_values[at * size], size);
      if (c.index32) {
        int32_t v;
        std::memcpy(&v, &host_indices[at * 4], 4);
        indices_out[r * c.k + j] = v;
      } else {
        std::memcpy(&indices_out[r * c.k + j], &host_indices[at * 8], 8);
      }
    }
  }
  // Strided outputs: the gaps must stay untouched.
  if (c.layout.out_stride > 1) {
    for (int64_t at = 0; at < out_elems; ++at) {
      if (at % c.layout.out_stride == 0) continue;
      if (host_values[at * size] != 0xA5 || host_indices[at * index_size] != 0xA5) {
        std::fprintf(stderr, "  output gap at %lld was written\n", (long long)at);
        ++failures;
        return;
      }
    }
  }
}

bool check_case(const Contexts& ctx, const Case& c, std::mt19937_64& rng, bool verbose) {
  ++cases;
  const size_t size = dtype_size(c.dtype);
  // Logical element (row r, position i) of the input.
  const int64_t rows_stored = c.layout.broadcast_rows ? 1 : c.rows;
  std::vector<uint8_t> logical;
  fill(logical, size_t(rows_stored * c.n), c.dtype, c.data, rng);

  // Physical buffer and strides.
  const int64_t step = c.layout.dim_stride_mult;
  int64_t row_stride, dim_stride;
  if (c.layout.transposed) {
    dim_stride = rows_stored * step;
    row_stride = c.layout.broadcast_rows ? 0 : 1;
  } else {
    dim_stride = step;
    row_stride = c.layout.broadcast_rows ? 0 : c.n * step;
  }
  const int64_t extent = (rows_stored - 1) * (c.layout.broadcast_rows ? 0 : (c.layout.transposed ? 1 : c.n * step)) +
                         (c.n - 1) * dim_stride + 1;
  std::vector<uint8_t> buffer(size_t(extent + c.layout.base_offset) * size);
  if (extent + c.layout.base_offset != rows_stored * c.n) {
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = uint8_t(rng());  // garbage in the gaps
  }
  int64_t base = c.layout.base_offset;
  int64_t signed_dim_stride = dim_stride;
  if (c.layout.reversed) {
    base += (c.n - 1) * dim_stride;
    signed_dim_stride = -dim_stride;
  }
  for (int64_t r = 0; r < rows_stored; ++r) {
    for (int64_t i = 0; i < c.n; ++i) {
      const int64_t at = base + r * row_stride + i * signed_dim_stride;
      std::memcpy(&buffer[at * size], &logical[(r * c.n + i) * size], size);
    }
  }
  mtk_tensor input{};
  input.dtype = c.dtype;
  input.ndim = 2;
  input.sizes[0] = c.rows;
  input.sizes[1] = c.n;
  input.strides[0] = row_stride;
  input.strides[1] = signed_dim_stride;

  // Independent reference: the first k of each row's stable order (the contract's order, ties
  // to the lower index), rows spread over the host's threads since the large-k shapes hold tens
  // of millions of elements.
  std::vector<uint8_t> ref_values(c.rows * c.k * size);
  std::vector<int64_t> ref_indices(c.rows * c.k);
  auto reference_rows = [&](int64_t first, int64_t step) {
    std::vector<int64_t> order(c.n);
    std::vector<Value> vals(c.n);
    for (int64_t r = first; r < c.rows; r += step) {
      const int64_t src_row = c.layout.broadcast_rows ? 0 : r;
      for (int64_t i = 0; i < c.n; ++i) vals[i] = value_at(&logical[(src_row * c.n + i) * size], c.dtype);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + c.k, order.end(), [&](int64_t a, int64_t b) {
        const int cmp = compare(vals[a], vals[b]);
        return cmp != 0 ? (c.largest ? cmp > 0 : cmp < 0) : a < b;
      });
      for (int64_t j = 0; j < c.k; ++j) {
        ref_indices[r * c.k + j] = order[j];
        std::memcpy(&ref_values[(r * c.k + j) * size], &logical[(src_row * c.n + order[j]) * size], size);
      }
    }
  };
  // Each task a stride of rows, so that its scratch serves them all.
  const int64_t tasks = c.rows * c.n < (int64_t(1) << 20)
      ? 1 : std::min<int64_t>(c.rows, std::max(1u, std::thread::hardware_concurrency()));
  on_host_threads(size_t(tasks), [&](size_t t) { reference_rows(int64_t(t), tasks); });

  bool ok = true;
  auto compare_with = [&](const char* who, const std::vector<uint8_t>& v, const std::vector<int64_t>& idx) {
    for (int64_t r = 0; r < c.rows && ok; ++r) {
      if (c.sorted) {
        for (int64_t j = 0; j < c.k; ++j) {
          const int64_t at = r * c.k + j;
          if (idx[at] != ref_indices[at] || std::memcmp(&v[at * size], &ref_values[at * size], size) != 0) {
            std::fprintf(stderr, "  %s row %lld rank %lld: index %lld (reference %lld)\n", who,
                         (long long)r, (long long)j, (long long)idx[at], (long long)ref_indices[at]);
            ok = false;
            break;
          }
        }
      } else {
        // Same index set; each value the bit copy of its element.
        std::vector<int64_t> got(idx.begin() + r * c.k, idx.begin() + (r + 1) * c.k);
        std::vector<int64_t> want(ref_indices.begin() + r * c.k, ref_indices.begin() + (r + 1) * c.k);
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        if (got != want) {
          std::fprintf(stderr, "  %s row %lld: unsorted index set differs\n", who, (long long)r);
          ok = false;
        }
        const int64_t src_row = c.layout.broadcast_rows ? 0 : r;
        for (int64_t j = 0; j < c.k && ok; ++j) {
          const int64_t at = r * c.k + j;
          if (idx[at] < 0 || idx[at] >= c.n ||
              std::memcmp(&v[at * size], &logical[(src_row * c.n + idx[at]) * size], size) != 0) {
            std::fprintf(stderr, "  %s row %lld rank %lld: value is not the element's bits\n", who,
                         (long long)r, (long long)j);
            ok = false;
          }
        }
      }
    }
  };
  std::vector<uint8_t> got_values;
  std::vector<int64_t> got_indices;
  run_case(ctx.cuda, true, c, buffer, base, input, got_values, got_indices, device_runs);
  compare_with("cuda", got_values, got_indices);
  if (ok && ctx.cpu != nullptr && c.rows * c.n <= (1 << 22)) {
    run_case(ctx.cpu, false, c, buffer, base, input, got_values, got_indices, 1);
    compare_with("cpu", got_values, got_indices);
  }
  if (!ok || verbose) {
    std::fprintf(ok ? stdout : stderr, "%s %s rows=%lld n=%lld k=%lld data=%s layout=%s largest=%d sorted=%d idx32=%d\n",
                 ok ? "ok  " : "FAIL", dtype_label(c.dtype), (long long)c.rows, (long long)c.n,
                 (long long)c.k, data_label(c.data), c.layout.name, c.largest, c.sorted, c.index32);
  }
  if (!ok) ++failures;
  return ok;
}

// mtk_topk_with_workspace at exactly the reported size, and mtk_topk_alloc, on a multi-block shape.
void check_workspace_and_alloc(mtk_context cuda) {
  const int64_t n = 300000, k = 3000;
  std::vector<float> host(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (auto& x : host) x = normal(rng);
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return host[a] > host[b]; });

  mtk_tensor input{};
  input.dtype = MTK_FLOAT32;
  input.ndim = 1;
  input.sizes[0] = n;
  input.strides[0] = 1;
  CHECK_OK(mtk_malloc(cuda, n * 4, &input.data));
  CHECK_OK(mtk_memcpy(cuda, input.data, host.data(), n * 4, MTK_COPY_HOST_TO_DEVICE, nullptr));
  size_t bytes = 0;
  CHECK_OK(mtk_topk_workspace_size(cuda, &input, k, 0, 1, 1, MTK_INT64, &bytes));
  void* workspace = nullptr;
  CHECK_OK(mtk_malloc(cuda, bytes, &workspace));
  mtk_tensor values = input, indices = input;
  values.sizes[0] = indices.sizes[0] = k;
  indices.dtype = MTK_INT64;
  CHECK_OK(mtk_malloc(cuda, k * 4, &values.data));
  CHECK_OK(mtk_malloc(cuda, k * 8, &indices.data));
  CHECK_OK(mtk_topk_with_workspace(cuda, &input, k, 0, 1, 1, &values, &indices, workspace, bytes, nullptr));
  std::vector<int64_t> got(k);
  CHECK_OK(mtk_memcpy(cuda, got.data(), indices.data, k * 8, MTK_COPY_DEVICE_TO_HOST, nullptr));
  CHECK_OK(mtk_synchronize(cuda, nullptr));
  ++cases;
  if (!std::equal(got.begin(), got.end(), order.begin())) {
    std::fprintf(stderr, "FAIL workspace path (workspace %zu bytes)\n", bytes);
    ++failures;
  }
  // A workspace that starts off any alignment boundary (a caller sub-allocating from a pool).
  void* padded = nullptr;
  CHECK_OK(mtk_malloc(cuda, bytes + 8, &padded));
  const std::vector<int64_t> poison(k, -1);
  CHECK_OK(mtk_memcpy(cuda, indices.data, poison.data(), k * 8, MTK_COPY_HOST_TO_DEVICE, nullptr));
  CHECK_OK(mtk_synchronize(cuda, nullptr));
  CHECK_OK(mtk_topk_with_workspace(cuda, &input, k, 0, 1, 1, &values, &indices,
                                   static_cast<char*>(padded) + 8, bytes, nullptr));
  CHECK_OK(mtk_memcpy(cuda, got.data(), indices.data, k * 8, MTK_COPY_DEVICE_TO_HOST, nullptr));
  CHECK_OK(mtk_synchronize(cuda, nullptr));
  CHECK_OK(mtk_free(cuda, padded));
  ++cases;
  if (!std::equal(got.begin(), got.end(), order.begin())) {
    std::fprintf(stderr, "FAIL workspace at an unaligned address\n");
    ++failures;
  }
  const mtk_status small = mtk_topk_with_workspace(cuda, &input, k, 0, 1, 1, &values, &indices, workspace, bytes - 1, nullptr);
  ++cases;
  if (bytes > 0 && small != MTK_ERROR_INVALID_ARGUMENT) {
    std::fprintf(stderr, "FAIL a workspace one byte short was accepted (%s)\n", mtk_status_string(small));
    ++failures;
  }
  mtk_tensor v_out{}, i_out{};
  CHECK_OK(mtk_topk_alloc(cuda, &input, k, 0, 1, 1, MTK_INT32, &v_out, &i_out, nullptr));
  std::vector<int32_t> got32(k);
  CHECK_OK(mtk_memcpy(cuda, got32.data(), i_out.data, k * 4, MTK_COPY_DEVICE_TO_HOST, nullptr));
  CHECK_OK(mtk_synchronize(cuda, nullptr));
  ++cases;
  if (!std::equal(got32.begin(), got32.end(), order.begin())) {
    std::fprintf(stderr, "FAIL mtk_topk_alloc int32 result\n");
    ++failures;
  }
  CHECK_OK(mtk_tensor_free(cuda, &v_out));
  CHECK_OK(mtk_tensor_free(cuda, &i_out));
  for (void* p : {input.data, workspace, values.data, indices.data}) CHECK_OK(mtk_free(cuda, p));
  mtk_cache_stats stats{};
  CHECK_OK(mtk_context_cache_stats(cuda, &stats));
  std::printf("cache: hits %llu misses %llu entries %llu scratch %llu bytes\n",
              (unsigned long long)stats.hits, (unsigned long long)stats.misses,
              (unsigned long long)stats.entries, (unsigned long long)stats.scratch_bytes);
  ++cases;
  if (stats.misses == 0 || stats.hits == 0) {
    std::fprintf(stderr, "FAIL cache counters did not move\n");
    ++failures;
  }
}

// Calls from threads that have made no CUDA call before: the library launches through the
// driver, which needs the device's context current on the calling thread, and a fresh thread has
// none until the runtime binds it. Each thread calls twice (before and after its thread is
// bound) on its own outputs; the input was written by the main thread.
void check_fresh_threads(mtk_context cuda) {
  const int64_t rows = 64, n = 256, k = 8;
  constexpr int kThreads = 4, kCallsPerThread = 2;
  std::vector<float> host(rows * n);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  for (auto& x : host) x = normal(rng);
  std::vector<int64_t> expected(rows * k);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    const float* row = &host[r * n];
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return row[a] > row[b]; });
    std::copy(order.begin(), order.begin() + k, expected.begin() + r * k);
  }
  mtk_tensor input{};
  input.dtype = MTK_FLOAT32;
  input.ndim = 2;
  input.sizes[0] = rows;
  input.sizes[1] = n;
  input.strides[0] = n;
  input.strides[1] = 1;
  CHECK_OK(mtk_malloc(cuda, rows * n * 4, &input.data));
  CHECK_OK(mtk_memcpy(cuda, input.data, host.data(), rows * n * 4, MTK_COPY_HOST_TO_DEVICE, nullptr));
  CHECK_OK(mtk_synchronize(cuda, nullptr));
  mtk_tensor values[kThreads][kCallsPerThread], indices[kThreads][kCallsPerThread];
  mtk_status statuses[kThreads][kCallsPerThread];
  for (int t = 0; t < kThreads; ++t) {
    for (int c = 0; c < kCallsPerThread; ++c) {
      values[t][c] = input;
      values[t][c].sizes[1] = k;
      values[t][c].strides[0] = k;
      indices[t][c] = values[t][c];
      indices[t][c].dtype = MTK_INT64;
      CHECK_OK(mtk_malloc(cuda, rows * k * 4, &values[t][c].data));
      CHECK_OK(mtk_malloc(cuda, rows * k * 8, &indices[t][c].data));
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCallsPerThread; ++c) {
        statuses[t][c] = mtk_topk(cuda, &input, k, -1, 1, 1, &values[t][c], &indices[t][c], nullptr);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK_OK(mtk_synchronize(cuda, nullptr));
  std::vector<int64_t> got(rows * k);
  for (int t = 0; t < kThreads; ++t) {
    for (int c = 0; c < kCallsPerThread; ++c) {
      ++cases;
      bool ok = statuses[t][c] == MTK_SUCCESS;
      if (ok) {
        CHECK_OK(mtk_memcpy(cuda, got.data(), indices[t][c].data, rows * k * 8,
                            MTK_COPY_DEVICE_TO_HOST, nullptr));
        CHECK_OK(mtk_synchronize(cuda, nullptr));
        ok = got == expected;
      }
      if (!ok) {
        std::fprintf(stderr, "FAIL fresh thread %d, call %d: %s\n", t, c,
                     mtk_status_string(statuses[t][c]));
        ++failures;
      }
      CHECK_OK(mtk_free(cuda, values[t][c].data));
      CHECK_OK(mtk_free(cuda, indices[t][c].data));
    }
  }
  CHECK_OK(mtk_free(cuda, input.data));
}

// Sampled-threshold plans (inputs of 4 MB and more, k small next to the row): the threshold
// hits on random and ascending data (the finish kernel takes the candidates alone, or the
// filter passes narrow them first); on few-distinct and all-equal data the candidates
// overflow, on spikes there are fewer than k, and both fall back to the exact passes over the
// input.
void check_sampled_plans(const Contexts& ctx, std::mt19937_64& rng, bool quick,
                         const Layout& contiguous, const Layout& strided_input) {
  if (!quick) {
    for (mtk_dtype d : {MTK_FLOAT32, MTK_BFLOAT16, MTK_FLOAT64, MTK_INT8, MTK_UINT8}) {
      for (Data data : {Data::Random, Data::Ascending, Data::FewDistinct}) {
        Case c{d, 16, 262144, 64, data, contiguous, data != Data::Ascending, true, d == MTK_UINT8};
        check_case(ctx, c, rng, true);
      }
    }
    Case huge{MTK_FLOAT32, 1, int64_t(1) << 22, 3000, Data::Random, contiguous, true, true, false};
    check_case(ctx, huge, rng, true);
    huge.sorted = false;
    check_case(ctx, huge, rng, true);
    huge.data = Data::AllEqual;
    check_case(ctx, huge, rng, true);
    huge.data = Data::Random;  // more candidates than the finish takes: the filter passes run
    huge.k = 20000;
    check_case(ctx, huge, rng, true);
    huge.data = Data::Spikes;
    huge.k = 20000;
    huge.sorted = true;
    check_case(ctx, huge, rng, true);
    Case strided{MTK_BFLOAT16, 8, 524288, 100, Data::Special, strided_input, true, true, false};
    check_case(ctx, strided, rng, true);
    // 8- and 16-bit keys with more candidates than the finish kernel takes alone (~31k of 4M),
    // so their top digits are histogrammed in the threshold pass and the filter passes run.
    for (mtk_dtype d : {MTK_BFLOAT16, MTK_FLOAT16, MTK_INT16, MTK_UINT8}) {
      for (Data data : {Data::Random, Data::Special, Data::FewDistinct}) {
        Case c{d, 1, int64_t(1) << 22, 20000, data, contiguous, data != Data::Special, true, false};
        check_case(ctx, c, rng, true);
      }
    }
    // A few huge rows with k tiny next to them split their wide sample over blocks, whose tops
    // the threshold pass merges (1 x 2^26 bf16 then has its winners placed by the first filter
    // launch); 64-bit keys, ties and special values in both directions.
    const Case split_cases[] = {
        {MTK_FLOAT32, 1, int64_t(1) << 22, 8, Data::Random, contiguous, true, true, false},
        {MTK_BFLOAT16, 4, int64_t(1) << 22, 200, Data::Special, contiguous, false, true, false},
        {MTK_BFLOAT16, 4, int64_t(1) << 22, 200, Data::FewDistinct, contiguous, true, true, false},
        {MTK_FLOAT64, 2, int64_t(1) << 22, 50, Data::Random, contiguous, false, false, true},
        {MTK_BFLOAT16, 1, int64_t(1) << 26, 1000, Data::Random, contiguous, true, true, false},
    };
    for (const Case& c : split_cases) check_case(ctx, c, rng, true);
    // Sampling rows (150k, k = 50): a wide sample leaves ~210 candidates a row, which the
    // finish kernel ranks by counting. Special values put the threshold among NaN, infinities
    // and zeros, the corners of the raw-value threshold test, in both directions.
    for (mtk_dtype d : {MTK_FLOAT32, MTK_BFLOAT16, MTK_FLOAT16, MTK_FLOAT64, MTK_INT8}) {
      for (Data data : {Data::Random, Data::Special}) {
        for (bool largest : {true, false}) {
          Case c{d, 32, 151936, 50, data, contiguous, largest, true, false};
          check_case(ctx, c, rng, true);
        }
      }
    }
  } else {
    // The sanitizers' share: a threshold that hits without the candidate histogram, one that
    // hits with it, and one whose candidates overflow.
    Case c{MTK_FLOAT32, 2, int64_t(1) << 19, 10, Data::Random, contiguous, true, true, false};
    check_case(ctx, c, rng, true);
    c.rows = 1;
    c.n = int64_t(1) << 20;
    c.k = 100;
    check_case(ctx, c, rng, true);
    c.data = Data::AllEqual;
    check_case(ctx, c, rng, true);
    Case counted{MTK_FLOAT32, 8, 151936, 50, Data::Special, contiguous, false, true, false};
    check_case(ctx, counted, rng, true);  // the finish kernel's counting rank
    Case split{MTK_BFLOAT16, 2, int64_t(1) << 22, 100, Data::Random, contiguous, true, true, false};
    check_case(ctx, split, rng, true);  // a sample split over blocks
  }
}

// Large k on batched long rows (issue #32), the benchmark's shapes: the sampled threshold with
// the wide sample where the narrow one would overflow the threshold threads' slots (k = 4096 on
// rows of 131072 and 262144), the winners of k 2049-4096 radix-sorted per row in their packed
// bits (keys of at most 32 bits: every such width here, largest and smallest first), 64-bit keys
// on the bitonic row sort, and ties and special values that overflow the candidates into the
// exact passes.
void check_large_k(const Contexts& ctx, std::mt19937_64& rng, const Layout& contiguous) {
  struct Shape { int64_t rows, n, k; };
  const Shape shapes[] = {{64, 131072, 2048}, {64, 131072, 4096}, {256, 131072, 4096},
                          {256, 262144, 2048}, {256, 262144, 3000}, {256, 262144, 4096},
                          {64, 1048576, 4096}};
  for (const Shape& s : shapes) {
    for (mtk_dtype d : {MTK_FLOAT32, MTK_BFLOAT16}) {
      for (Data data : {Data::Random, Data::Special, Data::FewDistinct}) {
        const uint64_t pick = rng();
        Case c{d, s.rows, s.n, s.k, data, contiguous, (pick & 1) != 0,
               data != Data::FewDistinct || (pick & 2) != 0, (pick & 4) != 0};
        check_case(ctx, c, rng, true);
      }
    }
  }
  for (mtk_dtype d : {MTK_FLOAT16, MTK_INT32, MTK_INT16, MTK_INT8, MTK_UINT8, MTK_FLOAT64}) {
    for (Data data : {Data::Random, Data::Special, Data::FewDistinct}) {
      for (bool largest : {true, false}) {
        Case c{d, 256, 131072, 4096, data, contiguous, largest, true, false};
        check_case(ctx, c, rng, true);
      }
    }
  }
}

// The cluster kernel (lib/cuda/topk_cluster_kernel.cuh) under memcheck and racecheck: its code
// paths once each, in few launches of few rows, since racecheck makes each of its launches
// about a hundred times slower (the --cluster set, 120 launches, did not finish in 300 s). The
// plan (lib/cuda/topk_plan.cpp) sends a problem there when it is neither Warp nor Block (n > 2048
// here, with few rows), rows <= the clusters the device co-schedules, keys of at most 32 bits
// and k <= 2048, for rows up to 16 blocks x 512 threads x 32 slots = 262144: 8 slots a thread
// up to 65536, 32 above. Each case must plan no scratch, which among these shapes only the
// cluster kernel does, so that a change of the plan cannot silently take the set off it.
// Covered:
//  - key widths 8 (int8, uint8), 16 (bfloat16, float16, int16) and 32 bits (float32, int32),
//    every integer and float conversion once; 64-bit keys never take this kernel;
//  - both kernels and their edges: n = 2049 (the smallest cluster row: blocks 13-15 get no
//    slice, block 12 a short one), 65536 (the largest 8-slot row), 65537 (the smallest
//    32-slot row, its last slice short), 262144 (the largest);
//  - k = 1, middle k and k = 2048 (the limit), sorted (winners gathered and sorted in block 0)
//    and unsorted (each block writes its own in place), largest and smallest first;
//  - data: random (rounds end within the key bits), few distinct values and all equal (the
//    rounds reach the index bits, winners found by composite), NaN, infinities and signed
//    zeros (float), full-range integers;
//  - 1, 2 and 3 rows (row offsets from the cluster's rank), strided, reversed and transposed
//    input, strided output, int32 and int64 indices.
// Not reachable here: a k equal to n (no radix round at all) needs n <= 2048, which never takes
// the cluster kernel.
void check_cluster_for_sanitizers(const Contexts& ctx, std::mt19937_64& rng,
                                  const Layout& contiguous, const Layout& step3,
                                  const Layout& reversed, const Layout& transposed,
                                  const Layout& strided_out) {
  const Case cluster_cases[] = {
      {MTK_FLOAT32, 1, 262144, 2048, Data::Special, contiguous, true, true, false},
      {MTK_FLOAT32, 2, 65537, 1, Data::FewDistinct, contiguous, false, false, true},
      {MTK_FLOAT32, 1, 100000, 500, Data::Random, step3, true, false, false},
      {MTK_BFLOAT16, 1, 2049, 2048, Data::AllEqual, contiguous, true, true, false},
      {MTK_BFLOAT16, 2, 65536, 300, Data::Special, reversed, false, true, true},
      {MTK_FLOAT16, 1, 150000, 1024, Data::Random, strided_out, true, false, false},
      {MTK_INT16, 1, 20000, 2048, Data::FewDistinct, contiguous, false, false, false},
      {MTK_INT8, 1, 262144, 2048, Data::FewDistinct, contiguous, true, true, true},
      {MTK_UINT8, 3, 8193, 50, Data::Special, transposed, false, true, false},
      {MTK_INT32, 1, 262144, 1, Data::Special, contiguous, true, true, false},
  };
  for (const Case& c : cluster_cases) {
    mtk_tensor shape{};
    shape.data = reinterpret_cast<void*>(uintptr_t{4096});  // the size query reads no memory
    shape.dtype = c.dtype;
    shape.ndim = 2;
    shape.sizes[0] = c.rows;
    shape.sizes[1] = c.n;
    shape.strides[0] = c.n;
    shape.strides[1] = 1;
    size_t scratch = 0;
    CHECK_OK(mtk_topk_workspace_size(ctx.cuda, &shape, c.k, 1, c.largest, c.sorted,
                                     c.index32 ? MTK_INT32 : MTK_INT64, &scratch));
    if (scratch != 0) {
      ++cases;
      ++failures;
      std::fprintf(stderr, "FAIL %s rows=%lld n=%lld k=%lld plans %zu bytes of scratch: not the "
                   "cluster kernel on this device\n", dtype_label(c.dtype), (long long)c.rows,
                   (long long)c.n, (long long)c.k, scratch);
      continue;
    }
    check_case(ctx, c, rng, true);
  }
}

int report(Contexts& ctx) {
  CHECK_OK(mtk_context_destroy(ctx.cuda));
  CHECK_OK(mtk_context_destroy(ctx.cpu));
  std::printf("%d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_backend_runs()) return 2;
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool sampled_only = argc > 1 && std::strcmp(argv[1], "--sampled") == 0;
  const bool cluster_only = argc > 1 && std::strcmp(argv[1], "--cluster") == 0;
  const bool cluster_sanitize = argc > 1 && std::strcmp(argv[1], "--cluster-sanitize") == 0;
  const bool large_k_only = argc > 1 && std::strcmp(argv[1], "--large-k") == 0;
  Contexts ctx = create_contexts();
  std::mt19937_64 rng(20261130);

  const mtk_dtype dtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_FLOAT64, MTK_INT8,
                              MTK_UINT8, MTK_INT16, MTK_INT32, MTK_INT64};
  const Layout contiguous{"contiguous", 1, false, false, false, 1};
  const Layout layouts[] = {
      contiguous,
      {"step3", 3, false, false, false, 1},
      {"reversed", 1, true, false, false, 1},
      {"broadcast-rows", 1, false, true, false, 1},
      {"transposed", 1, false, false, true, 1},
      {"strided-out", 1, false, false, false, 2},
  };
  if (sampled_only) {
    check_sampled_plans(ctx, rng, false, contiguous, layouts[1]);
    return report(ctx);
  }
  if (large_k_only) {
    check_large_k(ctx, rng, contiguous);
    return report(ctx);
  }
  if (cluster_sanitize) {
    device_runs = 1;
    check_cluster_for_sanitizers(ctx, rng, contiguous, layouts[1], layouts[2], layouts[4],
                                 layouts[5]);
    return report(ctx);
  }
  // (rows, n, k) straddling: warp (n <= 1024, k <= 32), block (one block per row, k <= 2048),
  // cluster (few rows up to 2^16 and 2^18 elements, keys up to 32 bits, k <= 2048), multi-block
  // (few long rows), the shared sort limit (k 2048/2049), candidate capacity (16384).
  struct Shape { int64_t rows, n, k; };
  const Shape shapes[] = {
      {1, 1, 1}, {3, 2, 2}, {5, 31, 7}, {4, 32, 32}, {7, 33, 1}, {64, 256, 8}, {9, 257, 31},
      {3, 1000, 32}, {2, 1024, 17}, {2, 1025, 8}, {600, 300, 33}, {700, 5000, 100},
      {2, 4095, 4095}, {3, 8193, 50}, {1, 20000, 2048}, {2, 20000, 2049}, {2, 65536, 300},
      {1, 65537, 64}, {1, 70000, 1}, {2, 150000, 1024}, {4, 262144, 2000}, {1, 262145, 9},
      {1, 300000, 5000},
  };
  const Data datas[] = {Data::Random, Data::Special, Data::FewDistinct, Data::AllEqual, Data::Ascending};

  const bool few_data = quick || cluster_only;
  for (const Shape& s : shapes) {
    if (quick && s.rows * s.n > 50000) continue;  // quick: the small set for the sanitizers
    if (cluster_only && (s.n < 65536 || s.n > 262144)) continue;
    for (mtk_dtype d : dtypes) {
      if (cluster_only && d != MTK_FLOAT32 && d != MTK_BFLOAT16 && d != MTK_INT8) continue;
      for (Data data : datas) {
        if (few_data && data != Data::Special && data != Data::FewDistinct) continue;
        const uint64_t pick = rng();
        Case c{d, s.rows, s.n, s.k, data, contiguous, (pick & 1) != 0, (pick & 2) != 0, (pick & 4) != 0};
        if (!c.index32 || s.n < (int64_t(1) << 31)) check_case(ctx, c, rng, false);
      }
    }
    // Every layout, both directions, on two dtypes per shape.
    for (const Layout& layout : layouts) {
      for (mtk_dtype d : {MTK_BFLOAT16, MTK_FLOAT64}) {
        if (cluster_only && d == MTK_FLOAT64) continue;  // 64-bit keys never take that kernel
        for (int largest = 0; largest < 2; ++largest) {
          Case c{d, s.rows, s.n, s.k, Data::Special, layout, largest != 0, true, false};
          check_case(ctx, c, rng, false);
          if (few_data) break;
        }
      }
    }
  }
  if (cluster_only) return report(ctx);
  // Candidate-buffer overflow with one long row of ties (the bucket exceeds capacity twice).
  for (mtk_dtype d : {MTK_FLOAT32, MTK_INT8, MTK_INT64}) {
    Case c{d, 1, quick ? 40000 : 200000, 777, Data::FewDistinct, contiguous, true, true, false};
    check_case(ctx, c, rng, true);
    c.data = Data::AllEqual;
    c.largest = false;
    check_case(ctx, c, rng, true);
  }
  check_sampled_plans(ctx, rng, quick, contiguous, layouts[1]);
  if (!quick) check_large_k(ctx, rng, contiguous);
  // The warp-per-row kernels' own branches: dim-0 rows staged through shared memory by tiles of
  // 32 (row counts that leave the last tile short, dim-0 outputs, padded or reversed columns),
  // vector loads (a base pointer off alignment, rows ending inside a vector: n = 90, 200), and
  // plain float keys (random data) next to their exact fallback (special values).
  const Layout warp_layouts[] = {
      {"dim0-in-out", 1, false, false, true, 1, 0, true},
      {"dim0-offset", 1, false, false, true, 1, 3, false},
      {"dim0-reversed-strided-out", 1, true, false, true, 2, 0, true},
      {"contiguous", 1, false, false, false, 1, 0, false},
      {"offset", 1, false, false, false, 1, 1, false},
  };
  const Shape warp_shapes[] = {{33, 5, 3},   {70, 64, 8},  {64, 128, 32},
                               {45, 256, 8}, {31, 90, 10}, {100, 200, 13}};
  for (const Shape& s : warp_shapes) {
    if (quick && s.n > 256) continue;
    for (const Layout& layout : warp_layouts) {
      for (mtk_dtype d : dtypes) {
        for (Data data : {Data::Random, Data::Special, Data::FewDistinct}) {
          if (quick && data != Data::Special) continue;
          const uint64_t pick = rng();
          Case c{d, s.rows, s.n, s.k, data, layout, (pick & 1) != 0, true, (pick & 4) != 0};
          check_case(ctx, c, rng, false);
        }
      }
    }
  }
  // More rows than one wave of resident warps (8448 of them on an H200 for n <= 128, fewer for
  // longer rows), row counts that are no multiple of a block's rows, a broadcast row (every warp
  // reads the same one), and an unaligned base (element loads).
  const Shape many_row_shapes[] = {{12001, 2, 2}, {9001, 64, 4}, {20001, 256, 8}, {12345, 512, 10}};
  for (const Shape& s : many_row_shapes) {
    if (quick && s.rows * s.n > 50000) continue;
    for (const Layout& layout : {warp_layouts[3], warp_layouts[4], layouts[3]}) {
      for (mtk_dtype d : dtypes) {
        for (Data data : {Data::Random, Data::Special, Data::FewDistinct}) {
          if ((quick || layout.broadcast_rows) && data != Data::Special) continue;
          const uint64_t pick = rng();
          Case c{d, s.rows, s.n, s.k, data, layout, (pick & 1) != 0, true, (pick & 4) != 0};
          check_case(ctx, c, rng, false);
        }
      }
    }
  }
  check_workspace_and_alloc(ctx.cuda);
  check_fresh_threads(ctx.cuda);
  return report(ctx);
}
