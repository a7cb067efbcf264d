// The CUDA warp-per-row kernels (lib/cuda/topk_warp_kernels.cuh) run on the host under
// fiber_cuda.hpp, so CI checks their selection logic without a GPU: every dtype, layouts
// (contiguous, unaligned, strided, reversed, broadcast, dim 0 through both kernels), data kinds
// and both directions, against a stable-sort reference under selection_key; inputs sit against
// a guard page and outputs' gaps must stay untouched. Also checks the kernels' branch-free float keys against
// pack_exact on every 16-bit pattern and on edge and random f32/f64 values.
//
// Usage: test_warp_kernels [--quick]   (--quick: rows up to 300 elements, a third of the cases;
// `make test` runs it). Exits 0 when every case matches.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "fiber_cuda.hpp"
#include "cuda/topk_warp_kernels.cuh"

namespace mtk {
namespace cuda {
alignas(16) unsigned char tile_storage[64 * 1024];
}
}  // namespace mtk

using namespace mtk;
using namespace mtk::cuda;

static int failures = 0, cases = 0;
static std::mt19937_64 rng(12345);

// Memory whose end touches a PROT_NONE page: reading past `bytes` (rounded up to `align`) faults.
struct Guarded {
  char* base = nullptr;
  size_t mapped = 0;
  char* data = nullptr;
  Guarded(size_t bytes, size_t align, size_t shift) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t span = (bytes + shift + align + page - 1) / page * page;
    mapped = span + 2 * page;
    base = static_cast<char*>(mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(base, page, PROT_NONE);
    mprotect(base + page + span, page, PROT_NONE);
    char* end = base + page + span;
    size_t rounded = (bytes + shift + align - 1) / align * align;
    data = end - rounded + shift;
    for (char* p = base + page; p < end; ++p) *p = char(rng());
  }
  ~Guarded() { munmap(base, mapped); }
};

// NearTies: 32- and 64-bit values a few thousand units in the last place apart, near the
// bottom, the top or 1.0 of their range, so that many keys agree above their lowest 10 bits
// (the truncated slots' groups, kTruncatedIndexBits), group 0 included.
enum class Data { Random, Special, FewDistinct, AllEqual, Ascending, Descending, NearTies };
static const char* data_name(Data d) {
  static const char* names[] = {"random",    "special",    "few",      "equal",
                                "ascending", "descending", "near-ties"};
  return names[int(d)];
}

