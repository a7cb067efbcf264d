// libFuzzer target over the C ABI's descriptors on the CPU backend: mtk_topk, mtk_topk_alloc,
// mtk_moe_route and the sampling entries (mtk_sampling_with_workspace's four operations) with
// random ranks, sizes, strides, dims, k, dtypes (including unknown enum
// values), output shapes and placements (including overlaps). An oracle of its own decides
// whether each call is valid by the contract:
//  - invalid calls must fail with a caller-error status and a message, write nothing, and leave
//    allocating outputs NULL (their descriptors may point anywhere: they must not be read);
//  - valid calls whose every element lies inside the fuzzer's own buffers must succeed and equal
//    a brute-force reference (bit-exact values, exact indices; index sets when unsorted), and
//    must write nothing outside their output elements;
//  - valid calls that would reach outside those buffers are skipped (the library cannot know
//    where the caller's memory ends).
// The one deliberate leniency: an output the library's conservative self-overlap rule rejects
// although no two elements coincide may fail with that message.
// Ragged rows (mtk_topk_ragged, _workspace_size, _with_workspace) have an oracle of their own,
// described at fuzz_ragged; mtk_register_buffer and mtk_unregister_buffer, which the CPU backend
// refuses whatever they are given, one described at fuzz_registration.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/abi_enums.hpp"
#include "metaltopk.h"
#include "ragged_model.hpp"

extern "C" mtk_status fuzz_topk_alloc_raw(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                          int64_t dim, int largest, int sorted, int index_dtype,
                                          mtk_tensor* values_out, mtk_tensor* indices_out);
extern "C" mtk_status fuzz_sampling_raw(mtk_context ctx, int op, const mtk_tensor* input,
                                        const mtk_sampling_params* params,
                                        const mtk_tensor* uniforms, const mtk_tensor* output,
                                        void* workspace, size_t workspace_bytes);
extern "C" mtk_status fuzz_sampling_workspace_size_raw(mtk_context ctx, int op,
                                                       const mtk_tensor* input,
                                                       const mtk_sampling_params* params,
                                                       int output_dtype, size_t* bytes);

namespace {

constexpr size_t kArenaBytes = 1 << 15;
constexpr unsigned char kSentinel = 0xC3;
constexpr int64_t kMaxWork = 1 << 14;  // elements a valid call may touch, to keep runs fast

alignas(64) unsigned char input_arena[kArenaBytes];
alignas(64) unsigned char values_arena[kArenaBytes];
alignas(64) unsigned char indices_arena[kArenaBytes];
alignas(64) unsigned char bias_arena[4096];
alignas(64) unsigned char params_arena[1 << 13];  // ragged rows' lengths, starts, ... tables

[[noreturn]] void crash(const std::string& what) {
  std::fprintf(stderr, "fuzz_abi: %s\n", what.c_str());
  std::abort();
}

struct DtypeInfo {
  bool known;
  size_t size;
};

DtypeInfo dtype_info(int raw) {
  static const size_t sizes[] = {4, 2, 2, 8, 1, 1, 2, 4, 8};
  if (raw < 0 || raw > 8) return {false, 0};
  return {true, sizes[raw]};
}

// Enum fields hold raw ints here, unknown values included: C++ must never load one as its enum
// type (undefined behaviour), so they are written and read with memcpy.
void set_dtype(mtk_tensor& t, int raw) { std::memcpy(&t.dtype, &raw, sizeof raw); }

int raw_dtype(const mtk_tensor& t) {
  int raw;
  std::memcpy(&raw, &t.dtype, sizeof raw);
  return raw;
}

// What the run exercised, printed at exit: a fuzzer that only ever skips proves nothing.
struct Tally {
  static constexpr int kOps = 6;
  long checked[kOps] = {}, rejected[kOps] = {}, skipped[kOps] = {};
  ~Tally() {
    static const char* names[kOps] = {"mtk_topk", "mtk_topk_alloc", "mtk_moe_route", "sampling",
                                      "mtk_topk_ragged", "registration"};
    for (int op = 0; op < kOps; ++op) {
      std::fprintf(stderr, "fuzz_abi: %-15s %ld valid calls checked against the reference, "
                   "%ld invalid calls rejected, %ld skipped (outside the fuzzer's buffers)\n",
                   names[op], checked[op], rejected[op], skipped[op]);
    }
  }
} tally;

// FUZZ_ABI_VERBOSE=1 prints each call before it is made, to replay a crash by hand.
const bool verbose = std::getenv("FUZZ_ABI_VERBOSE") != nullptr;

void describe(const char* name, const mtk_tensor& t, const void* arena) {
  if (!verbose) return;
  std::fprintf(stderr, "  %s: data=arena%+td dtype=%d ndim=%d sizes=[", name,
               static_cast<const unsigned char*>(t.data) - static_cast<const unsigned char*>(arena),
               raw_dtype(t), t.ndim);
  for (int d = 0; d < std::clamp(t.ndim, 0, MTK_MAX_NDIM); ++d) std::fprintf(stderr, " %lld", static_cast<long long>(t.sizes[d]));
  std::fprintf(stderr, " ] strides=[");
  for (int d = 0; d < std::clamp(t.ndim, 0, MTK_MAX_NDIM); ++d) std::fprintf(stderr, " %lld", static_cast<long long>(t.strides[d]));
  std::fprintf(stderr, " ]\n");
}

// ---- the oracle ------------------------------------------------------------------------------

struct Extent {
  bool ok = true;           // sizes and extents fit int64
  int64_t numel = 0;
  int64_t low = 0, high = 0;  // element offsets reached (valid when numel > 0)
};

Extent extent_of(const mtk_tensor& t) {
  Extent e;
  if (t.ndim < 0 || t.ndim > MTK_MAX_NDIM) {
    e.ok = false;
    return e;
  }
  int64_t numel = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] < 0 || __builtin_mul_overflow(numel, t.sizes[d], &numel)) {
      e.ok = false;
      return e;
    }
  }
  e.numel = numel;
  if (numel == 0) return e;
  for (int d = 0; d < t.ndim; ++d) {
    int64_t reach;
    if (__builtin_mul_overflow(t.sizes[d] - 1, t.strides[d], &reach) ||
        __builtin_add_overflow(reach < 0 ? e.low : e.high, reach, reach < 0 ? &e.low : &e.high)) {
      e.ok = false;
      return e;
    }
  }
  return e;
}

// Byte interval of a non-empty tensor, or false when its byte extent overflows int64 or the
// address range wraps around. An interval that fits is valid even where no memory can be:
// only the caller knows where its memory ends.
bool byte_span(const mtk_tensor& t, const Extent& e, size_t item, uintptr_t* first,
               uintptr_t* last) {
  int64_t lo, hi;
  if (__builtin_mul_overflow(e.low, static_cast<int64_t>(item), &lo) ||
      __builtin_mul_overflow(e.high, static_cast<int64_t>(item), &hi) ||
      __builtin_add_overflow(hi, static_cast<int64_t>(item) - 1, &hi)) {
    return false;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t below = uintptr_t{0} - static_cast<uintptr_t>(lo);  // -lo, for lo <= 0
  if (lo < 0 && base < below) return false;
  if (hi > 0 && UINTPTR_MAX - base < static_cast<uintptr_t>(hi)) return false;
  *first = base + static_cast<uintptr_t>(lo);
  *last = base + static_cast<uintptr_t>(hi);
  return true;
}

bool inside(const mtk_tensor& t, const Extent& e, size_t item, const unsigned char* arena,
            size_t arena_bytes) {
  if (e.numel == 0) return true;
  uintptr_t first, last;
  if (!byte_span(t, e, item, &first, &last)) return false;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(arena);
  return first >= begin && last < begin + arena_bytes;
}

bool spans_overlap(const mtk_tensor& a, const Extent& ea, size_t ia, const mtk_tensor& b,
                   const Extent& eb, size_t ib) {
  if (ea.numel == 0 || eb.numel == 0) return false;
  uintptr_t a0, a1, b0, b1;
  if (!byte_span(a, ea, ia, &a0, &a1) || !byte_span(b, eb, ib, &b0, &b1)) return true;
  return a0 <= b1 && b0 <= a1;
}

// Element offsets of every element, row-major over the sizes.
std::vector<int64_t> element_offsets(const mtk_tensor& t) {
  std::vector<int64_t> out{0};
  for (int d = 0; d < t.ndim; ++d) {
    std::vector<int64_t> next;
    next.reserve(out.size() * static_cast<size_t>(t.sizes[d]));
    for (int64_t base : out)
      for (int64_t i = 0; i < t.sizes[d]; ++i) next.push_back(base + i * t.strides[d]);
    out.swap(next);
  }
  return out;
}

bool has_duplicate_elements(const mtk_tensor& t) {
  if (extent_of(t).numel == 0) return false;  // (strides of empty tensors are unbounded)
  std::vector<int64_t> offsets = element_offsets(t);
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) != offsets.end();
}

// ---- reference ranking ---------------------------------------------------------------------

double half_to_double(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1f) return mantissa ? NAN : sign * INFINITY;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(mantissa + 1024, exponent - 25);
}

// (NaN, value as long double): exact for every supported dtype, -0.0 == +0.0.
struct Rank {
  bool nan;
  long double value;
};

