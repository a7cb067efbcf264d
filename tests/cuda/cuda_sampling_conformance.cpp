// CUDA-backend conformance of the sampling filters and samplers (docs/CONTRACT.md, "Sampling
// filters"), through the C ABI: every result of mtk_top_k_mask_logits, mtk_renorm_probs,
// mtk_sample and mtk_sample_from_logits on CUDA is compared bit for bit with the CPU backend's
// (whose own conformance against an independent reference is tests/test_sampling.py).
// Cases: f32, f16 and bf16 logits, f32 probabilities; rows of gaussian values, many ties, NaN,
// infinities, signed zeros, subnormals, masses above 2^64, one value throughout, and rows
// without any mass; scalar and per-row (int32 and int64) top_k around every boundary (0, 1, the
// shared-memory candidates' capacity 2048 and past it, n - 1, n), scalar and per-row top_p,
// min_p, temperature (greedy, subnormal, +inf) and uniforms (0, 1, NaN, negative); 1, 64 and 256
// rows of 151936 and 262144 tokens and small odd sizes, min-p alone on 64 to 256 rows; padded
// rows; int32 and int64 samples; the default scratch and a caller's workspace. Then batch
// invariance on CUDA (rows run alone equal the same rows in the batch) and one CUDA graph
// replayed with new per-row parameters.
//
// Usage: cuda_sampling_conformance [--quick | --sanitize]   --quick: rows * n <= 2^18 (memcheck);
// --sanitize: rows * n <= 2^15 and smaller batch-invariance rows (racecheck, whose cost grows
// with every shared-memory access), still every path: candidates, their overflow, workspace,
// min-p alone, and a draw over several ranges.
// Exits 0 when every case passes, 1 on a mismatch, 2 when no CUDA device is available.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "conformance_support.hpp"
#include "metaltopk.h"