template <class T>
Bits<T> make_value(Data kind, int64_t i, int64_t n) {
  std::normal_distribution<double> normal(0.0, 3.0);
  double x;
  switch (kind) {
    case Data::Random: x = normal(rng); break;
    case Data::Special: x = normal(rng); break;
    case Data::FewDistinct: x = double(int(rng() % 5) - 2); break;
    case Data::AllEqual: x = 1.0; break;
    case Data::Ascending: x = double(i) - double(n) / 2; break;
    case Data::Descending: x = double(n) / 2 - double(i); break;
    default: x = normal(rng); break;  // NearTies of narrow types: nothing to truncate
  }
  Bits<T> b{};
  if constexpr (sizeof(T) >= 4) {
    if (kind == Data::NearTies) {
      const Bits<T> near_one = std::is_same_v<T, float>    ? Bits<T>(0x3f800000u)
                               : std::is_same_v<T, double> ? Bits<T>(0x3ff0000000000000ull)
                                                           : Bits<T>(1000000);
      const Bits<T> bases[] = {near_one, Bits<T>(0), Bits<T>(~Bits<T>(0) - 4096),
                               Bits<T>(Bits<T>(1) << (8 * sizeof(T) - 1))};
      return Bits<T>(bases[rng() % 4] + Bits<T>(rng() % 4096));
    }
  }
  if constexpr (std::is_same_v<T, float>) {
    float f = float(x);
    std::memcpy(&b, &f, 4);
    if (kind == Data::Special && rng() % 3 == 0) {
      const uint32_t s[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7f800000u,
                            0xff800000u, 0x80000000u, 0u, 0x00000001u, 0x80000001u};
      b = s[rng() % 10];
    }
  } else if constexpr (std::is_same_v<T, double>) {
    std::memcpy(&b, &x, 8);
    if (kind == Data::Special && rng() % 3 == 0) {
      const uint64_t s[] = {0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull,
                            0xfff0000000abcdefull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
                            0x8000000000000000ull, 0ull, 1ull, 0x8000000000000001ull};
      b = s[rng() % 10];
    }
  } else if constexpr (std::is_same_v<T, bf16_bits> || std::is_same_v<T, f16_bits>) {
    if (std::is_same_v<T, bf16_bits>) {
      float f = float(x);
      uint32_t w;
      std::memcpy(&w, &f, 4);
      b = uint16_t(w >> 16);
    } else {
      // small integers and halves, exact in f16
      const double r = std::round(x * 2) / 2;
      const bool neg = r < 0;
      double a = std::fabs(r);
      uint16_t bits = 0;
      if (a != 0) {
        int e;
        const double m = std::frexp(a, &e);
        bits = uint16_t(((e - 1 + 15) << 10) | (uint16_t(std::lround((m * 2 - 1) * 1024)) & 0x3ff));
      }
      b = uint16_t(bits | (neg ? 0x8000 : 0));
    }
    if (kind == Data::Special && rng() % 3 == 0) {
      const uint16_t s16[] = {0x7e00, 0xfe00, 0x7c01, 0xfc23, 0x7c00, 0xfc00, 0x8000, 0, 1, 0x8001};
      const uint16_t sbf[] = {0x7fc0, 0xffc0, 0x7f81, 0xff92, 0x7f80, 0xff80, 0x8000, 0, 1, 0x8001};
      b = std::is_same_v<T, f16_bits> ? s16[rng() % 10] : sbf[rng() % 10];
    }
  } else {
    int64_t v = int64_t(std::llround(x * (kind == Data::Random ? 1000 : 1)));
    if (kind == Data::Special) v = int64_t(rng());
    b = Bits<T>(v);
  }
  return b;
}

struct Layout {
  const char* name;
  int64_t dim_stride;   // multiplier of the natural element stride (1 contiguous, 3 strided)
  bool reversed;
  bool broadcast;       // batch stride 0
  bool transposed;      // dim 0: rows adjacent
  int64_t pad;          // extra elements between transposed columns (leading-dim padding)
  size_t shift_bytes;   // base pointer offset from 16-byte alignment
  bool dim0_outputs;    // outputs [k, rows]
  int64_t out_stride;
};

template <class T>
using KeyT = typename KeyTraits<T>::Key;

template <class T>
KeyT<T> key_of(Bits<T> b, bool largest) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return selection_key(v, largest);
}