Rank rank_of(int dtype, const unsigned char* p) {
  switch (dtype) {
    case MTK_FLOAT32: { float v; std::memcpy(&v, p, 4); return {std::isnan(v), v}; }
    case MTK_FLOAT16: { uint16_t b; std::memcpy(&b, p, 2); const double v = half_to_double(b); return {std::isnan(v), v}; }
    case MTK_BFLOAT16: {
      uint16_t b; std::memcpy(&b, p, 2);
      const uint32_t wide = static_cast<uint32_t>(b) << 16;
      float v; std::memcpy(&v, &wide, 4);
      return {std::isnan(v), v};
    }
    case MTK_FLOAT64: { double v; std::memcpy(&v, p, 8); return {std::isnan(v), v}; }
    case MTK_INT8: return {false, static_cast<long double>(static_cast<int8_t>(*p))};
    case MTK_UINT8: return {false, static_cast<long double>(*p)};
    case MTK_INT16: { int16_t v; std::memcpy(&v, p, 2); return {false, static_cast<long double>(v)}; }
    case MTK_INT32: { int32_t v; std::memcpy(&v, p, 4); return {false, static_cast<long double>(v)}; }
    case MTK_INT64: { int64_t v; std::memcpy(&v, p, 8); return {false, static_cast<long double>(v)}; }
  }
  crash("rank_of: unknown dtype");
}

// Indices along a row of the first k of a stable sort in the contract's order.
std::vector<int64_t> reference_row(int dtype, size_t item, const unsigned char* row0,
                                   int64_t stride, int64_t n, int64_t k, bool largest) {
  std::vector<Rank> ranks(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) ranks[j] = rank_of(dtype, row0 + j * stride * static_cast<int64_t>(item));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
    const Rank &a = ranks[p], &b = ranks[q];
    if (a.nan != b.nan) return largest ? a.nan : b.nan;
    if (a.nan) return false;
    return largest ? a.value > b.value : a.value < b.value;
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

// ---- random descriptors --------------------------------------------------------------------

// A one-in-n event. FuzzedDataProvider reads an exhausted input as each range's minimum, so the
// event is the range's maximum: short inputs take the common path.
bool rare(FuzzedDataProvider& fdp, int n) { return fdp.ConsumeIntegralInRange<int>(0, n - 1) == n - 1; }

int64_t pick_size(FuzzedDataProvider& fdp) {
  if (!rare(fdp, 16)) return fdp.ConsumeIntegralInRange<int64_t>(0, 7);
  static const int64_t odd[] = {-1, -5, INT64_MIN, INT64_MAX, int64_t{1} << 31,
                                (int64_t{1} << 31) - 1, int64_t{1} << 32, int64_t{1} << 40,
                                int64_t{1} << 62, 3000, 40000};
  return odd[fdp.ConsumeIntegralInRange<size_t>(0, sizeof odd / sizeof odd[0] - 1)];
}

int64_t pick_stride(FuzzedDataProvider& fdp) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 15);
  if (mode < 13) return fdp.ConsumeIntegralInRange<int64_t>(-9, 9);
  static const int64_t odd[] = {INT64_MIN, INT64_MAX, INT64_MAX / 2, INT64_MIN / 3,
                                int64_t{1} << 40, -(int64_t{1} << 33), 1 << 20};
  return odd[fdp.ConsumeIntegralInRange<size_t>(0, sizeof odd / sizeof odd[0] - 1)];
}

int pick_dtype(FuzzedDataProvider& fdp) {
  if (!rare(fdp, 32)) return fdp.ConsumeIntegralInRange<int>(mtk::kFirstDtype, mtk::kLastDtype);
  return fdp.ConsumeIntegral<int>();
}

void contiguous_strides(mtk_tensor& t, const int* order /* outermost first */) {
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    const int d = order[i];
    t.strides[d] = stride;
    stride *= std::max<int64_t>(t.sizes[d], 1);
  }
}

// Strides for `t`: contiguous in a random dim order (with random sign flips), or random. Outputs
// get random strides less often: those mostly alias themselves, which makes the call invalid.
void pick_strides(FuzzedDataProvider& fdp, mtk_tensor& t, bool output = false) {
  if (t.ndim < 0 || t.ndim > MTK_MAX_NDIM) return;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.sizes[d] < 0 || t.sizes[d] > 64) {  // odd sizes: any strides, nothing is reached
      for (int e = 0; e < t.ndim; ++e) t.strides[e] = pick_stride(fdp);
      return;
    }
  }
  if (rare(fdp, output ? 8 : 2)) {
    for (int d = 0; d < t.ndim; ++d) t.strides[d] = pick_stride(fdp);
    return;
  }
  int order[MTK_MAX_NDIM];
  std::iota(order, order + t.ndim, 0);
  for (int i = t.ndim - 1; i > 0; --i) std::swap(order[i], order[fdp.ConsumeIntegralInRange<int>(0, i)]);
  contiguous_strides(t, order);
  for (int d = 0; d < t.ndim; ++d) {
    if (rare(fdp, 8)) t.strides[d] = -t.strides[d];
  }
}

// Places `t` at a random element offset inside `arena` (aligned for its dtype), far enough in
// for negative strides to stay inside when the extent is small.
void place(FuzzedDataProvider& fdp, mtk_tensor& t, unsigned char* arena, size_t item) {
  item = std::max<size_t>(item, 1);
  const Extent e = extent_of(t);
  int64_t start = fdp.ConsumeIntegralInRange<int64_t>(0, 64);
  if (e.ok && e.numel > 0 && e.low < 0 && e.low > -kMaxWork) start -= e.low;
  const int64_t last = static_cast<int64_t>(kArenaBytes / item) - 1;
  t.data = arena + std::min(start, last) * static_cast<int64_t>(item);
  if (rare(fdp, 64)) t.data = nullptr;
}

// Marks the bytes of one output element as allowed to change.
void allow(std::vector<bool>& allowed, const unsigned char* arena, const unsigned char* element,
           size_t item) {
  const size_t at = static_cast<size_t>(element - arena);
  for (size_t b = 0; b < item; ++b) allowed.at(at + b) = true;
}

void expect_only_allowed_changes(const unsigned char* arena, const std::vector<bool>& allowed) {
  for (size_t b = 0; b < kArenaBytes; ++b) {
    if (arena[b] != kSentinel && !allowed[b]) crash("a call wrote outside its output elements");
  }
}

// ---- top-k ---------------------------------------------------------------------------------