namespace {

using namespace conformance;

int failures = 0;
int cases = 0;

const char* op_label(mtk_sampling_op op) {
  static const char* names[] = {"top_k_mask_logits", "renorm_probs", "sample",
                                "sample_from_logits"};
  return names[op];
}

bool from_logits(mtk_sampling_op op) {
  return op == MTK_SAMPLING_TOP_K_MASK_LOGITS || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
}
bool samples(mtk_sampling_op op) {
  return op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// float32 bits to float16 bits, truncating (any pattern is a valid input; this keeps values
// close to the float's so that rows look like logits). NaN stays NaN, overflow becomes inf.
uint16_t to_f16(uint32_t b) {
  const uint16_t sign = uint16_t((b >> 16) & 0x8000u);
  const uint32_t magnitude = b & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  const int exponent = int(magnitude >> 23) - 127 + 15;
  if (exponent >= 31) return uint16_t(sign | 0x7c00u);
  if (exponent <= 0) {  // subnormal or zero in f16
    if (exponent < -10) return sign;
    const uint32_t m = (magnitude & 0x7fffffu) | 0x800000u;
    return uint16_t(sign | (m >> (14 - exponent)));
  }
  return uint16_t(sign | (uint32_t(exponent) << 10) | ((magnitude >> 13) & 0x3ffu));
}

// What a row holds.
enum class RowKind { Gaussian, Ties, Specials, Constant, NoMass, Infinite, Subnormal, kCount };

const char* kind_label(RowKind k) {
  static const char* names[] = {"gaussian", "ties", "specials", "constant", "no-mass",
                                "infinite", "subnormal"};
  return names[int(k)];
}

// One value of a row, as float32 bits: logits, or probabilities (`probs`).
uint32_t make_value(RowKind kind, bool probs, std::mt19937_64& rng,
                    std::normal_distribution<float>& normal) {
  const uint64_t raw = rng();
  const float g = normal(rng);
  switch (kind) {
    case RowKind::Gaussian:
      return bits_of(probs ? std::exp(2.0f * g) / 4096.0f : 3.0f * g);
    case RowKind::Ties:
      return bits_of(probs ? float(raw % 16) / 1024.0f : float(int(raw % 33) - 16) / 4.0f);
    case RowKind::Specials: {
      if (raw % 8 != 0) return bits_of(probs ? std::exp(g) / 1000.0f : 2.0f * g);
      const uint32_t logit_specials[] = {0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u,
                                         0x80000000u, 0u, 0x00000001u, 0x42f00000u /* 120 */};
      const uint32_t prob_specials[] = {0x7fc00000u, 0xbf800000u /* -1 */, 0x7f800000u,
                                        0xff800000u, 0x80000000u, 0u, 0x00000003u,
                                        0x70000000u /* above 2^64 */};
      return (probs ? prob_specials : logit_specials)[(raw >> 8) % 8];
    }
    case RowKind::Constant:
      return bits_of(probs ? 0.001f : 1.5f);
    case RowKind::NoMass:
      // Logits: NaN and -inf only (no mass; NaN is the top-1). Probabilities: zeros, negatives.
      if (probs) return (raw & 1) ? 0u : 0xc0000000u;
      return (raw % 64 == 0) ? 0x7fc00000u : 0xff800000u;
    case RowKind::Infinite:
      if (raw % 97 == 0) return 0x7f800000u;
      return bits_of(probs ? std::exp(g) / 1000.0f : 2.0f * g);
    case RowKind::Subnormal:
      // Logits near the flush boundary and probabilities that are subnormal.
      return probs ? uint32_t(1 + raw % 0x7fffffu) : bits_of(float(g) * 1e-37f);
    default:
      return 0u;
  }
}

// A parameter as one scalar or a [rows] tensor.
template <class T>
struct PerRow {
  bool per_row = false;
  T scalar{};
  std::vector<T> values;  // [rows] when per_row
};

struct Case {
  mtk_sampling_op op;
  mtk_dtype dtype;
  int64_t rows, n;
  int64_t row_pad;  // extra elements between rows
  PerRow<int64_t> top_k;
  mtk_dtype top_k_dtype;
  PerRow<float> top_p, min_p, temperature;
  bool set_top_p, set_min_p, set_temperature;
  std::vector<float> uniforms;
  mtk_dtype samples_dtype;
  bool caller_workspace;
  int kind_offset;  // row r holds RowKind((r + kind_offset) % kinds), some rows without mass
};

struct HostInput {
  std::vector<uint8_t> bytes;  // [rows, n + row_pad] of the case's dtype
};

size_t element_size(mtk_dtype d) { return d == MTK_FLOAT32 ? 4 : 2; }

RowKind row_kind(const Case& c, int64_t r) {
  // Rows without mass are rarer than the others: a batch of 256 has a few.
  const int kinds = int(RowKind::kCount);
  const int k = int((r * 7 + c.kind_offset) % (kinds * 3));
  return k < kinds ? RowKind(k) : (k % 2 == 0 ? RowKind::Gaussian : RowKind::Ties);
}

HostInput make_input(const Case& c, std::mt19937_64& rng) {
  HostInput in;
  const int64_t pitch = c.n + c.row_pad;
  const size_t size = element_size(c.dtype);
  in.bytes.assign(size_t(c.rows * pitch) * size, 0xab);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const bool probs = !from_logits(c.op);
  for (int64_t r = 0; r < c.rows; ++r) {
    const RowKind kind = row_kind(c, r);
    for (int64_t i = 0; i < c.n; ++i) {
      const uint32_t b = make_value(kind, probs, rng, normal);
      uint8_t* p = in.bytes.data() + size_t(r * pitch + i) * size;
      if (c.dtype == MTK_FLOAT32) {
        std::memcpy(p, &b, 4);
      } else {
        const uint16_t h = c.dtype == MTK_FLOAT16 ? to_f16(b) : uint16_t(b >> 16);
        std::memcpy(p, &h, 2);
      }
    }
  }
  return in;
}

mtk_tensor vector_tensor(void* data, mtk_dtype dtype, int64_t size) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.sizes[0] = size;
  t.strides[0] = 1;
  return t;
}

// Device copies (or the host bytes, for the CPU backend), freed on scope exit.
struct Placed {
  mtk_context ctx;
  bool device;
  std::vector<void*> owned;

