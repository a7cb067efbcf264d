// Randomised exactness test of the CPU backend's top-k, calling the backend directly (below the
// C ABI). The reference ranks elements from their decoded values (not from ordered_key.hpp):
// NaN above everything, -0 == +0, then a stable sort by descending rank, so a shared bug in the
// key mapping cannot hide. Every case compares value bits and indices exactly.
//
// Usage: test_cpu_topk [iterations] [seed]
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "cpu/topk_kernels.hpp"

namespace {

using mtk::RowGeometry;
using mtk::TopkProblem;

const mtk_dtype kDtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_FLOAT64, MTK_INT8,
                             MTK_UINT8,   MTK_INT16,   MTK_INT32,    MTK_INT64};

size_t elem_size(mtk_dtype dtype) { return mtk::dtype_info(dtype)->size; }

float f32_from_bits(uint32_t bits) {
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

double half_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// An element's rank in the contract's order: (is NaN, value). Integers fit a double exactly
// except int64, which is compared as an integer.
struct Rank {
  bool nan;
  double value;
  int64_t integer;
  bool operator<(const Rank& o) const {
    if (nan != o.nan) return o.nan;
    if (nan) return false;
    if (value != o.value) return value < o.value;
    return integer < o.integer;
  }
};

Rank rank_of(mtk_dtype dtype, const unsigned char* p) {
  Rank r{false, 0.0, 0};
  switch (dtype) {
    case MTK_FLOAT32: {
      float v;
      std::memcpy(&v, p, 4);
      r.value = v;
      break;
    }
    case MTK_FLOAT64: std::memcpy(&r.value, p, 8); break;
    case MTK_FLOAT16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      r.value = half_to_double(b);
      break;
    }
    case MTK_BFLOAT16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      r.value = f32_from_bits(uint32_t{b} << 16);
      break;
    }
    case MTK_INT8: r.value = static_cast<int8_t>(*p); break;
    case MTK_UINT8: r.value = *p; break;
    case MTK_INT16: { int16_t v; std::memcpy(&v, p, 2); r.value = v; break; }
    case MTK_INT32: { int32_t v; std::memcpy(&v, p, 4); r.value = v; break; }
    case MTK_INT64: { int64_t v; std::memcpy(&v, p, 8); r.integer = v; break; }
  }
  r.nan = std::isnan(r.value);  // floats widen to double exactly, NaN staying NaN
  if (r.nan) r.value = 0.0;
  if (r.value == 0.0) r.value = 0.0;  // -0 == +0
  return r;
}