void fuzz_topk(FuzzedDataProvider& fdp, mtk_context ctx, bool allocating) {
  mtk_tensor in{};
  in.ndim = rare(fdp, 16) ? fdp.ConsumeIntegralInRange<int>(-2, 10)
                                                         : fdp.ConsumeIntegralInRange<int>(0, 4);
  set_dtype(in, pick_dtype(fdp));
  for (int d = 0; d < std::clamp(in.ndim, 0, MTK_MAX_NDIM); ++d) in.sizes[d] = pick_size(fdp);
  pick_strides(fdp, in);
  const DtypeInfo in_type = dtype_info(raw_dtype(in));
  place(fdp, in, input_arena, in_type.size);

  const int rank = in.ndim == 0 ? 1 : in.ndim;
  const int64_t dim = rare(fdp, 32)
                          ? fdp.ConsumeIntegral<int64_t>()
                          : fdp.ConsumeIntegralInRange<int64_t>(-std::max(rank, 1) - 1,
                                                                std::max(rank, 1));
  const bool dim_ok = in.ndim >= 0 && in.ndim <= MTK_MAX_NDIM && dim >= -rank && dim < rank;
  const int d = dim_ok ? static_cast<int>(dim < 0 ? dim + rank : dim) : 0;
  const int64_t n = !dim_ok ? 0 : in.ndim == 0 ? 1 : in.sizes[d];
  const int64_t k = rare(fdp, 32)
                        ? fdp.ConsumeIntegral<int64_t>()
                        : fdp.ConsumeIntegralInRange<int64_t>(-1, std::clamp<int64_t>(n, 0, 70) + 1);
  const int largest = fdp.ConsumeBool(), sorted = fdp.ConsumeBool();
  const int index_raw = rare(fdp, 16)
                            ? pick_dtype(fdp)
                            : (fdp.ConsumeBool() ? MTK_INT64 : MTK_INT32);

  // Outputs: the right shape and dtypes, unless perturbed.
  mtk_tensor val = in, idx = in;
  if (dim_ok && in.ndim > 0) val.sizes[d] = idx.sizes[d] = k;
  set_dtype(val, rare(fdp, 16) ? pick_dtype(fdp) : raw_dtype(in));
  set_dtype(idx, index_raw);
  for (mtk_tensor* t : {&val, &idx}) {
    if (rare(fdp, 16)) {
      const int which = fdp.ConsumeIntegralInRange<int>(0, 2);
      if (which == 0) t->ndim = fdp.ConsumeIntegralInRange<int>(-1, 9);
      else if (t->ndim > 0) t->sizes[fdp.ConsumeIntegralInRange<int>(0, std::min(t->ndim, MTK_MAX_NDIM) - 1)] = pick_size(fdp);
    }
    pick_strides(fdp, *t, true);
  }
  const DtypeInfo val_type = dtype_info(raw_dtype(val)), idx_type = dtype_info(raw_dtype(idx));
  // Mostly their own arenas; sometimes the input's or each other's.
  const int placement = fdp.ConsumeIntegralInRange<int>(0, 15);
  place(fdp, val, placement == 15 ? input_arena : values_arena, val_type.size);
  place(fdp, idx, placement == 14 ? input_arena : placement == 13 ? values_arena : indices_arena,
        idx_type.size);

  for (size_t i = 0; i < kArenaBytes; ++i) input_arena[i] = static_cast<unsigned char>(i * 131 + 7);
  const std::vector<unsigned char> data = fdp.ConsumeRemainingBytes<unsigned char>();
  if (!data.empty()) std::memcpy(input_arena, data.data(), std::min(data.size(), kArenaBytes));
  std::memset(values_arena, kSentinel, kArenaBytes);
  std::memset(indices_arena, kSentinel, kArenaBytes);
  const std::vector<unsigned char> input_before(input_arena, input_arena + kArenaBytes);

  // The oracle. Allocating calls build their outputs themselves: only the input and the index
  // dtype are the caller's.
  const Extent ein = extent_of(in), eval = extent_of(val), eidx = extent_of(idx);
  bool valid = in_type.known && ein.ok && (ein.numel == 0 || in.data != nullptr) && dim_ok &&
               k >= 0 && k <= n && (index_raw == MTK_INT64 || index_raw == MTK_INT32) &&
               !(index_raw == MTK_INT32 && n > INT32_MAX);
  if (valid && in_type.known) {  // the input's byte extent must fit int64 too
    uintptr_t a, b;
    valid = ein.numel == 0 || byte_span(in, ein, in_type.size, &a, &b);
  }
  bool lenient_overlap = false;
  if (!allocating) {
    bool shapes = val.ndim == in.ndim && idx.ndim == in.ndim && in.ndim >= 0 &&
                  in.ndim <= MTK_MAX_NDIM;
    for (int e = 0; shapes && e < in.ndim; ++e) {
      const int64_t want = e == d ? k : in.sizes[e];
      shapes = val.sizes[e] == want && idx.sizes[e] == want;
    }
    valid = valid && shapes && eval.ok && eidx.ok && val_type.known && idx_type.known &&
            raw_dtype(val) == raw_dtype(in) && (eval.numel == 0 || val.data != nullptr) &&
            (eidx.numel == 0 || idx.data != nullptr);
    if (valid) {
      uintptr_t a, b;
      valid = (eval.numel == 0 || byte_span(val, eval, val_type.size, &a, &b)) &&
              (eidx.numel == 0 || byte_span(idx, eidx, idx_type.size, &a, &b)) &&
              !spans_overlap(val, eval, val_type.size, in, ein, in_type.size) &&
              !spans_overlap(idx, eidx, idx_type.size, in, ein, in_type.size) &&
              !spans_overlap(val, eval, val_type.size, idx, eidx, idx_type.size);
    }
    // Self-overlap: exact by enumeration (outputs are small whenever everything else is valid).
    if (valid && eval.numel <= kMaxWork && eidx.numel <= kMaxWork) {
      if (has_duplicate_elements(val) || has_duplicate_elements(idx)) valid = false;
      else lenient_overlap = true;
    }
  }
  const bool small = ein.numel <= kMaxWork && eval.numel <= kMaxWork && eidx.numel <= kMaxWork;
  const bool reachable = inside(in, ein, in_type.size, input_arena, kArenaBytes) &&
                         (allocating || (inside(val, eval, val_type.size, values_arena, kArenaBytes) &&
                                         inside(idx, eidx, idx_type.size, indices_arena, kArenaBytes)));
  const int op = allocating ? 1 : 0;
  if (valid && !(small && reachable)) {  // would touch memory the fuzzer does not own
    ++tally.skipped[op];
    return;
  }

  if (verbose) {
    std::fprintf(stderr, "%s k=%lld dim=%lld largest=%d sorted=%d index_dtype=%d valid=%d\n",
                 allocating ? "mtk_topk_alloc" : "mtk_topk", static_cast<long long>(k),
                 static_cast<long long>(dim), largest, sorted, index_raw, valid);
    describe("input", in, input_arena);
    describe("values", val, values_arena);
    describe("indices", idx, indices_arena);
  }
  mtk_status status;
  mtk_tensor vo{}, io{};
  if (allocating) {
    vo.data = values_arena;  // must come back NULL on failure
    io.data = indices_arena;
    status = fuzz_topk_alloc_raw(ctx, &in, k, dim, largest, sorted, index_raw, &vo, &io);
  } else {
    status = mtk_topk(ctx, &in, k, dim, largest, sorted, &val, &idx, nullptr);
  }
  const std::string message = mtk_last_error_message();
  if (verbose) std::fprintf(stderr, "  -> status %d %s\n", status, message.c_str());
  if (std::memcmp(input_before.data(), input_arena, kArenaBytes) != 0) crash("the input changed");

  if (status != MTK_SUCCESS) {
    if (status != MTK_ERROR_INVALID_ARGUMENT && status != MTK_ERROR_INVALID_DIM &&
        status != MTK_ERROR_UNSUPPORTED_DTYPE) {
      crash("unexpected status " + std::to_string(status) + ": " + message);
    }
    if (message.empty()) crash("an error without a message");
    if (valid && !(lenient_overlap && message.find("overlapping elements") != std::string::npos)) {
      crash("a valid call failed: " + message);
    }
    if (allocating && (vo.data != nullptr || io.data != nullptr)) crash("failed alloc left outputs");
    for (size_t i = 0; i < kArenaBytes; ++i) {
      if (values_arena[i] != kSentinel || indices_arena[i] != kSentinel) {
        crash("a failed call wrote to an output");
      }
    }
    ++tally.rejected[op];
    return;
  }
  if (!valid) crash("an invalid call succeeded");
  ++tally.checked[op];

  // Check every output element against the reference, row by row.
  const mtk_tensor& vt = allocating ? vo : val;
  const mtk_tensor& it = allocating ? io : idx;
  if (allocating) {
    if (vt.ndim != in.ndim || it.ndim != in.ndim || raw_dtype(vt) != raw_dtype(in) ||
        raw_dtype(it) != index_raw) {
      crash("mtk_topk_alloc returned wrong descriptors");
    }
  }
  const size_t item = in_type.size;
  const int64_t in_stride = in.ndim == 0 ? 1 : in.strides[d];
  const int64_t v_stride = in.ndim == 0 ? 1 : vt.strides[d], i_stride = in.ndim == 0 ? 1 : it.strides[d];
  const size_t index_item = index_raw == MTK_INT32 ? 4 : 8;
  std::vector<bool> allowed_values(kArenaBytes), allowed_indices(kArenaBytes);
  // Rows: every multi-index over the batch dims.
  int64_t counter[MTK_MAX_NDIM] = {};
  const int64_t rows = n == 0 ? 0 : ein.numel / n;
  // A 0-d input gives 0-d outputs holding (x, 0) for k = 0 as for k = 1 (contract rule 7).
  const int64_t out_k = in.ndim == 0 ? 1 : k;
  for (int64_t r = 0; r < rows && out_k > 0; ++r) {
    int64_t in_off = 0, v_off = 0, i_off = 0;
    for (int e = 0; e < in.ndim; ++e) {
      if (e == d) continue;
      in_off += counter[e] * in.strides[e];
      v_off += counter[e] * vt.strides[e];
      i_off += counter[e] * it.strides[e];
    }
    const unsigned char* row0 = static_cast<const unsigned char*>(in.data) + in_off * static_cast<int64_t>(item);
    const std::vector<int64_t> expect = reference_row(raw_dtype(in), item, row0, in_stride, n, out_k, largest);
    std::vector<int64_t> got(static_cast<size_t>(out_k));
    for (int64_t j = 0; j < out_k; ++j) {
      const unsigned char* vp = static_cast<const unsigned char*>(vt.data) + (v_off + j * v_stride) * static_cast<int64_t>(item);
      const unsigned char* ip = static_cast<const unsigned char*>(it.data) + (i_off + j * i_stride) * static_cast<int64_t>(index_item);
      int64_t index = 0;
      if (index_raw == MTK_INT32) { int32_t v32; std::memcpy(&v32, ip, 4); index = v32; }
      else std::memcpy(&index, ip, 8);
      if (index < 0 || index >= n) crash("index out of range");
      if (std::memcmp(vp, row0 + index * in_stride * static_cast<int64_t>(item), item) != 0) {
        crash("a value is not a bit copy of the input at its index");
      }
      got[j] = index;
      if (!allocating) {
        allow(allowed_values, values_arena, vp, item);
        allow(allowed_indices, indices_arena, ip, index_item);
      }
    }
    if (sorted) {
      if (got != expect) crash("sorted result differs from the reference at row " + std::to_string(r));
    } else {
      std::vector<int64_t> a = got, b = expect;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      if (a != b) crash("unsorted result selects other indices than the reference");
    }
    for (int e = in.ndim - 1; e >= 0; --e) {  // next row
      if (e == d) continue;
      if (++counter[e] < in.sizes[e]) break;
      counter[e] = 0;
    }
  }
  if (allocating) {
    mtk_tensor_free(ctx, &vo);
    mtk_tensor_free(ctx, &io);
    return;
  }
  expect_only_allowed_changes(values_arena, allowed_values);
  expect_only_allowed_changes(indices_arena, allowed_indices);
}

// ---- MoE router ----------------------------------------------------------------------------