  void* place(const void* bytes, size_t size) {
    if (!device) return const_cast<void*>(bytes);
    void* p = nullptr;
    CHECK_OK(mtk_malloc(ctx, size == 0 ? 1 : size, &p));
    if (size != 0) CHECK_OK(mtk_memcpy(ctx, p, bytes, size, MTK_COPY_HOST_TO_DEVICE, nullptr));
    owned.push_back(p);
    return p;
  }
  ~Placed() {
    for (void* p : owned) mtk_free(ctx, p);
  }
};

std::vector<uint8_t> top_k_bytes(const Case& c) {
  const size_t size = c.top_k_dtype == MTK_INT32 ? 4 : 8;
  std::vector<uint8_t> bytes(c.top_k.values.size() * size);
  for (size_t r = 0; r < c.top_k.values.size(); ++r) {
    if (size == 4) {
      const int32_t v = int32_t(c.top_k.values[r]);
      std::memcpy(&bytes[r * 4], &v, 4);
    } else {
      std::memcpy(&bytes[r * 8], &c.top_k.values[r], 8);
    }
  }
  return bytes;
}

size_t output_bytes(const Case& c) {
  if (samples(c.op)) return size_t(c.rows) * (c.samples_dtype == MTK_INT32 ? 4 : 8);
  const size_t size = c.op == MTK_SAMPLING_RENORM_PROBS ? 4 : element_size(c.dtype);
  return size_t(c.rows * c.n) * size;
}

// Runs the case on ctx; returns the output bytes.
std::vector<uint8_t> run(mtk_context ctx, bool device, const Case& c, const HostInput& in,
                         cudaStream_t stream = nullptr) {
  Placed placed{ctx, device, {}};
  mtk_tensor input{};
  input.data = placed.place(in.bytes.data(), in.bytes.size());
  input.dtype = c.dtype;
  input.ndim = 2;
  input.sizes[0] = c.rows;
  input.sizes[1] = c.n;
  input.strides[0] = c.n + c.row_pad;
  input.strides[1] = 1;

  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  mtk_tensor top_k{}, top_p{}, min_p{}, temperature{};
  const std::vector<uint8_t> k_bytes = top_k_bytes(c);
  if (c.top_k.per_row) {
    top_k = vector_tensor(placed.place(k_bytes.data(), k_bytes.size()), c.top_k_dtype, c.rows);
    params.top_k = &top_k;
  } else {
    params.top_k_value = c.top_k.scalar;
  }
  auto set_float = [&](const PerRow<float>& value, mtk_tensor& tensor, const mtk_tensor*& member,
                       float& scalar) {
    if (value.per_row) {
      tensor = vector_tensor(placed.place(value.values.data(), value.values.size() * 4),
                             MTK_FLOAT32, c.rows);
      member = &tensor;
    } else {
      scalar = value.scalar;
    }
  };
  if (c.set_top_p) set_float(c.top_p, top_p, params.top_p, params.top_p_value);
  if (c.set_min_p) set_float(c.min_p, min_p, params.min_p, params.min_p_value);
  if (c.set_temperature) {
    set_float(c.temperature, temperature, params.temperature, params.temperature_value);
  }
  mtk_tensor uniforms{};
  if (samples(c.op)) {
    uniforms = vector_tensor(placed.place(c.uniforms.data(), c.uniforms.size() * 4),
                             MTK_FLOAT32, c.rows);
  }
  std::vector<uint8_t> out(output_bytes(c), 0x5a);
  mtk_tensor output{};
  output.data = placed.place(out.data(), out.size());
  if (samples(c.op)) {
    output = vector_tensor(output.data, c.samples_dtype, c.rows);
  } else {
    output.dtype = c.op == MTK_SAMPLING_RENORM_PROBS ? MTK_FLOAT32 : c.dtype;
    output.ndim = 2;
    output.sizes[0] = c.rows;
    output.sizes[1] = c.n;
    output.strides[0] = c.n;
    output.strides[1] = 1;
  }
  const mtk_tensor* uniforms_or_null = samples(c.op) ? &uniforms : nullptr;
  if (c.caller_workspace) {
    size_t bytes = 0;
    CHECK_OK(mtk_sampling_workspace_size(ctx, c.op, &input, &params, output.dtype, &bytes));
    void* workspace = nullptr;
    if (bytes != 0) {
      CHECK_OK(mtk_malloc(ctx, bytes, &workspace));
      placed.owned.push_back(workspace);
    }
    CHECK_OK(mtk_sampling_with_workspace(ctx, c.op, &input, &params, uniforms_or_null, &output,
                                         workspace, bytes, stream));
  } else {
    switch (c.op) {
      case MTK_SAMPLING_TOP_K_MASK_LOGITS:
        CHECK_OK(mtk_top_k_mask_logits(ctx, &input, &params, &output, stream));
        break;
      case MTK_SAMPLING_RENORM_PROBS:
        CHECK_OK(mtk_renorm_probs(ctx, &input, &params, &output, stream));
        break;
      case MTK_SAMPLING_SAMPLE:
        CHECK_OK(mtk_sample(ctx, &input, &params, &uniforms, &output, stream));
        break;
      case MTK_SAMPLING_SAMPLE_FROM_LOGITS:
        CHECK_OK(mtk_sample_from_logits(ctx, &input, &params, &uniforms, &output, stream));
        break;
    }
  }
  if (device) {
    CHECK_OK(mtk_memcpy(ctx, out.data(), output.data, out.size(), MTK_COPY_DEVICE_TO_HOST,
                        stream));
    CHECK_OK(mtk_synchronize(ctx, stream));
  }
  return out;
}

std::string describe(const Case& c) {
  char text[256];
  std::snprintf(text, sizeof text,
                "%s %s rows=%lld n=%lld pad=%lld top_k=%s%lld top_p=%s%g min_p=%s%g "
                "temperature=%s%g workspace=%d kinds+%d",
                op_label(c.op), dtype_label(c.dtype), (long long)c.rows, (long long)c.n,
                (long long)c.row_pad, c.top_k.per_row ? "per-row:" : "",
                (long long)(c.top_k.per_row ? c.top_k.values[0] : c.top_k.scalar),
                c.top_p.per_row ? "per-row:" : "",
                c.top_p.per_row ? c.top_p.values[0] : c.top_p.scalar,
                c.min_p.per_row ? "per-row:" : "",
                c.min_p.per_row ? c.min_p.values[0] : c.min_p.scalar,
                c.temperature.per_row ? "per-row:" : "",
                c.temperature.per_row ? c.temperature.values[0] : c.temperature.scalar,
                int(c.caller_workspace), c.kind_offset);
  return text;
}

// The first row whose output differs, or -1.
int64_t first_differing_row(const Case& c, const std::vector<uint8_t>& a,
                            const std::vector<uint8_t>& b) {
  const size_t row_bytes = a.size() / size_t(c.rows);
  for (int64_t r = 0; r < c.rows; ++r) {
    if (std::memcmp(a.data() + size_t(r) * row_bytes, b.data() + size_t(r) * row_bytes,
                    row_bytes) != 0) {
      return r;
    }
  }
  return -1;
}

void report_difference(const Case& c, const char* what, const std::vector<uint8_t>& want,
                       const std::vector<uint8_t>& got) {
  const int64_t r = first_differing_row(c, want, got);
  std::fprintf(stderr, "FAIL %s: %s, first at row %lld (%s)", what, describe(c).c_str(),
               (long long)r, r >= 0 ? kind_label(row_kind(c, r)) : "-");
  if (r >= 0 && samples(c.op)) {
    const bool wide = c.samples_dtype == MTK_INT64;
    int64_t w = 0, g = 0;
    std::memcpy(&w, want.data() + size_t(r) * (wide ? 8 : 4), wide ? 8 : 4);
    std::memcpy(&g, got.data() + size_t(r) * (wide ? 8 : 4), wide ? 8 : 4);
    std::fprintf(stderr, ": cpu token %lld, cuda token %lld", (long long)w, (long long)g);
  }
  std::fprintf(stderr, "\n");
  ++failures;
}

void check(mtk_context cuda, mtk_context cpu, const Case& c, std::mt19937_64& rng) {
  ++cases;
  const HostInput in = make_input(c, rng);
  const std::vector<uint8_t> want = run(cpu, false, c, in);
  const std::vector<uint8_t> got = run(cuda, true, c, in);
  if (want != got) report_difference(c, "cuda != cpu", want, got);
}

// Rows of a case run alone on CUDA give the bytes they have in the batch.
void check_batch_invariance(mtk_context cuda, const Case& c, std::mt19937_64& rng) {
  const HostInput in = make_input(c, rng);
  const std::vector<uint8_t> batch = run(cuda, true, c, in);
  const size_t row_out = batch.size() / size_t(c.rows);
  const size_t pitch = size_t(c.n + c.row_pad) * element_size(c.dtype);
  for (const int64_t r : {int64_t(0), c.rows / 2, c.rows - 1}) {
    ++cases;
    Case alone = c;
    alone.rows = 1;
    auto pick = [&](auto& per_row) {
      if (per_row.per_row) per_row.values = {per_row.values[size_t(r)]};
    };
    pick(alone.top_k);
    pick(alone.top_p);
    pick(alone.min_p);
    pick(alone.temperature);
    if (samples(c.op)) alone.uniforms = {c.uniforms[size_t(r)]};
    alone.kind_offset = 0;
    HostInput row;
    row.bytes.assign(in.bytes.begin() + std::ptrdiff_t(size_t(r) * pitch),
                     in.bytes.begin() + std::ptrdiff_t(size_t(r) * pitch + pitch));
    const std::vector<uint8_t> got = run(cuda, true, alone, row);
    if (std::memcmp(got.data(), batch.data() + size_t(r) * row_out, row_out) != 0) {
      std::fprintf(stderr, "FAIL batch invariance: row %lld of %s alone differs\n", (long long)r,
                   describe(c).c_str());
      ++failures;
    }
  }
}

// ---- the case set ------------------------------------------------------------------------------

struct Generator {
  std::mt19937_64& rng;