// Random element bits that stress the contract: NaNs of both signs and many payloads, infinities,
// signed zeros, heavy ties, or plain random bits.
void fill_random(mtk_dtype dtype, unsigned char* p, size_t count, int style, std::mt19937_64& rng,
                 int64_t spike_period = 0) {
  const size_t size = elem_size(dtype);
  const bool is_float = dtype == MTK_FLOAT32 || dtype == MTK_FLOAT16 || dtype == MTK_BFLOAT16 ||
                        dtype == MTK_FLOAT64;
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    const uint64_t pick = rng() % 16;
    if (style == 1) {  // tie-heavy: a few small values
      bits = rng() % 4;
      if (is_float) {
        // encode small integers as floats of that width
        const double v = double(int(rng() % 5) - 2);
        const float f = float(v);
        uint32_t f_bits;
        std::memcpy(&f_bits, &f, 4);
        if (dtype == MTK_FLOAT32) {
          bits = f_bits;
        } else if (dtype == MTK_FLOAT64) {
          std::memcpy(&bits, &v, 8);
        } else if (dtype == MTK_BFLOAT16) {
          bits = f_bits >> 16;
        } else {  // float16 encodings of -2, -1, 0, 1, 2
          const uint16_t table[] = {0xc000, 0xbc00, 0x0000, 0x3c00, 0x4000};
          bits = table[int(v) + 2];
        }
        if (pick == 0) bits |= uint64_t{1} << (size * 8 - 1);  // some -0.0 among the +0.0
      }
    } else if (style == 2 && is_float && pick < 6) {  // specials
      const int exp_bits = dtype == MTK_FLOAT64 ? 11 : dtype == MTK_FLOAT16 ? 5 : 8;
      const int mant_bits = int(size) * 8 - 1 - exp_bits;
      const uint64_t exp_mask = ((uint64_t{1} << exp_bits) - 1) << mant_bits;
      const uint64_t sign = (rng() & 1) ? uint64_t{1} << (size * 8 - 1) : 0;
      const uint64_t payload = 1 + rng() % ((uint64_t{1} << mant_bits) - 1);
      if (pick < 3) bits = sign | exp_mask | payload;  // NaN
      else if (pick < 5) bits = sign | exp_mask;       // infinity
      else bits = sign;                                // zero of either sign
    } else if (style == 3) {  // ascending: every element beats the running threshold
      bits = i;
    } else if (style == 4) {  // descending
      bits = ~uint64_t(i);
    } else if (style == 5) {  // large spikes every spike_period elements (float32 or int32 only)
      const bool spike = i % uint64_t(spike_period) == 0;
      if (dtype == MTK_FLOAT32) {
        const float v = spike ? 1000.0f + float(rng() % 1000) : float(rng() % 1000) / 1000.0f;
        std::memcpy(&bits, &v, 4);
      } else {
        bits = spike ? 1000000 + rng() % 1000 : rng() % 1000;
      }
    }
    std::memcpy(p + i * size, &bits, size);
  }
}

// A random strided layout over `ndim` dims with the given sizes: strides of a permuted
// contiguous layout, some stepped and some negative, and (input only) zero strides.
struct Layout {
  std::vector<int64_t> strides;
  int64_t min_offset = 0, span = 1;  // element offsets range over [min_offset, min_offset + span)
};

enum class LayoutKind {
  Contiguous,
  Random,
  RowsAdjacent,  // the innermost batch dim has stride 1 and the top-k dim the next stride
};

Layout random_layout(const std::vector<int64_t>& sizes, bool allow_zero, LayoutKind kind,
                     std::mt19937_64& rng) {
  const size_t nd = sizes.size();
  std::vector<size_t> order(nd);
  for (size_t i = 0; i < nd; ++i) order[i] = nd - 1 - i;  // innermost first
  if (kind == LayoutKind::Random) std::shuffle(order.begin(), order.end(), rng);
  if (kind == LayoutKind::RowsAdjacent && nd >= 2) std::swap(order[0], order[1]);
  Layout l;
  l.strides.assign(nd, 0);
  int64_t running = kind == LayoutKind::Random ? 1 + int64_t(rng() % 2) : 1;
  for (size_t d : order) {
    if (allow_zero && kind == LayoutKind::Random && rng() % 6 == 0) {
      l.strides[d] = 0;
      continue;
    }
    l.strides[d] = running;
    running *= sizes[d];
    if (kind == LayoutKind::Random && rng() % 4 == 0) running += int64_t(rng() % 3);
  }
  if (kind == LayoutKind::Random)
    for (size_t d = 0; d < nd; ++d)
      if (rng() % 4 == 0) l.strides[d] = -l.strides[d];
  int64_t lo = 0, hi = 0;
  for (size_t d = 0; d < nd; ++d) {
    const int64_t extent = (sizes[d] - 1) * l.strides[d];
    if (extent < 0) lo += extent; else hi += extent;
  }
  l.min_offset = lo;
  l.span = hi - lo + 1;
  return l;
}

struct Case {
  mtk_dtype dtype;
  mtk_dtype index_dtype;
  bool largest, sorted;
  std::vector<int64_t> batch;  // batch sizes, outermost first
  int64_t n, k;
  int style;
  LayoutKind layout;
  int threads;
  int64_t spike_period = 0;  // style 5
};