// Runs the direct kernel that launch_warp_rows picks for these rows, a warp per row.
template <class T, int Items>
void run_direct(const RowGeometry& g, const T* input, void* values, void* indices, bool index64,
                bool largest) {
  const int64_t blocks = (g.rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
  auto run = [&](auto kernel) {
    for (int64_t b = 0; b < blocks; ++b) {
      emu::block_idx.x = unsigned(b);
      emu::run_block(kWarpRowThreads,
                     [&] { kernel(g, input, values, indices, index64, largest); });
    }
  };
  if (rows_are_whole_vectors<T, Items>(g, input)) {
    run(warp_topk_kernel<T, Items, true>);
  } else {
    run(warp_topk_kernel<T, Items, false>);
  }
}

template <class T, int Items>
void run_case(int64_t rows, int64_t n, int64_t k, Data data, const Layout& L, bool largest,
              bool index64, bool use_tile) {
  const size_t size = sizeof(T);
  const int64_t stored_rows = L.broadcast ? 1 : rows;
  std::vector<Bits<T>> logical(size_t(stored_rows * n));
  for (int64_t r = 0; r < stored_rows; ++r)
    for (int64_t i = 0; i < n; ++i) logical[size_t(r * n + i)] = make_value<T>(data, i, n);

  int64_t elem_stride, row_stride, extent;
  if (L.transposed) {
    row_stride = L.broadcast ? 0 : 1;
    elem_stride = (stored_rows + L.pad) * L.dim_stride;
    extent = (n - 1) * elem_stride + (stored_rows - 1) * row_stride + 1;
  } else {
    elem_stride = L.dim_stride;
    row_stride = L.broadcast ? 0 : n * L.dim_stride;
    extent = (stored_rows - 1) * row_stride + (n - 1) * elem_stride + 1;
  }
  Guarded in_mem(size_t(extent) * size, 16, L.shift_bytes);
  Bits<T>* base = reinterpret_cast<Bits<T>*>(in_mem.data);
  int64_t origin = 0, signed_stride = elem_stride;
  if (L.reversed) {
    origin = (n - 1) * elem_stride;
    signed_stride = -elem_stride;
  }
  for (int64_t r = 0; r < stored_rows; ++r)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(&base[origin + r * row_stride + i * signed_stride],
                  &logical[size_t(r * n + i)], size);

  RowGeometry g;
  g.n = n;
  g.k = k;
  g.rows = rows;
  g.batch_ndim = 1;
  g.batch_sizes[0] = rows;
  g.input_batch_strides[0] = row_stride;
  g.input_stride = signed_stride;
  int64_t out_elems;
  if (L.dim0_outputs) {
    g.values_stride = g.indices_stride = rows * L.out_stride;
    g.values_batch_strides[0] = g.indices_batch_strides[0] = L.out_stride;
    out_elems = k * rows * L.out_stride;
  } else {
    g.values_stride = g.indices_stride = L.out_stride;
    g.values_batch_strides[0] = g.indices_batch_strides[0] = k * L.out_stride;
    out_elems = rows * k * L.out_stride;
  }
  std::vector<unsigned char> values(size_t(out_elems) * size, 0xA5);
  std::vector<unsigned char> indices(size_t(out_elems) * 8, 0xA5);
  const T* input = reinterpret_cast<const T*>(base + origin);

  if (use_tile) {
    const size_t bytes = tile_bytes<T>(n);
    for (int64_t b = 0; b * kTileRows < rows; ++b) {
      std::memset(tile_storage, 0xA5, sizeof(tile_storage));
      emu::block_idx.x = unsigned(b);
      emu::run_block(kTileThreads, [&] {
        warp_topk_tile_kernel<T, Items>(g, input, values.data(), indices.data(), index64, largest);
      });
      for (size_t i = bytes; i < sizeof(tile_storage); ++i) {
        if (tile_storage[i] != 0xA5) emu::fail("tile kernel wrote past its shared memory");
      }
    }
  } else {
    run_direct<T, Items>(g, input, values.data(), indices.data(), index64, largest);
  }

  ++cases;
  bool ok = true;
  std::vector<int64_t> order{std::vector<int64_t>(size_t(n))};
  std::vector<char> written(size_t(out_elems), 0);
  for (int64_t r = 0; r < rows && ok; ++r) {
    const int64_t src = L.broadcast ? 0 : r;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return key_of<T>(logical[size_t(src * n + a)], largest) >
             key_of<T>(logical[size_t(src * n + b)], largest);
    });
    for (int64_t j = 0; j < k; ++j) {
      const int64_t at = r * g.values_batch_strides[0] + j * g.values_stride;
      written[size_t(at)] = 1;
      int64_t got;
      if (index64) {
        std::memcpy(&got, &indices[size_t(at) * 8], 8);
      } else {
        int32_t g32;
        std::memcpy(&g32, &indices[size_t(at) * 4], 4);
        got = g32;
      }
      Bits<T> value;
      std::memcpy(&value, &values[size_t(at) * size], size);
      const Bits<T>& expected = logical[size_t(src * n + order[size_t(j)])];
      if (got != order[size_t(j)] || std::memcmp(&value, &expected, size) != 0) {
        std::fprintf(stderr, "  row %lld rank %lld: index %lld, reference %lld\n", (long long)r,
                     (long long)j, (long long)got, (long long)order[size_t(j)]);
        ok = false;
        break;
      }
    }
  }
  for (int64_t e = 0; e < out_elems && ok; ++e) {
    if (written[size_t(e)]) continue;
    for (size_t b = 0; b < size; ++b) {
      if (values[size_t(e) * size + b] != 0xA5) {
        ok = false;
        std::fprintf(stderr, "  value gap %lld written\n", (long long)e);
        break;
      }
    }
    const size_t isz = index64 ? 8 : 4;
    for (size_t b = 0; b < isz && ok; ++b) {
      if (indices[size_t(e) * isz + b] != 0xA5) {
        ok = false;
        std::fprintf(stderr, "  index gap %lld written\n", (long long)e);
      }
    }
  }
  if (!ok) {
    ++failures;
    std::fprintf(stderr,
                 "FAIL %s size=%zu Items=%d rows=%lld n=%lld k=%lld data=%s layout=%s "
                 "largest=%d idx64=%d tile=%d\n",
                 typeid(T).name(), size, Items, (long long)rows, (long long)n, (long long)k,
                 data_name(data), L.name, largest, index64, use_tile);
  }
}