  int64_t pick_top_k(int64_t n) {
    const int64_t choices[] = {0, 1, 2, 50, 1024, 2048, 2049, 5000, n - 1, n, -1, n + 7};
    return choices[rng() % 12];
  }
  float pick_top_p() {
    const float choices[] = {1.0f, 0.5f, 0.9f, 0.0f, -1.0f, NAN, 0.999f, 0.95f, 1e-30f, 0.7f};
    return choices[rng() % 10];
  }
  float pick_min_p() {
    const float choices[] = {0.0f, 0.1f, 0.5f, 1.0f, 2.0f, NAN, 1e-6f, 0.05f};
    return choices[rng() % 8];
  }
  float pick_temperature() {
    const float choices[] = {1.0f, 0.7f, 0.0f, -1.0f, NAN, 1e-39f, 2.0f, INFINITY, 1e-3f, 1.3f};
    return choices[rng() % 10];
  }
  float pick_uniform() {
    switch (rng() % 10) {
      case 0: return 0.0f;
      case 1: return float_of(0x3f7fffffu);
      case 2: return 1.0f;
      case 3: return -0.5f;
      case 4: return NAN;
      default: return float(rng() >> 40) / float(1ull << 24);
    }
  }

  // A case of `op` with every parameter the op reads drawn as scalar or per row.
  Case make(mtk_sampling_op op, mtk_dtype dtype, int64_t rows, int64_t n) {
    Case c{};
    c.op = op;
    c.dtype = dtype;
    c.rows = rows;
    c.n = n;
    c.row_pad = (rng() % 4 == 0) ? 3 : 0;
    c.top_k_dtype = (rng() & 1) ? MTK_INT32 : MTK_INT64;
    c.samples_dtype = (rng() & 1) ? MTK_INT32 : MTK_INT64;
    c.caller_workspace = (rng() % 3) == 0;
    c.kind_offset = int(rng() % 64);
    c.top_k.per_row = (rng() & 1) != 0;
    c.top_k.scalar = pick_top_k(n);
    if (c.top_k.per_row) {
      for (int64_t r = 0; r < rows; ++r) c.top_k.values.push_back(pick_top_k(n));
    }
    auto draw = [&](PerRow<float>& p, float (Generator::*pick)()) {
      p.per_row = (rng() & 1) != 0;
      p.scalar = (this->*pick)();
      if (p.per_row) {
        for (int64_t r = 0; r < rows; ++r) p.values.push_back((this->*pick)());
      }
    };
    c.set_top_p = op != MTK_SAMPLING_TOP_K_MASK_LOGITS;
    c.set_min_p = op != MTK_SAMPLING_TOP_K_MASK_LOGITS;
    c.set_temperature = op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    if (c.set_top_p) draw(c.top_p, &Generator::pick_top_p);
    if (c.set_min_p) draw(c.min_p, &Generator::pick_min_p);
    if (c.set_temperature) draw(c.temperature, &Generator::pick_temperature);
    if (samples(op)) {
      for (int64_t r = 0; r < rows; ++r) c.uniforms.push_back(pick_uniform());
    }
    return c;
  }