std::string describe(const Case& c) {
  std::string s = std::string(mtk::dtype_name(c.dtype)) + " batch=[";
  for (int64_t b : c.batch) s += std::to_string(b) + ",";
  s += "] n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
       " largest=" + std::to_string(c.largest) + " sorted=" + std::to_string(c.sorted) +
       " style=" + std::to_string(c.style) + " layout=" + std::to_string(int(c.layout)) +
       " threads=" + std::to_string(c.threads) +
       " index=" + (c.index_dtype == MTK_INT64 ? "int64" : "int32");
  return s;
}

bool same_as_baseline_kernels(TopkProblem p, const std::vector<unsigned char>& values,
                              const std::vector<unsigned char>& indices, int threads) {
  std::vector<unsigned char> values2(values.size(), 0xAB), indices2(indices.size(), 0xCD);
  p.values = values2.data() + (static_cast<unsigned char*>(p.values) - values.data());
  p.indices = indices2.data() + (static_cast<unsigned char*>(p.indices) - indices.data());
  mtk::cpu::ThreadPool pool(threads);
  const mtk::cpu::TopkPlan plan = mtk::cpu::make_topk_plan(p, pool.num_threads());
  std::vector<std::vector<unsigned char>> storage(size_t(plan.workers) + 1);
  storage[0].resize(plan.shared_bytes + mtk::cpu::kScratchAlign);
  std::vector<std::byte*> workers;
  auto aligned = [](std::vector<unsigned char>& v) {
    const auto address = reinterpret_cast<uintptr_t>(v.data());
    return reinterpret_cast<std::byte*>(v.data() + (-address & (mtk::cpu::kScratchAlign - 1)));
  };
  for (int w = 0; w < plan.workers; ++w) {
    storage[w + 1].resize(plan.worker_bytes + mtk::cpu::kScratchAlign);
    workers.push_back(aligned(storage[w + 1]));
  }
  mtk::cpu::ScratchView view{aligned(storage[0]), workers.data()};
  mtk::cpu::generic::run_topk(p, plan, pool, view);
  return values2 == values && indices2 == indices;
}