void fuzz_route(FuzzedDataProvider& fdp, mtk_context ctx) {
  mtk_tensor logits{};
  logits.ndim = rare(fdp, 16) ? fdp.ConsumeIntegralInRange<int>(-1, 9) : 2;
  set_dtype(logits, rare(fdp, 8) ? pick_dtype(fdp)
                                                               : fdp.ConsumeIntegralInRange<int>(0, 2));
  const bool odd_sizes = rare(fdp, 16);
  for (int d = 0; d < std::clamp(logits.ndim, 0, MTK_MAX_NDIM); ++d) {
    logits.sizes[d] = odd_sizes ? pick_size(fdp) : fdp.ConsumeIntegralInRange<int64_t>(d == 0 ? 0 : 1, d == 0 ? 9 : 40);
  }
  pick_strides(fdp, logits);
  const int logits_raw = raw_dtype(logits);
  const DtypeInfo lt = dtype_info(logits_raw);
  place(fdp, logits, input_arena, lt.size);
  const int64_t tokens = logits.sizes[0], experts = logits.sizes[1];

  mtk_router_params params = MTK_ROUTER_PARAMS_INIT;
  params.k = rare(fdp, 32)
                 ? fdp.ConsumeIntegral<int64_t>()
                 : fdp.ConsumeIntegralInRange<int64_t>(0, std::clamp<int64_t>(experts, 0, 40) + 1);
  int scoring_raw = rare(fdp, 16) ? fdp.ConsumeIntegral<int>()
                                                                : fdp.ConsumeIntegralInRange<int>(0, 2);
  std::memcpy(&params.scoring, &scoring_raw, sizeof scoring_raw);
  params.n_group = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int64_t>(-1, 9) : 0;
  params.topk_group = fdp.ConsumeIntegralInRange<int64_t>(-1, 9);
  params.renormalize = fdp.ConsumeBool();
  static const float scales[] = {1.0f, 2.5f, 0.0f, -1.0f};
  params.scale = scales[fdp.ConsumeIntegralInRange<int>(0, 3)];
  mtk_tensor bias{};
  if (fdp.ConsumeBool()) {
    bias.ndim = rare(fdp, 16) ? 2 : 1;
    bias.dtype = rare(fdp, 16) ? MTK_FLOAT16 : MTK_FLOAT32;
    bias.sizes[0] = rare(fdp, 16) ? static_cast<int64_t>(static_cast<uint64_t>(experts) + 1) : experts;
    bias.sizes[1] = 1;
    bias.strides[0] = fdp.ConsumeIntegralInRange<int64_t>(-2, 2);
    bias.strides[1] = 1;
    // Far enough into its arena for a stride of -2 over the experts of a valid call.
    bias.data = rare(fdp, 64) ? nullptr : bias_arena + 4 * 100;
    params.bias = &bias;
  }

  mtk_tensor w{}, ids{};
  w.ndim = ids.ndim = 2;
  w.sizes[0] = ids.sizes[0] = tokens;
  w.sizes[1] = ids.sizes[1] = params.k;
  set_dtype(w, rare(fdp, 16) ? pick_dtype(fdp) : MTK_FLOAT32);
  const int ids_raw = rare(fdp, 16) ? pick_dtype(fdp)
                                                                  : (fdp.ConsumeBool() ? MTK_INT32 : MTK_INT64);
  set_dtype(ids, ids_raw);
  if (rare(fdp, 16)) w.sizes[1] = pick_size(fdp);
  pick_strides(fdp, w, true);
  pick_strides(fdp, ids, true);
  const DtypeInfo wt = dtype_info(raw_dtype(w)), it = dtype_info(ids_raw);
  const int placement = fdp.ConsumeIntegralInRange<int>(0, 15);
  place(fdp, w, placement == 15 ? input_arena : values_arena, wt.size);
  place(fdp, ids, placement == 14 ? values_arena : placement == 13 ? bias_arena : indices_arena, it.size);

  // The struct as a caller of another header version lays it out (metaltopk.h's versioned
  // rule): rarely an older caller's (the oracle's params take the defaults past its size, the
  // library's copy holds garbage there), a newer caller's with a zero or a nonzero tail, or a
  // size no header declares.
  struct {
    mtk_router_params params;
    unsigned char newer_members[16];
  } given{};
  given.params = params;
  bool struct_size_valid = true;
  if (rare(fdp, 8)) {
    static const size_t sizes[] = {0,  8,  16, 20, 24, 48, sizeof params + 8, sizeof given,
                                   1032, SIZE_MAX};
    const size_t size = sizes[fdp.ConsumeIntegralInRange<size_t>(0, std::size(sizes) - 1)];
    given.params.struct_size = size;
    struct_size_valid = size >= 16 && size % 8 == 0 && size <= 1024;
    if (struct_size_valid && size > sizeof params && fdp.ConsumeBool()) {
      given.newer_members[fdp.ConsumeIntegralInRange<size_t>(0, size - sizeof params - 1)] = 1;
      struct_size_valid = false;
    }
    if (struct_size_valid && size < sizeof params) {
      const mtk_router_params defaults = MTK_ROUTER_PARAMS_INIT;
      std::memcpy(reinterpret_cast<unsigned char*>(&params) + size,
                  reinterpret_cast<const unsigned char*>(&defaults) + size, sizeof params - size);
      std::memset(reinterpret_cast<unsigned char*>(&given.params) + size, 0xA5,
                  sizeof params - size);
      std::memcpy(&scoring_raw, &params.scoring, sizeof scoring_raw);
    }
  }

  const std::vector<unsigned char> data = fdp.ConsumeRemainingBytes<unsigned char>();
  std::memset(input_arena, 0, kArenaBytes);
  if (!data.empty()) std::memcpy(input_arena, data.data(), std::min(data.size(), kArenaBytes));
  for (size_t i = 0; i < sizeof bias_arena; ++i) bias_arena[i] = static_cast<unsigned char>(i % 5 ? 0 : 0x3c);
  std::memset(values_arena, kSentinel, kArenaBytes);
  std::memset(indices_arena, kSentinel, kArenaBytes);

  // The oracle.
  const Extent el = extent_of(logits), ew = extent_of(w), eid = extent_of(ids);
  const bool grouped = params.n_group > 1;
  bool valid = struct_size_valid && logits.ndim == 2 && el.ok && lt.known && logits_raw <= MTK_BFLOAT16 &&
               (el.numel == 0 || logits.data != nullptr) && experts >= 1 && params.k >= 1 &&
               params.k <= experts && scoring_raw >= 0 && scoring_raw <= 2 && params.n_group >= 0;
  if (valid && grouped) {
    valid = experts % params.n_group == 0 && params.topk_group >= 1 &&
            params.topk_group <= params.n_group &&
            params.k <= params.topk_group * (experts / params.n_group);
  }
  Extent eb;
  if (valid && params.bias != nullptr) {
    eb = extent_of(bias);
    valid = bias.ndim == 1 && bias.sizes[0] == experts && bias.dtype == MTK_FLOAT32 && eb.ok &&
            (eb.numel == 0 || bias.data != nullptr);
  }
  if (valid) {
    uintptr_t a, b;
    valid = ew.ok && eid.ok && w.sizes[1] == params.k && raw_dtype(w) == MTK_FLOAT32 &&
            (ids_raw == MTK_INT32 || ids_raw == MTK_INT64) &&
            !(ids_raw == MTK_INT32 && experts > INT32_MAX) &&
            (ew.numel == 0 || w.data != nullptr) && (eid.numel == 0 || ids.data != nullptr) &&
            (el.numel == 0 || byte_span(logits, el, lt.size, &a, &b)) &&
            (ew.numel == 0 || byte_span(w, ew, 4, &a, &b)) &&
            (eid.numel == 0 || byte_span(ids, eid, it.size, &a, &b)) &&
            !spans_overlap(w, ew, 4, logits, el, lt.size) &&
            !spans_overlap(ids, eid, it.size, logits, el, lt.size) &&
            !spans_overlap(w, ew, 4, ids, eid, it.size) &&
            (params.bias == nullptr || (!spans_overlap(w, ew, 4, bias, eb, 4) &&
                                        !spans_overlap(ids, eid, it.size, bias, eb, 4)));
  }
  bool lenient_overlap = false;
  if (valid && ew.numel <= kMaxWork && eid.numel <= kMaxWork) {
    if (has_duplicate_elements(w) || has_duplicate_elements(ids)) valid = false;
    else lenient_overlap = true;
  }
  const bool small = el.numel <= kMaxWork && ew.numel <= kMaxWork && eid.numel <= kMaxWork;
  const bool reachable = inside(logits, el, lt.size, input_arena, kArenaBytes) &&
                         inside(w, ew, 4, values_arena, kArenaBytes) &&
                         inside(ids, eid, it.size, indices_arena, kArenaBytes) &&
                         (params.bias == nullptr || inside(bias, eb, 4, bias_arena, sizeof bias_arena));
  if (valid && !(small && reachable)) {
    ++tally.skipped[2];
    return;
  }

  if (verbose) {
    std::fprintf(stderr, "mtk_moe_route struct_size=%zu k=%lld scoring=%d n_group=%lld topk_group=%lld bias=%d valid=%d\n",
                 given.params.struct_size, static_cast<long long>(params.k), scoring_raw, static_cast<long long>(params.n_group),
                 static_cast<long long>(params.topk_group), params.bias != nullptr, valid);
    describe("logits", logits, input_arena);
    describe("weights", w, values_arena);
    describe("ids", ids, indices_arena);
  }
  const mtk_status status = mtk_moe_route(ctx, &logits, &given.params, &w, &ids, nullptr);
  const std::string message = mtk_last_error_message();
  if (status != MTK_SUCCESS) {
    if (status != MTK_ERROR_INVALID_ARGUMENT && status != MTK_ERROR_UNSUPPORTED_DTYPE) {
      crash("moe_route: unexpected status " + std::to_string(status) + ": " + message);
    }
    if (message.empty()) crash("moe_route: an error without a message");
    if (valid && !(lenient_overlap && message.find("overlapping elements") != std::string::npos)) {
      crash("moe_route: a valid call failed: " + message);
    }
    for (size_t i = 0; i < kArenaBytes; ++i) {
      if (values_arena[i] != kSentinel || indices_arena[i] != kSentinel) {
        crash("moe_route: a failed call wrote to an output");
      }
    }
    ++tally.rejected[2];
    return;
  }
  if (!valid) crash("moe_route: an invalid call succeeded");
  ++tally.checked[2];

  std::vector<bool> allowed_w(kArenaBytes), allowed_ids(kArenaBytes);
  const std::vector<unsigned char> first_weights(values_arena, values_arena + kArenaBytes);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> got(static_cast<size_t>(params.k));
    for (int64_t j = 0; j < params.k; ++j) {
      const unsigned char* wp = static_cast<const unsigned char*>(w.data) + (t * w.strides[0] + j * w.strides[1]) * 4;
      const unsigned char* ip = static_cast<const unsigned char*>(ids.data) + (t * ids.strides[0] + j * ids.strides[1]) * static_cast<int64_t>(it.size);
      allow(allowed_w, values_arena, wp, 4);
      allow(allowed_ids, indices_arena, ip, it.size);
      if (ids_raw == MTK_INT32) { int32_t v; std::memcpy(&v, ip, 4); got[j] = v; }
      else std::memcpy(&got[j], ip, 8);
      if (got[j] < 0 || got[j] >= experts) crash("moe_route: expert id out of range");
    }
    std::vector<int64_t> sorted_ids = got;
    std::sort(sorted_ids.begin(), sorted_ids.end());
    if (std::adjacent_find(sorted_ids.begin(), sorted_ids.end()) != sorted_ids.end()) {
      crash("moe_route: an expert selected twice");
    }
    if (params.bias == nullptr && !grouped) {  // plain path: exactly top-k of the logits
      const unsigned char* row0 = static_cast<const unsigned char*>(logits.data) + t * logits.strides[0] * static_cast<int64_t>(lt.size);
      if (got != reference_row(logits_raw, lt.size, row0, logits.strides[1], experts, params.k, true)) {
        crash("moe_route: plain-path ids differ from the top-k of the logits");
      }
    }
  }
  expect_only_allowed_changes(values_arena, allowed_w);
  expect_only_allowed_changes(indices_arena, allowed_ids);
  // Deterministic: the same call again gives the same bits.
  const std::vector<unsigned char> first_ids(indices_arena, indices_arena + kArenaBytes);
  if (mtk_moe_route(ctx, &logits, &given.params, &w, &ids, nullptr) != MTK_SUCCESS ||
      std::memcmp(first_weights.data(), values_arena, kArenaBytes) != 0 ||
      std::memcmp(first_ids.data(), indices_arena, kArenaBytes) != 0) {
    crash("moe_route: a repeated call gave different results");
  }
}