template <class T, int Items>
void run_items(int64_t rows, int64_t n, int64_t k, Data data, const Layout& L, bool largest,
               bool index64) {
  const bool dim0 = L.transposed && !L.broadcast;
  run_case<T, Items>(rows, n, k, data, L, largest, index64, false);
  if constexpr (kTileKernelFits<T, Items>) {
    if (dim0 && tile_bytes<T>(n) <= kTileMaxBytes) {
      run_case<T, Items>(rows, n, k, data, L, largest, index64, true);
    }
  }
}

template <class T>
void run_shape(int64_t rows, int64_t n, int64_t k, Data data, const Layout& L, bool largest,
               bool index64) {
  int items = 1;
  while (items * 32 < n) items *= 2;
  switch (items) {
    case 1: run_items<T, 1>(rows, n, k, data, L, largest, index64); break;
    case 2: run_items<T, 2>(rows, n, k, data, L, largest, index64); break;
    case 4: run_items<T, 4>(rows, n, k, data, L, largest, index64); break;
    case 8: run_items<T, 8>(rows, n, k, data, L, largest, index64); break;
    case 16: run_items<T, 16>(rows, n, k, data, L, largest, index64); break;
    default: run_items<T, 32>(rows, n, k, data, L, largest, index64); break;
  }
}

// Plain keys against selection_key for every 16-bit pattern (scalar and paired).
template <class T>
void check_plain_16() {
  for (uint32_t v = 0; v < 65536; ++v) {
    for (int largest = 0; largest < 2; ++largest) {
      bool special = false;
      const Bits<T> flip = largest ? Bits<T>(0) : Bits<T>(~Bits<T>(0));
      const auto plain = pack_plain<T, false>(Bits<T>(v), 0xfff0, flip, special);
      const auto exact = pack_exact<T, false>(Bits<T>(v), 0xfff0, largest);
      const uint32_t mag = v & 0x7fff;
      const bool is_special = mag == 0 || mag > FloatLayout<T>::kExponent;
      if (special != is_special || (!special && plain != exact)) {
        std::fprintf(stderr, "plain key 16 mismatch %04x largest=%d\n", v, largest);
        ++failures;
        return;
      }
      for (uint32_t other : {0u, 1u, 0x8000u, 0x7f80u, 0x7fc0u, 0xffffu, 0x3c00u, 0xbc00u,
                             0x7c01u, uint32_t(rng() & 0xffff)}) {
        for (int high_half = 0; high_half < 2; ++high_half) {
          const uint32_t word = high_half ? (v << 16) | other : (other << 16) | v;
          uint32_t bits = 0, low = 0, high = 0;
          pack_plain_pair<T>(word, 0xfff0, largest ? 0u : ~0u, bits, low, high);
          const uint32_t mine = high_half ? high : low;
          const uint32_t want = exact - (high_half ? 1 : 0);
          const bool flagged = (bits & (high_half ? 0x80000000u : 0x8000u)) != 0;
          if (flagged != is_special || (!flagged && mine != want)) {
            std::fprintf(stderr, "plain pair mismatch %04x other %04x half %d largest=%d\n",
                         v, other, high_half, largest);
            ++failures;
            return;
          }
        }
      }
    }
  }
}