// Runs one case; returns false (after printing why) on a mismatch.
bool run_case(mtk::Backend& backend, const Case& c, std::mt19937_64& rng, bool use_workspace) {
  const size_t size = elem_size(c.dtype);
  std::vector<int64_t> in_sizes = c.batch, out_sizes = c.batch;
  in_sizes.push_back(c.n);
  out_sizes.push_back(c.k);
  const Layout in = random_layout(in_sizes, true, c.layout, rng);
  const Layout vals = random_layout(out_sizes, false, c.layout, rng);
  const Layout idxs = random_layout(out_sizes, false, c.layout, rng);
  const size_t index_size = c.index_dtype == MTK_INT64 ? 8 : 4;

  std::vector<unsigned char> input(size_t(in.span) * size);
  fill_random(c.dtype, input.data(), size_t(in.span), c.style, rng, c.spike_period);
  std::vector<unsigned char> values(size_t(vals.span) * size, 0xAB);
  std::vector<unsigned char> indices(size_t(idxs.span) * index_size, 0xCD);

  TopkProblem p{};
  p.dtype = c.dtype;
  p.index_dtype = c.index_dtype;
  p.largest = c.largest;
  p.sorted = c.sorted;
  RowGeometry& g = p.geometry;
  g.n = c.n;
  g.k = c.k;
  g.batch_ndim = int(c.batch.size());
  g.rows = 1;
  for (size_t d = 0; d < c.batch.size(); ++d) {
    g.batch_sizes[d] = c.batch[d];
    g.rows *= c.batch[d];
    g.input_batch_strides[d] = in.strides[d];
    g.values_batch_strides[d] = vals.strides[d];
    g.indices_batch_strides[d] = idxs.strides[d];
  }
  g.input_stride = in.strides.back();
  g.values_stride = vals.strides.back();
  g.indices_stride = idxs.strides.back();
  p.input = input.data() + (-in.min_offset) * int64_t(size);
  p.values = values.data() + (-vals.min_offset) * int64_t(size);
  p.indices = indices.data() + (-idxs.min_offset) * int64_t(index_size);

  backend.set_num_threads(c.threads);
  std::vector<unsigned char> workspace;
  mtk::Workspace ws;
  const std::shared_ptr<const mtk::PlannedTopk> plan = backend.plan_topk(p);
  if (use_workspace) {
    workspace.resize(plan->workspace_bytes + 3);
    ws.data = workspace.data() + 3;  // deliberately misaligned
    ws.bytes = workspace.size() - 3;
  }
  backend.run_topk(*plan, p, ws, nullptr);

  // sorted=false promises the same output every time: with another thread count (and so
  // another split of the rows), the bytes must not change.
  if (!c.sorted) {
    const std::vector<unsigned char> first_values = values, first_indices = indices;
    backend.set_num_threads(c.threads % 4 + 1);
    backend.run_topk(*backend.plan_topk(p), p, mtk::Workspace{}, nullptr);
    if (values != first_values || indices != first_indices) {
      std::printf("FAIL sorted=false output changed with the thread count: %s\n",
                  describe(c).c_str());
      return false;
    }
  }

  // The backend runs the best kernels for this CPU; the baseline build must agree bit for bit.
  if (!same_as_baseline_kernels(p, values, indices, c.threads)) {
    std::printf("FAIL baseline kernels differ: %s\n", describe(c).c_str());
    return false;
  }

  // Reference, row by row.
  std::vector<int64_t> order(size_t(c.n));
  std::vector<Rank> ranks(size_t(c.n));
  for (int64_t row = 0; row < g.rows; ++row) {
    const mtk::RowOffsets at = mtk::row_offsets(g, row);
    const unsigned char* x = static_cast<const unsigned char*>(p.input) + at.input * int64_t(size);
    for (int64_t i = 0; i < c.n; ++i) {
      ranks[i] = rank_of(c.dtype, x + i * g.input_stride * int64_t(size));
      order[i] = i;
    }
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return c.largest ? ranks[b] < ranks[a] : ranks[a] < ranks[b];
    });
    std::vector<int64_t> got(size_t(c.k));
    for (int64_t j = 0; j < c.k; ++j) {
      const unsigned char* ip = static_cast<const unsigned char*>(p.indices) +
                                (at.indices + j * g.indices_stride) * int64_t(index_size);
      if (index_size == 8) { int64_t v; std::memcpy(&v, ip, 8); got[j] = v; }
      else { int32_t v; std::memcpy(&v, ip, 4); got[j] = v; }
    }
    std::vector<int64_t> want(order.begin(), order.begin() + c.k);
    if (!c.sorted) {  // same selection, any order; values must still match their indices
      std::vector<int64_t> a = got, b = want;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      if (a != b) {
        std::printf("FAIL (unsorted selection) row %" PRId64 ": %s\n", row, describe(c).c_str());
        return false;
      }
    }
    for (int64_t j = 0; j < c.k; ++j) {
      const int64_t index = c.sorted ? want[j] : got[j];
      if (c.sorted && got[j] != want[j]) {
        std::printf("FAIL index row %" PRId64 " pos %" PRId64 ": got %" PRId64 " want %" PRId64
                    ": %s\n", row, j, got[j], want[j], describe(c).c_str());
        return false;
      }
      const unsigned char* vp = static_cast<const unsigned char*>(p.values) +
                                (at.values + j * g.values_stride) * int64_t(size);
      if (std::memcmp(vp, x + index * g.input_stride * int64_t(size), size) != 0) {
        std::printf("FAIL value bits row %" PRId64 " pos %" PRId64 ": %s\n", row, j,
                    describe(c).c_str());
        return false;
      }
    }
  }
  return true;
}