// ---- sampling --------------------------------------------------------------------------------

// A [rows] per-row tensor in `arena` at `offset` bytes, usually of the right dtype and length.
mtk_tensor per_row(FuzzedDataProvider& fdp, int64_t rows, int dtype, unsigned char* arena,
                   size_t offset) {
  mtk_tensor t{};
  t.ndim = rare(fdp, 16) ? 2 : 1;
  t.sizes[0] = rare(fdp, 8) ? rows + fdp.ConsumeIntegralInRange<int64_t>(-1, 1) : rows;
  t.sizes[1] = 1;
  t.strides[0] = fdp.ConsumeIntegralInRange<int64_t>(1, 2);
  t.strides[1] = 1;
  set_dtype(t, rare(fdp, 8) ? pick_dtype(fdp) : dtype);
  t.data = arena + offset;
  return t;
}

bool per_row_valid(const mtk_tensor& t, int64_t rows, bool integer) {
  const int raw = raw_dtype(t);
  const bool dtype_ok = integer ? raw == MTK_INT32 || raw == MTK_INT64 : raw == MTK_FLOAT32;
  return dtype_ok && t.ndim == 1 && t.sizes[0] == rows;
}

void fuzz_sampling(FuzzedDataProvider& fdp, mtk_context ctx) {
  int op = rare(fdp, 32) ? fdp.ConsumeIntegral<int>() : fdp.ConsumeIntegralInRange<int>(0, 3);
  const bool op_known = op >= mtk::kFirstSamplingOp && op <= mtk::kLastSamplingOp;
  const bool logits_op = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ||
                         op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  const bool samples = op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;

  mtk_tensor in{};
  in.ndim = rare(fdp, 16) ? fdp.ConsumeIntegralInRange<int>(0, 3) : 2;
  const int in_raw = rare(fdp, 8) ? pick_dtype(fdp)
                                  : (logits_op ? fdp.ConsumeIntegralInRange<int>(0, 2)
                                               : MTK_FLOAT32);
  set_dtype(in, in_raw);
  for (int d = 0; d < in.ndim; ++d) in.sizes[d] = fdp.ConsumeIntegralInRange<int64_t>(0, 40);
  pick_strides(fdp, in);
  const DtypeInfo it = dtype_info(in_raw);
  place(fdp, in, input_arena, it.size);
  // Inputs hold any bits (NaN, infinities, subnormals, negatives): a xorshift stream from one
  // fuzzed seed.
  uint32_t state = fdp.ConsumeIntegral<uint32_t>() | 1u;
  for (size_t b = 0; b < kArenaBytes; b += 4) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    std::memcpy(input_arena + b, &state, 4);
  }
  const int64_t rows = in.ndim == 2 ? in.sizes[0] : 0, n = in.ndim == 2 ? in.sizes[1] : 0;

  std::memset(bias_arena, 0, sizeof bias_arena);
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  static const float fractions[] = {1.0f, 0.0f, 0.5f, 0.9f, -1.0f, 2.0f, NAN, INFINITY, 1e-40f};
  auto fraction = [&] { return fractions[fdp.ConsumeIntegralInRange<int>(0, 8)]; };
  mtk_tensor top_k{}, top_p{};
  if (fdp.ConsumeBool()) params.top_k_value = fdp.ConsumeIntegralInRange<int64_t>(-2, 45);
  if (fdp.ConsumeBool()) params.top_p_value = fraction();
  if (fdp.ConsumeBool()) params.min_p_value = fraction();
  if (fdp.ConsumeBool()) params.temperature_value = fraction();
  if (rare(fdp, 4)) {
    top_k = per_row(fdp, rows, MTK_INT32, bias_arena, 0);
    for (int i = 0; i < 256; ++i) {
      const int32_t k = fdp.ConsumeIntegralInRange<int32_t>(-3, 45);
      std::memcpy(bias_arena + 4 * i, &k, 4);
    }
    params.top_k = &top_k;
  }
  if (rare(fdp, 4)) {
    top_p = per_row(fdp, rows, MTK_FLOAT32, bias_arena, 2048);
    for (int i = 0; i < 256; ++i) {
      const float f = fraction();
      std::memcpy(bias_arena + 2048 + 4 * i, &f, 4);
    }
    params.top_p = &top_p;
  }
  mtk_tensor uniforms{};
  const bool with_uniforms = samples ? !rare(fdp, 32) : rare(fdp, 32);
  if (with_uniforms) {
    uniforms = per_row(fdp, rows, MTK_FLOAT32, indices_arena, 0);
    for (int i = 0; i < 256; ++i) {
      const float u = rare(fdp, 8) ? fraction() : fdp.ConsumeFloatingPointInRange<float>(0, 1);
      std::memcpy(indices_arena + 4 * i, &u, 4);
    }
  }

  mtk_tensor out{};
  out.ndim = samples ? 1 : 2;
  out.sizes[0] = rows;
  out.sizes[1] = rare(fdp, 16) ? n + 1 : n;
  const int out_raw = rare(fdp, 16) ? pick_dtype(fdp)
                      : samples    ? (fdp.ConsumeBool() ? MTK_INT32 : MTK_INT64)
                      : op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? in_raw
                                                               : MTK_FLOAT32;
  set_dtype(out, out_raw);
  pick_strides(fdp, out, true);
  const DtypeInfo ot = dtype_info(out_raw);
  place(fdp, out, rare(fdp, 32) ? input_arena : values_arena, ot.size);
  std::memset(values_arena, kSentinel, kArenaBytes);

  // The oracle.
  const Extent ie = extent_of(in), oe = extent_of(out);
  const bool defaults_only_k = params.top_p == nullptr && params.top_p_value == 1.0f &&
                               params.min_p_value == 0.0f && params.temperature_value == 1.0f;
  const bool no_temperature = params.temperature_value == 1.0f;
  bool valid = op_known && in.ndim == 2 && it.known && ie.ok &&
               (in.data != nullptr || ie.numel == 0) &&
               (logits_op ? in_raw <= MTK_BFLOAT16 : in_raw == MTK_FLOAT32) &&
               !(samples && n == 0 && rows > 0) &&
               (params.top_k == nullptr || per_row_valid(top_k, rows, true)) &&
               (params.top_p == nullptr || per_row_valid(top_p, rows, false)) &&
               (op != MTK_SAMPLING_TOP_K_MASK_LOGITS || defaults_only_k) &&
               (logits_op || no_temperature) && with_uniforms == samples &&
               (!samples || per_row_valid(uniforms, rows, false)) && ot.known && oe.ok &&
               (out.data != nullptr || oe.numel == 0) && out.sizes[0] == rows &&
               (samples || out.sizes[1] == n) &&
               (samples ? out_raw == MTK_INT32 || out_raw == MTK_INT64
                        : out_raw == (op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? in_raw : MTK_FLOAT32)) &&
               !has_duplicate_elements(out) && !spans_overlap(out, oe, ot.size, in, ie, it.size);
  if (valid && (!inside(in, ie, it.size, input_arena, kArenaBytes) ||
                !inside(out, oe, ot.size, values_arena, kArenaBytes))) {
    ++tally.skipped[3];
    return;
  }
  const std::vector<unsigned char> input_before(input_arena, input_arena + kArenaBytes);
  const mtk_tensor* uniforms_arg = with_uniforms ? &uniforms : nullptr;
  const mtk_status status =
      fuzz_sampling_raw(ctx, op, &in, &params, uniforms_arg, &out, nullptr, 0);
  if (status == MTK_ERROR_INVALID_ARGUMENT &&
      std::strstr(mtk_last_error_message(), "workspace") != nullptr) {
    // Valid, and it needs scratch: run it with a workspace of the size the query gives.
    size_t bytes = 0;
    if (fuzz_sampling_workspace_size_raw(ctx, op, &in, &params, out_raw, &bytes) != MTK_SUCCESS) {
      crash(std::string("sampling: the workspace query failed on a valid call: ") +
            mtk_last_error_message());
    }
    std::vector<unsigned char> workspace(bytes);
    if (fuzz_sampling_raw(ctx, op, &in, &params, uniforms_arg, &out, workspace.data(), bytes) !=
        MTK_SUCCESS) {
      crash(std::string("sampling: a valid call failed: ") + mtk_last_error_message());
    }
  } else if (status != MTK_SUCCESS) {
    // The one leniency, as for top-k: the conservative self-overlap rule.
    const bool lenient = std::strstr(mtk_last_error_message(), "overlapping elements") != nullptr;
    if (valid && !lenient) {
      crash(std::string("sampling: a valid call failed: ") + mtk_last_error_message());
    }
    if (mtk_last_error_message()[0] == '\0') crash("sampling: a failure without a message");
    for (size_t b = 0; b < kArenaBytes; ++b) {
      if (values_arena[b] != kSentinel) crash("sampling: a failed call wrote to its output");
    }
    ++tally.rejected[3];
    return;
  }
  if (!valid) crash("sampling: an invalid call succeeded");
  if (std::memcmp(input_before.data(), input_arena, kArenaBytes) != 0) {
    crash("sampling: a call wrote to its input");
  }
  ++tally.checked[3];
  std::vector<bool> allowed(kArenaBytes);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < (samples ? 1 : n); ++j) {
      const int64_t at = samples ? r * out.strides[0] : r * out.strides[0] + j * out.strides[1];
      const unsigned char* element = static_cast<const unsigned char*>(out.data) +
                                     at * static_cast<int64_t>(ot.size);
      allow(allowed, values_arena, element, ot.size);
      if (samples) {
        int64_t token;
        if (out_raw == MTK_INT32) {
          int32_t t32;
          std::memcpy(&t32, element, 4);
          token = t32;
        } else {
          std::memcpy(&token, element, 8);
        }
        if (token < 0 || token >= n) crash("sampling: a token outside the row");
      } else if (op == MTK_SAMPLING_RENORM_PROBS) {
        float p;
        std::memcpy(&p, element, 4);
        if (!(p >= 0.0f && p <= 1.0f)) crash("sampling: a renormalised probability outside [0, 1]");
      }
    }
  }
  expect_only_allowed_changes(values_arena, allowed);
}