  // The benchmark shape: scalar or per-row top_k in 1..1024 and top_p in 0.5..1, no
  // min_p, temperature 1 (or a per-row one near it).
  Case make_benchmark(mtk_sampling_op op, mtk_dtype dtype, int64_t rows, int64_t n,
                      bool per_row) {
    Case c = make(op, dtype, rows, n);
    c.row_pad = 0;
    c.top_k = {};
    c.top_k.per_row = per_row;
    c.top_k.scalar = per_row ? 0 : int64_t(1 + rng() % 1024);
    c.top_p = {};
    c.top_p.per_row = per_row;
    c.top_p.scalar = per_row ? 1.0f : 0.5f + float(rng() % 500) / 1000.0f;
    c.min_p = {};
    c.temperature = {};
    c.temperature.scalar = 1.0f;
    for (int64_t r = 0; r < rows && per_row; ++r) {
      c.top_k.values.push_back(int64_t(1 + rng() % 1024));
      c.top_p.values.push_back(0.5f + float(rng() % 501) / 1000.0f);
    }
    c.kind_offset = 0;  // gaussian rows mostly, as logits are
    return c;
  }

  // Probabilities that min-p alone filters (no top-k, no top-p: the min-p kernel), min_p drawn
  // over its boundaries, scalar or per row.
  Case make_min_p_alone(mtk_sampling_op op, int64_t rows, int64_t n) {
    Case c = make(op, MTK_FLOAT32, rows, n);
    c.top_k = {};
    c.top_p = {};
    c.top_p.scalar = 1.0f;
    return c;
  }
};

// One captured call of sample_from_logits with per-row top_k, top_p, temperature and uniforms
// in a caller's workspace, replayed after the parameters change on the device.
void check_graph_replay(mtk_context cuda, mtk_context cpu, std::mt19937_64& rng) {
  Generator gen{rng};
  Case c = gen.make(MTK_SAMPLING_SAMPLE_FROM_LOGITS, MTK_BFLOAT16, 64, 151936);
  c.row_pad = 0;
  c.top_k.per_row = c.top_p.per_row = c.min_p.per_row = c.temperature.per_row = true;
  c.top_k_dtype = MTK_INT64;
  c.samples_dtype = MTK_INT32;
  auto redraw = [&]() {
    c.top_k.values.clear();
    c.top_p.values.clear();
    c.min_p.values.clear();
    c.temperature.values.clear();
    c.uniforms.clear();
    for (int64_t r = 0; r < c.rows; ++r) {
      c.top_k.values.push_back(gen.pick_top_k(c.n));
      c.top_p.values.push_back(gen.pick_top_p());
      c.min_p.values.push_back(gen.pick_min_p());
      c.temperature.values.push_back(gen.pick_temperature());
      c.uniforms.push_back(gen.pick_uniform());
    }
  };
  redraw();
  const HostInput in = make_input(c, rng);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    Placed placed{cuda, true, {}};
    mtk_tensor input{};
    input.data = placed.place(in.bytes.data(), in.bytes.size());
    input.dtype = c.dtype;
    input.ndim = 2;
    input.sizes[0] = c.rows;
    input.sizes[1] = c.n;
    input.strides[0] = c.n;
    input.strides[1] = 1;
    const std::vector<uint8_t> k_bytes = top_k_bytes(c);
    mtk_tensor top_k = vector_tensor(placed.place(k_bytes.data(), k_bytes.size()), MTK_INT64,
                                     c.rows);
    mtk_tensor top_p = vector_tensor(placed.place(c.top_p.values.data(), size_t(c.rows) * 4),
                                     MTK_FLOAT32, c.rows);
    mtk_tensor min_p = vector_tensor(placed.place(c.min_p.values.data(), size_t(c.rows) * 4),
                                     MTK_FLOAT32, c.rows);
    mtk_tensor temperature = vector_tensor(
        placed.place(c.temperature.values.data(), size_t(c.rows) * 4), MTK_FLOAT32, c.rows);
    mtk_tensor uniforms = vector_tensor(placed.place(c.uniforms.data(), size_t(c.rows) * 4),
                                        MTK_FLOAT32, c.rows);
    std::vector<int32_t> tokens(size_t(c.rows), -1);
    mtk_tensor output = vector_tensor(placed.place(tokens.data(), tokens.size() * 4), MTK_INT32,
                                      c.rows);
    mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
    params.top_k = &top_k;
    params.top_p = &top_p;
    params.min_p = &min_p;
    params.temperature = &temperature;
    size_t bytes = 0;
    CHECK_OK(mtk_sampling_workspace_size(cuda, c.op, &input, &params, MTK_INT32, &bytes));
    void* workspace = nullptr;
    if (bytes != 0) {
      CHECK_OK(mtk_malloc(cuda, bytes, &workspace));
      placed.owned.push_back(workspace);
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    CHECK_OK(mtk_sampling_with_workspace(cuda, c.op, &input, &params, &uniforms, &output,
                                         workspace, bytes, stream));
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 4; ++replay) {
      ++cases;
      if (replay > 0) redraw();
      const std::vector<uint8_t> new_k = top_k_bytes(c);
      CHECK_OK(mtk_memcpy(cuda, top_k.data, new_k.data(), new_k.size(), MTK_COPY_HOST_TO_DEVICE,
                          stream));
      CHECK_OK(mtk_memcpy(cuda, top_p.data, c.top_p.values.data(), size_t(c.rows) * 4,
                          MTK_COPY_HOST_TO_DEVICE, stream));
      CHECK_OK(mtk_memcpy(cuda, min_p.data, c.min_p.values.data(), size_t(c.rows) * 4,
                          MTK_COPY_HOST_TO_DEVICE, stream));
      CHECK_OK(mtk_memcpy(cuda, temperature.data, c.temperature.values.data(),
                          size_t(c.rows) * 4, MTK_COPY_HOST_TO_DEVICE, stream));
      CHECK_OK(mtk_memcpy(cuda, uniforms.data, c.uniforms.data(), size_t(c.rows) * 4,
                          MTK_COPY_HOST_TO_DEVICE, stream));
      CHECK_CUDA(cudaGraphLaunch(exec, stream));
      std::vector<uint8_t> got(size_t(c.rows) * 4);
      CHECK_OK(mtk_memcpy(cuda, got.data(), output.data, got.size(), MTK_COPY_DEVICE_TO_HOST,
                          stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const std::vector<uint8_t> want = run(cpu, false, c, in);
      if (want != got) {
        report_difference(c, replay == 0 ? "graph replay 0" : "graph replay 1-3", want, got);
      }
    }
    CHECK_CUDA(cudaGraphExecDestroy(exec));
    CHECK_CUDA(cudaGraphDestroy(graph));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  if (!cuda_backend_runs()) return 2;
  const bool sanitize = argc > 1 && std::strcmp(argv[1], "--sanitize") == 0;
  const bool quick = sanitize || (argc > 1 && std::strcmp(argv[1], "--quick") == 0);
  const int64_t small_cap = sanitize ? (int64_t(1) << 15) : (int64_t(1) << 18);
  const auto [cuda, cpu] = create_contexts();
  std::mt19937_64 rng(20261204);
  Generator gen{rng};
  const mtk_sampling_op ops[] = {MTK_SAMPLING_TOP_K_MASK_LOGITS, MTK_SAMPLING_RENORM_PROBS,
                                 MTK_SAMPLING_SAMPLE, MTK_SAMPLING_SAMPLE_FROM_LOGITS};
  auto dtypes_of = [](mtk_sampling_op op) {
    return from_logits(op) ? std::vector<mtk_dtype>{MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16}
                           : std::vector<mtk_dtype>{MTK_FLOAT32};
  };

  // Small and odd sizes, many draws each: every boundary of every parameter.
  struct Shape { int64_t rows, n; int draws; };
  const Shape small[] = {{1, 1, 4},    {3, 2, 6},     {5, 7, 8},      {17, 1000, 8},
                         {33, 2049, 8}, {9, 2050, 6},  {4, 4097, 6},   {40, 3001, 6},
                         {2, 70001, 4}, {300, 513, 3}, {1, 20000, 6}};
  for (const Shape& s : small) {
    if (quick && s.rows * s.n > small_cap) continue;
    for (mtk_sampling_op op : ops) {
      for (mtk_dtype d : dtypes_of(op)) {
        for (int draw = 0; draw < (quick ? 1 : s.draws); ++draw) {
          check(cuda, cpu, gen.make(op, d, s.rows, s.n), rng);
        }
      }
    }
  }
  // The shapes: 1, 64 and 256 rows of 151936 and 262144, scalar and per-row top_k and
  // top_p; and the same shapes with parameters drawn over every boundary.
  if (!quick) {
    for (const int64_t n : {int64_t(151936), int64_t(262144)}) {
      for (const int64_t rows : {int64_t(1), int64_t(64), int64_t(256)}) {
        for (mtk_sampling_op op : ops) {
          for (mtk_dtype d : dtypes_of(op)) {
            const bool large = rows * n > (int64_t(1) << 25);
            if (large && d == MTK_FLOAT16) continue;  // f32 and bf16 at the largest shapes
            check(cuda, cpu, gen.make_benchmark(op, d, rows, n, (rng() & 1) != 0), rng);
            if (!large) check(cuda, cpu, gen.make(op, d, rows, n), rng);
          }
        }
      }
    }
  }
  // min-p alone (its own kernel: one block a row in a batch of 256, a cluster a row in one of
  // 64), in batches larger and smaller than the L2.
  if (!quick) {
    for (const Shape& s : {Shape{256, 151936, 2}, Shape{100, 262144, 2}, Shape{64, 151936, 1}}) {
      for (mtk_sampling_op op : {MTK_SAMPLING_RENORM_PROBS, MTK_SAMPLING_SAMPLE}) {
        for (int draw = 0; draw < s.draws; ++draw) {
          check(cuda, cpu, gen.make_min_p_alone(op, s.rows, s.n), rng);
        }
      }
    }
  }
  // Batch invariance: a row alone equals the same row in a batch.
  for (mtk_sampling_op op : ops) {
    for (mtk_dtype d : dtypes_of(op)) {
      check_batch_invariance(cuda, gen.make(op, d, sanitize ? 8 : 64, quick ? 1000 : 151936),
                             rng);
      check_batch_invariance(
          cuda, gen.make_benchmark(op, d, sanitize ? 5 : 37, quick ? 3000 : 65536, true), rng);
    }
  }
  if (!quick) check_graph_replay(cuda, cpu, rng);
  CHECK_OK(mtk_context_destroy(cuda));
  CHECK_OK(mtk_context_destroy(cpu));
  std::printf("sampling conformance: %d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