// Sizes chosen to straddle the kernels' switch points: the 32-element scan block, the
// insertion/buffer selector switch at k = 16, the 1024-word minimum candidate buffer, the
// 2048-element gather piece, the 4096-element short-row limit, tiles of 128 bytes / 512 KiB and
// row splitting at 2^17 elements.
const int64_t kSizes[] = {1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 255, 256, 257, 1023, 1024,
                          1025, 2047, 2048, 2049, 4095, 4096, 4097, 9000};

int64_t pick_k(int64_t n, std::mt19937_64& rng) {
  const int64_t choices[] = {1, n, std::max<int64_t>(1, n / 2), std::min<int64_t>(n, 8),
                             std::min<int64_t>(n, 16), std::min<int64_t>(n, 17),
                             std::min<int64_t>(n, 300), 1 + int64_t(rng() % uint64_t(n))};
  return choices[rng() % 8];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 3000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 12345;
  std::mt19937_64 rng(seed);
  std::unique_ptr<mtk::Backend> backend = mtk::make_cpu_backend(0);
  int failures = 0, cases = 0;

  auto random_case = [&](int64_t n, int64_t max_rows) {
    Case c;
    c.dtype = kDtypes[rng() % 9];
    c.index_dtype = rng() % 2 ? MTK_INT64 : MTK_INT32;
    c.largest = rng() % 3 != 0;
    c.sorted = rng() % 4 != 0;
    const int batch_ndim = int(rng() % 4);
    int64_t rows = 1;
    for (int d = 0; d < batch_ndim; ++d) {
      const int64_t b = 1 + int64_t(rng() % 6);
      if (rows * b > max_rows) break;
      c.batch.push_back(b);
      rows *= b;
    }
    c.n = n;
    c.k = pick_k(n, rng);
    c.style = int(rng() % 5);
    c.layout = rng() % 3 == 0 ? LayoutKind::Contiguous : LayoutKind::Random;
    c.threads = 1 + int(rng() % 4);
    return c;
  };

  for (int it = 0; it < iterations; ++it) {
    const Case c = random_case(kSizes[rng() % (sizeof kSizes / sizeof kSizes[0])], 60);
    ++cases;
    if (!run_case(*backend, c, rng, rng() % 4 == 0)) ++failures;
  }

  // Rows adjacent in memory with a strided dim (dim 0 of a matrix and the like): the tiled path.
  for (mtk_dtype dtype : kDtypes) {
    for (int64_t k : {1, 8, 17, 100}) {
      for (int style = 0; style < 5; ++style) {
        Case c = random_case(70 + int64_t(rng() % 200), 1);
        c.dtype = dtype;
        c.k = std::min(k, c.n);
        c.style = style;
        c.batch = {1 + int64_t(rng() % 3), 3 + int64_t(rng() % 300)};
        c.layout = LayoutKind::RowsAdjacent;
        ++cases;
        if (!run_case(*backend, c, rng, rng() % 2 == 0)) ++failures;
      }
    }
  }

  for (int it = 0; it < 40; ++it) {  // long rows: row splitting, multi-prune buffers
    Case c = random_case((int64_t{1} << 17) + int64_t(rng() % 200000), 3);
    c.k = std::vector<int64_t>{1, 8, 50, 300, 1024, 5000}[rng() % 6];
    ++cases;
    if (!run_case(*backend, c, rng, rng() % 2 == 0)) ++failures;
  }

  // A long row whose spikes fall exactly on the positions the buffered selector samples to pick
  // its starting floor, with fewer spikes than k: the floor is too high and the row must be
  // scanned again without it.
  for (mtk_dtype dtype : {MTK_FLOAT32, MTK_INT32}) {
    const int64_t n = 400000;
    Case c{dtype, MTK_INT64, true, true, {}, n, 2000, 5, LayoutKind::Contiguous, 1, n / 1024};
    ++cases;
    if (!run_case(*backend, c, rng, false)) ++failures;
  }

  std::printf("%d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