// ---- ragged rows -----------------------------------------------------------------------------
//
// A ragged call is built valid (random windows, contents of any value, options, strides and
// placements), then, two times in three, given one defect from the list below, so that the
// oracle knows its outcome: a defective call must fail with a caller-error status and a message,
// write nothing and answer 0 workspace bytes; a valid one must succeed, equal ragged_model.hpp's
// result (sorted: exactly; unsorted: the same (index, value) pairs, winners first), and write
// nothing outside its output elements. mtk_topk_ragged_workspace_size does not see the outputs,
// so their defects leave it valid. A valid call that would reach outside the fuzzer's buffers
// is skipped; its odd sizes and strides are the dense fuzzer's business.

enum class RaggedDefect {
  None, InputRank, NegativeK, UnknownTransform, ShortParams, NullLengths, LengthsDtype,
  LengthsRank, LengthsSize, StartsSize, UnusedTensor, MissingTensor, PageSize, FewPages,
  FewBatches, RowToBatchSize, ValuesDtype, ValuesShape, IndicesDtype, IndicesShape,
  ValuesOverlapInput, ShortWorkspace, Count
};

bool is_output_defect(RaggedDefect d) {
  return d >= RaggedDefect::ValuesDtype && d <= RaggedDefect::ValuesOverlapInput;
}