template <class T>
void check_plain_wide(int count) {
  using B = Bits<T>;
  std::vector<B> values;
  const int bits = int(sizeof(B)) * 8;
  const B sign = B(B(1) << (bits - 1));
  const B exponent = FloatLayout<T>::kExponent;
  for (B base : {B(0), B(1), exponent, B(exponent + 1), B(exponent - 1), B(~B(0) >> 1),
                 B(exponent | (B(1) << (bits - 10)))}) {
    values.push_back(base);
    values.push_back(B(base | sign));
  }
  for (int i = 0; i < count; ++i) values.push_back(B(rng()));
  for (B v : values) {
    for (int largest = 0; largest < 2; ++largest) {
      bool special = false;
      const auto plain = pack_plain<T, false>(v, 77, largest ? B(0) : B(~B(0)), special);
      const auto exact = pack_exact<T, false>(v, 77, largest);
      const B mag = B(v & B(~sign));
      const bool is_special = mag == 0 || mag > exponent;
      if (special != is_special || (!special && plain != exact)) {
        std::fprintf(stderr, "plain key wide mismatch size %zu\n", sizeof(B));
        ++failures;
        return;
      }
    }
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  check_plain_16<bf16_bits>();
  check_plain_16<f16_bits>();
  check_plain_wide<float>(1 << 20);
  check_plain_wide<double>(1 << 20);
  std::printf("plain keys checked, failures %d\n", failures);

  const Layout layouts[] = {
      {"contiguous", 1, false, false, false, 0, 0, false, 1},
      {"shifted", 1, false, false, false, 0, 0, false, 1},  // shift set per dtype below
      {"step3", 3, false, false, false, 0, 0, false, 1},
      {"reversed", 1, true, false, false, 0, 0, false, 1},
      {"broadcast", 1, false, true, false, 0, 0, false, 1},
      {"dim0", 1, false, false, true, 0, 0, true, 1},
      {"dim0-padded-rowsout", 1, false, false, true, 5, 0, false, 2},
      {"dim0-reversed", 1, true, false, true, 0, 0, true, 1},
      {"dim0-shifted", 1, false, false, true, 3, 0, true, 1},
  };
  struct Shape { int64_t rows, n, k; };
  const Shape shapes[] = {{3, 1, 1}, {5, 2, 2}, {33, 5, 3}, {7, 31, 7}, {4, 32, 32}, {9, 33, 1},
                          {70, 64, 8}, {6, 100, 10}, {40, 128, 8}, {5, 200, 13}, {37, 256, 8},
                          {6, 255, 32}, {3, 257, 31}, {5, 300, 16}, {33, 384, 9}, {3, 512, 10},
                          {2, 513, 32}, {2, 777, 5}, {2, 1000, 32}, {2, 1024, 17}};
  const Data datas[] = {Data::Random, Data::Special, Data::FewDistinct, Data::AllEqual,
                        Data::Ascending, Data::Descending, Data::NearTies};
  auto for_dtypes = [&](auto&& f) {
    f(float{}); f(bf16_bits{}); f(f16_bits{}); f(double{}); f(int8_t{}); f(uint8_t{});
    f(int16_t{}); f(int32_t{}); f(int64_t{});
  };
  int combo = 0;
  for (const Shape& s : shapes) {
    if (quick && s.n > 300) continue;
    for (Layout L : layouts) {
      for (Data d : datas) {
        for_dtypes([&](auto tag) {
          using T = decltype(tag);
          ++combo;
          // A third of the cases, rotating through the nine dtypes from one layout and data
          // kind to the next (combo % 3 alone would keep the same three dtypes every time).
          if (quick && (combo + combo / 9) % 3 != 0) return;
          Layout layout = L;
          const std::string name = L.name;
          if (name == "shifted" || name == "dim0-shifted") layout.shift_bytes = sizeof(T);
          const bool largest = (rng() & 1) != 0;
          const bool index64 = (rng() & 2) != 0;
          const int64_t rows = L.transposed ? s.rows : std::min<int64_t>(s.rows, 12);
          run_shape<T>(rows, s.n, s.k, d, layout, largest, index64);
        });
      }
    }
    std::printf("n=%lld done: %d cases, %d failures\n", (long long)s.n, cases, failures);
    std::fflush(stdout);
  }
  std::printf("%d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