int64_t read_index(const mtk_tensor& t, int64_t at) {
  const unsigned char* p = static_cast<const unsigned char*>(t.data) +
                           at * t.strides[t.ndim - 1] * (raw_dtype(t) == MTK_INT32 ? 4 : 8);
  if (raw_dtype(t) == MTK_INT32) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// A [size] int32 or int64 vector in params_arena at `slot` (1 KiB each), strides 1, -1, 0 or 2,
// holding values picked by `value`.
template <typename Value>
mtk_tensor row_vector(FuzzedDataProvider& fdp, int slot, int64_t size, Value value) {
  mtk_tensor t{};
  const bool wide = fdp.ConsumeBool();
  set_dtype(t, wide ? MTK_INT64 : MTK_INT32);
  t.ndim = 1;
  t.sizes[0] = size;
  static const int64_t strides[] = {1, -1, 0, 2};
  t.strides[0] = strides[fdp.ConsumeIntegralInRange<int>(0, 3)];
  const int64_t item = wide ? 8 : 4;
  unsigned char* base = params_arena + slot * 1024 + (t.strides[0] < 0 ? 1024 - item : 0);
  t.data = base;
  for (int64_t i = 0; i < size; ++i) {
    const int64_t v = value();
    unsigned char* p = base + i * t.strides[0] * item;
    if (wide) std::memcpy(p, &v, 8);
    else { const int32_t narrow = static_cast<int32_t>(v); std::memcpy(p, &narrow, 4); }
  }
  return t;
}

void fuzz_ragged(FuzzedDataProvider& fdp, mtk_context ctx) {
  constexpr int kOp = 4;
  const int variant = fdp.ConsumeIntegralInRange<int>(0, 2);  // plain, with workspace, size
  RaggedDefect defect = RaggedDefect::None;
  if (fdp.ConsumeIntegralInRange<int>(0, 2) != 0) {
    defect = static_cast<RaggedDefect>(fdp.ConsumeIntegralInRange<int>(
        1, static_cast<int>(RaggedDefect::Count) - 1));
  }
  mtk_tensor in{};
  in.ndim = 2;
  set_dtype(in, fdp.ConsumeIntegralInRange<int>(mtk::kFirstDtype, mtk::kLastDtype));
  in.sizes[0] = rare(fdp, 8) ? fdp.ConsumeIntegralInRange<int64_t>(0, 40)
                             : fdp.ConsumeIntegralInRange<int64_t>(0, 8);
  in.sizes[1] = rare(fdp, 8) ? fdp.ConsumeIntegralInRange<int64_t>(0, 300)
                             : fdp.ConsumeIntegralInRange<int64_t>(0, 40);
  const int64_t rows = in.sizes[0], n = in.sizes[1];
  pick_strides(fdp, in);
  const DtypeInfo in_type = dtype_info(raw_dtype(in));
  place(fdp, in, input_arena, in_type.size);
  int64_t k = fdp.ConsumeIntegralInRange<int64_t>(0, std::min<int64_t>(n, 70) + 3);
  const int largest = fdp.ConsumeBool(), sorted = fdp.ConsumeBool();
  int index_raw = fdp.ConsumeBool() ? MTK_INT64 : MTK_INT32;
  int transform = fdp.ConsumeIntegralInRange<int>(0, 2);
  // Defects of a transform's tensors need that transform.
  if (defect >= RaggedDefect::PageSize && defect <= RaggedDefect::RowToBatchSize) transform = 2;
  if (defect == RaggedDefect::MissingTensor && transform == 0) transform = 1;
  int64_t page_size = fdp.ConsumeIntegralInRange<int64_t>(1, 5);
  const bool with_starts = fdp.ConsumeBool() || defect == RaggedDefect::StartsSize;
  bool with_row_to_batch = fdp.ConsumeBool() || defect == RaggedDefect::RowToBatchSize;
  if (defect == RaggedDefect::FewBatches) with_row_to_batch = false;
  int64_t batch = with_row_to_batch ? fdp.ConsumeIntegralInRange<int64_t>(1, 6) : rows;
  int64_t pages = (n + page_size - 1) / page_size + fdp.ConsumeIntegralInRange<int64_t>(0, 1);
  if (transform == 2 && batch * pages * 8 > 1024 * 4) transform = 1;  // the table's slots
  if (transform != 2 && defect >= RaggedDefect::PageSize &&
      defect <= RaggedDefect::RowToBatchSize) {
    defect = RaggedDefect::None;
  }

  auto length_value = [&] {
    if (rare(fdp, 16)) {
      static const int64_t odd[] = {INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX, -1};
      return odd[fdp.ConsumeIntegralInRange<int>(0, 4)];
    }
    return fdp.ConsumeIntegralInRange<int64_t>(-3, n + 3);
  };
  const mtk_tensor lengths = row_vector(fdp, 0, rows, length_value);
  const mtk_tensor starts = row_vector(fdp, 1, rows, length_value);
  const mtk_tensor offsets = row_vector(fdp, 2, rows, [&] { return fdp.ConsumeIntegral<int64_t>(); });
  const mtk_tensor row_to_batch = row_vector(
      fdp, 3, rows, [&] { return fdp.ConsumeIntegralInRange<int64_t>(-2, batch + 1); });
  mtk_tensor table{};
  set_dtype(table, fdp.ConsumeBool() ? MTK_INT64 : MTK_INT32);
  table.ndim = 2;
  table.sizes[0] = batch;
  table.sizes[1] = pages;
  const int outer = fdp.ConsumeBool() ? 0 : 1;
  const int table_order[2] = {outer, 1 - outer};
  contiguous_strides(table, table_order);
  table.data = params_arena + 4 * 1024;
  for (int64_t e = 0; transform == 2 && e < batch * pages; ++e) {
    const int64_t v = fdp.ConsumeIntegral<int64_t>();
    if (raw_dtype(table) == MTK_INT64) std::memcpy(params_arena + 4096 + e * 8, &v, 8);
    else { const int32_t narrow = static_cast<int32_t>(v); std::memcpy(params_arena + 4096 + e * 4, &narrow, 4); }
  }

  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  mtk_tensor lengths_used = lengths, starts_used = starts, row_to_batch_used = row_to_batch;
  params.lengths = &lengths_used;
  params.starts = with_starts ? &starts_used : nullptr;
  params.transform = static_cast<mtk_index_transform>(transform);
  if (transform == 1) params.offsets = &offsets;
  if (transform == 2) {
    params.page_table = &table;
    params.page_size = page_size;
    params.row_to_batch = with_row_to_batch ? &row_to_batch_used : nullptr;
  }

  // Outputs [rows, k], row- or column-major, in their own arenas.
  mtk_tensor val{}, idx{};
  for (mtk_tensor* t : {&val, &idx}) {
    t->ndim = 2;
    t->sizes[0] = rows;
    t->sizes[1] = k;
    const int out_order[2] = {fdp.ConsumeBool() ? 0 : 1, 0};
    const int dims[2] = {out_order[0], 1 - out_order[0]};
    contiguous_strides(*t, dims);
  }
  set_dtype(val, raw_dtype(in));
  set_dtype(idx, index_raw);
  const bool with_values = fdp.ConsumeBool();
  place(fdp, val, values_arena, in_type.size);
  place(fdp, idx, indices_arena, index_raw == MTK_INT32 ? 4 : 8);
  if (val.data == nullptr) val.data = values_arena;  // NULL data is the dense fuzzer's case
  if (idx.data == nullptr) idx.data = indices_arena;

  // The defect.
  const Extent ein0 = extent_of(in);
  switch (defect) {
    case RaggedDefect::InputRank: in.ndim = fdp.ConsumeBool() ? 1 : 3; in.sizes[2] = 1; in.strides[2] = 1; break;
    case RaggedDefect::NegativeK: k = -1 - fdp.ConsumeIntegralInRange<int64_t>(0, 1000); break;
    case RaggedDefect::UnknownTransform: {
      const int raw = fdp.ConsumeBool() ? -1 : fdp.ConsumeIntegralInRange<int>(3, 1000);
      std::memcpy(&params.transform, &raw, sizeof raw);
      break;
    }
    case RaggedDefect::ShortParams:
      params.struct_size = fdp.ConsumeBool() ? 0 : offsetof(mtk_ragged_params, lengths);
      break;
    case RaggedDefect::NullLengths: params.lengths = nullptr; break;
    case RaggedDefect::LengthsDtype: {
      const int raw = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<int>(0, 6) : 77;
      set_dtype(lengths_used, raw);
      break;
    }
    case RaggedDefect::LengthsRank: lengths_used.ndim = fdp.ConsumeBool() ? 0 : 2; lengths_used.sizes[1] = 1; break;
    case RaggedDefect::LengthsSize: lengths_used.sizes[0] = rows + 1; break;
    case RaggedDefect::StartsSize: starts_used.sizes[0] = rows + 1; break;
    case RaggedDefect::UnusedTensor:
      if (transform == 2) params.offsets = &offsets;
      else params.page_table = &table;
      break;
    case RaggedDefect::MissingTensor:
      if (transform == 1) params.offsets = nullptr;
      else params.page_table = nullptr;
      break;
    case RaggedDefect::PageSize: params.page_size = -fdp.ConsumeIntegralInRange<int64_t>(0, 3); break;
    case RaggedDefect::FewPages:
      if (n == 0) defect = RaggedDefect::None;
      else params.page_size = 1, table.sizes[1] = std::min<int64_t>(pages, n - 1);
      break;
    case RaggedDefect::FewBatches:
      if (rows == 0) defect = RaggedDefect::None;
      else table.sizes[0] = rows - 1;
      break;
    case RaggedDefect::RowToBatchSize: row_to_batch_used.sizes[0] = rows + 1; break;
    case RaggedDefect::ValuesDtype:
      if (!with_values) defect = RaggedDefect::None;
      else set_dtype(val, (raw_dtype(in) + fdp.ConsumeIntegralInRange<int>(1, 8)) % 9);
      break;
    case RaggedDefect::ValuesShape:
      if (!with_values) defect = RaggedDefect::None;
      else val.sizes[1] = k + 1;
      break;
    case RaggedDefect::IndicesDtype: set_dtype(idx, fdp.ConsumeBool() ? MTK_FLOAT32 : MTK_INT16); break;
    case RaggedDefect::IndicesShape: idx.sizes[0] = rows + 1; break;
    case RaggedDefect::ValuesOverlapInput:
      if (!with_values || ein0.numel == 0 || rows * k == 0 || in.data == nullptr) defect = RaggedDefect::None;
      else val.data = in.data;
      break;
    case RaggedDefect::ShortWorkspace:
      if (variant != 1) defect = RaggedDefect::None;
      break;
    case RaggedDefect::None:
    case RaggedDefect::Count: break;
  }

  // Fill the arenas; the input's bytes are the fuzzer's.
  for (size_t i = 0; i < kArenaBytes; ++i) input_arena[i] = static_cast<unsigned char>(i * 131 + 7);
  const std::vector<unsigned char> data = fdp.ConsumeRemainingBytes<unsigned char>();
  if (!data.empty()) std::memcpy(input_arena, data.data(), std::min(data.size(), kArenaBytes));
  std::memset(values_arena, kSentinel, kArenaBytes);
  std::memset(indices_arena, kSentinel, kArenaBytes);
  const std::vector<unsigned char> input_before(input_arena, input_arena + kArenaBytes);
  const std::vector<unsigned char> params_before(params_arena, params_arena + sizeof params_arena);

  const Extent ein = extent_of(in);
  const bool input_ok = in.ndim == 2 && ein.ok && (ein.numel == 0 || in.data != nullptr);
  const bool defective = defect != RaggedDefect::None &&
                         (variant != 2 || !is_output_defect(defect));
  const Extent eval = extent_of(val), eidx = extent_of(idx);
  const bool reachable = input_ok && ein.numel <= kMaxWork &&
                         inside(in, ein, in_type.size, input_arena, kArenaBytes) &&
                         inside(val, eval, in_type.size, values_arena, kArenaBytes) &&
                         inside(idx, eidx, index_raw == MTK_INT32 ? 4 : 8, indices_arena, kArenaBytes);
  bool expect_failure = defective || !input_ok;
  // A short workspace is a defect only where the call needs one: that call may be valid.
  if (!reachable && (!expect_failure || defect == RaggedDefect::ShortWorkspace)) {
    ++tally.skipped[kOp];
    return;
  }

  if (verbose) {
    std::fprintf(stderr, "ragged variant=%d defect=%d k=%lld largest=%d sorted=%d transform=%d "
                 "index_dtype=%d values=%d\n", variant, static_cast<int>(defect),
                 static_cast<long long>(k), largest, sorted, transform, index_raw, with_values);
    describe("input", in, input_arena);
  }
  size_t bytes = 12345;
  mtk_status status = mtk_topk_ragged_workspace_size(ctx, &in, k, largest, sorted, &params,
                                                     static_cast<mtk_dtype>(index_raw), &bytes);
  if (variant == 2 || (variant == 1 && status != MTK_SUCCESS)) {
    // The size query alone (or the query that must fail for the call too).
  } else if (variant == 1) {
    const size_t given = defect == RaggedDefect::ShortWorkspace && bytes > 0 ? bytes - 1 : bytes;
    if (defect == RaggedDefect::ShortWorkspace && bytes == 0) expect_failure = false;
    std::vector<unsigned char> workspace(std::max<size_t>(given, 1));
    status = mtk_topk_ragged_with_workspace(ctx, &in, k, largest, sorted, &params,
                                            with_values ? &val : nullptr, &idx,
                                            workspace.data(), given, nullptr);
  } else {
    status = mtk_topk_ragged(ctx, &in, k, largest, sorted, &params,
                             with_values ? &val : nullptr, &idx, nullptr);
  }
  const std::string message = mtk_last_error_message();
  if (verbose) std::fprintf(stderr, "  -> status %d %s\n", status, message.c_str());
  if (std::memcmp(input_before.data(), input_arena, kArenaBytes) != 0) crash("ragged: the input changed");
  if (std::memcmp(params_before.data(), params_arena, sizeof params_arena) != 0) {
    crash("ragged: a params tensor changed");
  }
  if (status != MTK_SUCCESS) {
    if (status != MTK_ERROR_INVALID_ARGUMENT && status != MTK_ERROR_UNSUPPORTED_DTYPE &&
        status != MTK_ERROR_INVALID_DIM) {
      crash("ragged: unexpected status " + std::to_string(status) + ": " + message);
    }
    if (message.empty()) crash("ragged: an error without a message");
    if (!expect_failure) crash("ragged: a valid call failed: " + message);
    if (variant == 2 && bytes != 0) crash("ragged: a failed size query answered nonzero");
    for (size_t i = 0; i < kArenaBytes; ++i) {
      if (values_arena[i] != kSentinel || indices_arena[i] != kSentinel) {
        crash("ragged: a failed call wrote to an output");
      }
    }
    ++tally.rejected[kOp];
    return;
  }
  if (expect_failure) crash("ragged: a defective call succeeded (defect " + std::to_string(static_cast<int>(defect)) + ")");
  ++tally.checked[kOp];
  if (variant == 2) return;

  // The reference, row by row.
  const size_t item = in_type.size, index_item = index_raw == MTK_INT32 ? 4 : 8;
  std::vector<bool> allowed_values(kArenaBytes), allowed_indices(kArenaBytes);
  const std::vector<unsigned char> zero(item, 0);
  for (int64_t r = 0; r < rows; ++r) {
    // Computed for the window's elements only: an empty input's strides may be anything.
    auto at = [&](int64_t p) {
      return static_cast<const unsigned char*>(in.data) +
             (r * in.strides[0] + p * in.strides[1]) * static_cast<int64_t>(item);
    };
    int64_t b = r;
    if (transform == 2 && with_row_to_batch) b = read_index(row_to_batch_used, r);
    const bool no_table = transform == 2 && (b < 0 || b >= table.sizes[0]);
    const ragged_model::Window w = ragged_model::window(
        n, no_table ? 0 : read_index(lengths_used, r), with_starts ? read_index(starts_used, r) : 0);
    const std::vector<int64_t> won = ragged_model::winners(w, k, [&](int64_t p, int64_t q) {
      const Rank rp = rank_of(raw_dtype(in), at(p)), rq = rank_of(raw_dtype(in), at(q));
      if (rp.nan != rq.nan) return largest ? rp.nan : rq.nan;
      if (rp.nan) return false;
      return largest ? rp.value > rq.value : rp.value < rq.value;
    });
    std::vector<std::pair<int64_t, std::vector<unsigned char>>> want, got;
    for (int64_t j = 0; j < k; ++j) {
      int64_t index = -1;
      const unsigned char* value = zero.data();
      if (j < static_cast<int64_t>(won.size())) {
        const int64_t i = won[static_cast<size_t>(j)];
        index = i;
        if (transform == 1) index = ragged_model::wrapping_add(read_index(offsets, r), i);
        if (transform == 2) {
          const int64_t entry_at = b * table.strides[0] + (i / page_size) * table.strides[1];
          int64_t entry;
          if (raw_dtype(table) == MTK_INT64) std::memcpy(&entry, params_arena + 4096 + entry_at * 8, 8);
          else { int32_t narrow; std::memcpy(&narrow, params_arena + 4096 + entry_at * 4, 4); entry = narrow; }
          index = ragged_model::paged(entry, page_size, i);
        }
        index = ragged_model::stored(index, static_cast<mtk_dtype>(index_raw));
        value = at(w.start + i);
      }
      const unsigned char* ip = static_cast<const unsigned char*>(idx.data) + (r * idx.strides[0] + j * idx.strides[1]) * static_cast<int64_t>(index_item);
      const unsigned char* vp = static_cast<const unsigned char*>(val.data) + (r * val.strides[0] + j * val.strides[1]) * static_cast<int64_t>(item);
      int64_t got_index;
      if (index_item == 4) { int32_t narrow; std::memcpy(&narrow, ip, 4); got_index = narrow; }
      else std::memcpy(&got_index, ip, 8);
      allow(allowed_indices, indices_arena, ip, index_item);
      std::vector<unsigned char> got_value(item, 0);
      if (with_values) {
        allow(allowed_values, values_arena, vp, item);
        got_value.assign(vp, vp + item);
      } else {
        value = zero.data();
      }
      want.emplace_back(index, std::vector<unsigned char>(value, value + item));
      got.emplace_back(got_index, got_value);
    }
    if (!sorted) {  // the same winners in any order, then the same padding
      const auto winners = static_cast<std::ptrdiff_t>(won.size());
      std::sort(want.begin(), want.begin() + winners);
      std::sort(got.begin(), got.begin() + winners);
    }
    if (got != want) crash("ragged: result differs from the model at row " + std::to_string(r));
  }
  expect_only_allowed_changes(values_arena, allowed_values);
  expect_only_allowed_changes(indices_arena, allowed_indices);
}

// ---- buffer registration ---------------------------------------------------------------------

// mtk_register_buffer / mtk_unregister_buffer on the CPU backend, which takes no foreign
// buffers. Whatever the context (live, NULL, foreign), the handle (NULL, the fuzzer's memory,
// any address: never to be read) and data_out, each call must fail with the status its first
// bad argument gives (context, then data_out, then the handle, then the backend's refusal), say
// so, clear data_out, and leave every byte of the fuzzer's memory as it was.
void fuzz_registration(FuzzedDataProvider& fdp, mtk_context ctx) {
  int not_a_context = 0;
  const std::vector<unsigned char> before(input_arena, input_arena + kArenaBytes);
  for (int call = 0; call < 8 && fdp.remaining_bytes() > 0; ++call) {
    const int which_context = fdp.ConsumeIntegralInRange<int>(0, 7);  // mostly the live one
    const mtk_context target = which_context == 0   ? nullptr
                               : which_context == 1 ? reinterpret_cast<mtk_context>(&not_a_context)
                                                    : ctx;
    void* handle = nullptr;
    switch (fdp.ConsumeIntegralInRange<int>(0, 3)) {
      case 0: break;
      case 1: handle = input_arena + fdp.ConsumeIntegralInRange<size_t>(0, kArenaBytes - 1); break;
      default: handle = reinterpret_cast<void*>(fdp.ConsumeIntegral<uintptr_t>()); break;
    }
    const bool unregister = fdp.ConsumeBool();
    const bool with_data_out = !rare(fdp, 4);
    void* data = &not_a_context;
    const mtk_status got = unregister ? mtk_unregister_buffer(target, handle)
                                      : mtk_register_buffer(target, handle, with_data_out ? &data : nullptr);
    mtk_status want = MTK_ERROR_BACKEND_UNAVAILABLE;
    const char* says = "the cpu backend registers no foreign buffers";
    if (target == nullptr) {
      want = MTK_ERROR_INVALID_CONTEXT;
      says = "ctx is NULL";
    } else if (target != ctx) {
      want = MTK_ERROR_INVALID_CONTEXT;
      says = "is not a live context";
    } else if (!unregister && !with_data_out) {
      want = MTK_ERROR_INVALID_ARGUMENT;
      says = "data_out is NULL";
    } else if (handle == nullptr) {
      want = MTK_ERROR_INVALID_ARGUMENT;
      says = unregister ? "data is NULL" : "buffer is NULL";
    }
    const char* name = unregister ? "mtk_unregister_buffer" : "mtk_register_buffer";
    if (got != want || std::strstr(mtk_last_error_message(), says) == nullptr) {
      crash(std::string(name) + ": status " + std::to_string(got) + " \"" + mtk_last_error_message() +
            "\", expected status " + std::to_string(want) + " and \"" + says + "\"");
    }
    if (!unregister && with_data_out && data != nullptr) crash("mtk_register_buffer: a refusal left data_out set");
    ++tally.rejected[5];
  }
  if (std::memcmp(before.data(), input_arena, kArenaBytes) != 0) crash("registration: the fuzzer's memory changed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mtk_context ctx = [] {
    mtk_context c = nullptr;
    if (mtk_context_create(MTK_BACKEND_CPU, 0, &c) != MTK_SUCCESS) crash("no CPU context");
    return c;
  }();
  FuzzedDataProvider fdp(data, size);
  // One byte (the input's last: FuzzedDataProvider takes integers from the end) picks the
  // entry point: a quarter of the inputs go to ragged rows (192-255, as when they were added),
  // 24 of 256 to sampling, 8 to buffer registration, the rest map as they did before those
  // existed (byte % 3). Entry points added later take bytes no checked-in regression ends with
  // (fuzz_regressions/: 0, 5, 81, 205, 255), so each replays where it was found.
  const int pick = fdp.ConsumeIntegralInRange<int>(0, 255);
  if (pick >= 192) {
    fuzz_ragged(fdp, ctx);
    return 0;
  }
  if (pick >= 184) {
    fuzz_registration(fdp, ctx);
    return 0;
  }
  if (pick >= 160) {
    fuzz_sampling(fdp, ctx);
    return 0;
  }
  switch (pick % 3) {
    case 0: fuzz_topk(fdp, ctx, false); break;
    case 1: fuzz_topk(fdp, ctx, true); break;
    case 2: fuzz_route(fdp, ctx); break;
  }
  return 0;
}
