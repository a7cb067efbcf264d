// The sampling family of peers_bench (issue #33, --only sampling): metaltopk's sampling filters
// and samplers (mtk_sampling_with_workspace) against FlashInfer 0.7.2's sampling kernels, on
// 1, 64 and 256 rows of 151936 and 262144 columns, scalar and per-row parameters, float32 and
// bfloat16 logits (probabilities are float32). vLLM's sampler is Python: vllm_sampler.py times it
// and run.sh joins its rows with these.
//
// Each (shape, operation) is checked twice. metaltopk's CUDA result must equal its CPU backend's
// bit for bit (metaltopk_status; `refused` while the CUDA backend refuses sampling, and the peers
// still run). The peer is checked against metaltopk's result (the CPU backend's, so the check
// stands even when CUDA refuses): masks exactly (ties at the k-th value apart), renormalised
// probabilities by their kept set (ties or top-p boundary rounding apart) and within 1e-4
// relative. A sampled token is not comparable, since every peer draws its own randoms; the peer's
// tokens are checked to lie inside the filter (top-k rank, min-p threshold).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "harness.hpp"
#include "peers.hpp"

namespace harness {
namespace {

enum class Op { top_k_mask, top_k_renorm, top_p_renorm, top_k_top_p_sample, min_p_sample };

const char* op_name(Op op) {
  switch (op) {
    case Op::top_k_mask: return "top_k_mask_logits";
    case Op::top_k_renorm: return "top_k_renorm_probs";
    case Op::top_p_renorm: return "top_p_renorm_probs";
    case Op::top_k_top_p_sample: return "top_k_top_p_sampling_from_logits";
    case Op::min_p_sample: return "min_p_sampling_from_probs";
  }
  return "?";
}

bool reads_logits(Op op) { return op == Op::top_k_mask || op == Op::top_k_top_p_sample; }
bool samples(Op op) { return op == Op::top_k_top_p_sample || op == Op::min_p_sample; }

// The filters' values: one for every row, or per row (top_k in [1, 1024], top_p in [0.5, 1],
// min_p in [0.05, 0.2]) from a fixed seed. vllm_sampler.py writes the same `params` strings.
constexpr int64_t kTopK = 50, kTopKMax = 1024;
constexpr float kTopP = 0.9f, kMinP = 0.1f;

struct Filters {
  bool per_row = false;
  std::vector<int32_t> top_k;
  std::vector<float> top_p, min_p, uniforms;

  Filters(int64_t rows, bool per_row_values) : per_row(per_row_values) {
    for (int64_t r = 0; r < rows; ++r) {
      auto unit = [&](uint64_t stream) {  // [0, 1) with 24 bits
        return float(splitmix64(uint64_t(r) * 4 + stream + 977) >> 40) * 0x1p-24f;
      };
      top_k.push_back(per_row ? 1 + int32_t(splitmix64(uint64_t(r) * 4 + 1) % kTopKMax)
                              : int32_t(kTopK));
      top_p.push_back(per_row ? 0.5f + 0.5f * unit(1) : kTopP);
      min_p.push_back(per_row ? 0.05f + 0.15f * unit(2) : kMinP);
      uniforms.push_back(unit(3));
    }
  }
  std::string describe(Op op) const {
    const std::string k = per_row ? "top_k per-row 1..1024" : "top_k " + std::to_string(kTopK);
    const std::string p = per_row ? "top_p per-row 0.5..1" : "top_p 0.9";
    const std::string m = per_row ? "min_p per-row 0.05..0.2" : "min_p 0.1";
    switch (op) {
      case Op::top_k_mask:
      case Op::top_k_renorm: return k;
      case Op::top_p_renorm: return p;
      case Op::top_k_top_p_sample: return k + ", " + p;
      case Op::min_p_sample: return m;
    }
    return "";
  }
};

mtk_tensor row_vector(void* data, mtk_dtype dtype, int64_t rows) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.sizes[0] = rows;
  t.strides[0] = 1;
  return t;
}

// The mtk_sampling_params of `op` over the filters' tensors (host or device memory alike).
struct MtkCall {
  mtk_tensor top_k, top_p, min_p;
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  mtk_sampling_op op;

  MtkCall(Op which, const Filters& f, int64_t rows, void* top_k_data, void* top_p_data,
          void* min_p_data)
      : top_k(row_vector(top_k_data, MTK_INT32, rows)),
        top_p(row_vector(top_p_data, MTK_FLOAT32, rows)),
        min_p(row_vector(min_p_data, MTK_FLOAT32, rows)) {
    const bool k = which == Op::top_k_mask || which == Op::top_k_renorm ||
                   which == Op::top_k_top_p_sample;
    const bool p = which == Op::top_p_renorm || which == Op::top_k_top_p_sample;
    if (k) {
      if (f.per_row) params.top_k = &top_k;
      params.top_k_value = kTopK;
    }
    if (p) {
      if (f.per_row) params.top_p = &top_p;
      params.top_p_value = kTopP;
    }
    if (which == Op::min_p_sample) {
      if (f.per_row) params.min_p = &min_p;
      params.min_p_value = kMinP;
    }
    op = which == Op::top_k_mask     ? MTK_SAMPLING_TOP_K_MASK_LOGITS
         : which == Op::min_p_sample ? MTK_SAMPLING_SAMPLE
         : samples(which)            ? MTK_SAMPLING_SAMPLE_FROM_LOGITS
                                     : MTK_SAMPLING_RENORM_PROBS;
  }
  MtkCall(const MtkCall&) = delete;  // params points into this object
  MtkCall& operator=(const MtkCall&) = delete;
};

// ---- checks -------------------------------------------------------------------------------------

float element(const uint8_t* row, int64_t i, bool bf16) {
  if (bf16) {
    uint16_t bits;
    std::memcpy(&bits, row + i * 2, 2);
    return from_bfloat16(bits);
  }
  float v;
  std::memcpy(&v, row + i * 4, 4);
  return v;
}

void finish(Row& row, int64_t rows, const std::string& first, const char* tie_status) {
  row.rows_checked = rows;
  if (row.mismatch_rows > 0) {
    row.status = "mismatch";
    row.note += (row.note.empty() ? "" : "; ") + first;
  } else {
    row.status = row.tie_rows > 0 ? tie_status : "match";
  }
}

// A peer's masked logits against metaltopk's: bit for bit, except where the input equals the
// row's k-th value (a peer may keep every copy of it).
void compare_mask(int64_t rows, int64_t n, bool bf16, const uint8_t* input, const uint8_t* want,
                  const uint8_t* got, Row& row) {
  const size_t width = bf16 ? 2 : 4, row_bytes = size_t(n) * width;
  std::string first;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t *x = input + r * row_bytes, *w = want + r * row_bytes, *g = got + r * row_bytes;
    if (std::memcmp(w, g, row_bytes) == 0) continue;
    float kth = INFINITY;  // the smallest kept logit of metaltopk's mask
    for (int64_t i = 0; i < n; ++i)
      if (element(w, i, bf16) != -INFINITY) kth = std::min(kth, element(x, i, bf16));
    bool tie_only = true;
    for (int64_t i = 0; i < n && tie_only; ++i)
      if (std::memcmp(w + i * width, g + i * width, width) != 0)
        tie_only = element(x, i, bf16) == kth &&
                   (element(g, i, bf16) == -INFINITY || element(g, i, bf16) == kth);
    if (tie_only) {
      ++row.tie_rows;
    } else if (row.mismatch_rows++ == 0) {
      first = "first mismatching row " + std::to_string(r);
    }
  }
  finish(row, rows, first, "match (ties at the k-th value)");
}

// A peer's renormalised probabilities against metaltopk's. The kept sets must agree, apart from
// ties at the k-th probability (top-k) or, for top-p, two prefixes of the descending order whose
// difference holds at most 1e-4 of the row's mass (float rounding at the boundary); where they
// agree, every kept probability within 1e-4 relative (the largest error is reported).
void compare_renorm(int64_t rows, int64_t n, bool top_p, const float* input, const float* want,
                    const float* got, Row& row) {
  std::string first;
  row.max_prob_rel_err = 0;
  int64_t most_tokens = 0;  // the most tokens by which a boundary row's sets differ
  double most_mass = 0;     // and the largest share of a row's mass they hold
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = input + r * n, *w = want + r * n, *g = got + r * n;
    if (std::memcmp(w, g, size_t(n) * 4) == 0) continue;
    bool same_set = true;
    for (int64_t i = 0; i < n && same_set; ++i) same_set = (w[i] > 0) == (g[i] > 0);
    bool ok = true;
    if (same_set) {
      for (int64_t i = 0; i < n; ++i) {
        if (w[i] <= 0) continue;
        const double err = std::fabs(double(g[i]) - w[i]) / w[i];
        row.max_prob_rel_err = std::max(row.max_prob_rel_err, err);
        ok = ok && err <= 1e-4;
      }
    } else {
      // Each set a prefix of the descending order: its smallest kept input >= the largest left.
      // Returns the smallest kept input, or NaN when the set is not a prefix.
      auto prefix = [&](const float* kept) {
        float low = INFINITY, high = -INFINITY;
        for (int64_t i = 0; i < n; ++i) {
          if (kept[i] > 0) low = std::min(low, x[i]);
          else high = std::max(high, x[i]);
        }
        return low >= high ? low : NAN;
      };
      const float want_low = prefix(w), got_low = prefix(g);
      double total = 0, differ = 0;
      int64_t tokens = 0;
      for (int64_t i = 0; i < n; ++i) {
        total += x[i];
        if ((w[i] > 0) != (g[i] > 0)) {
          differ += x[i];
          ++tokens;
        }
      }
      const bool tie = !top_p && want_low == got_low;  // the same k-th value, another copy
      const bool boundary = top_p && !std::isnan(want_low) && !std::isnan(got_low) &&
                            differ <= 1e-4 * total;
      ok = tie || boundary;
      if (ok) ++row.tie_rows;
      if (boundary) {
        most_tokens = std::max(most_tokens, tokens);
        most_mass = std::max(most_mass, differ / total);
      }
    }
    if (!ok && row.mismatch_rows++ == 0) first = "first mismatching row " + std::to_string(r);
  }
  if (most_tokens > 0) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "top-p sets differ at the boundary by up to %lld tokens, %.2g "
                  "of the row's mass", (long long)most_tokens, most_mass);
    row.note += (row.note.empty() ? "" : "; ") + std::string(buf);
  }
  finish(row, rows, first,
         top_p ? "match (top-p boundary rounding)" : "match (ties at the k-th value)");
}

// A peer's tokens: each inside its row's filter. Top-k + top-p from logits: fewer than top_k[r]
// logits above the token's (top-p is not checked); min-p: the token's probability at least
// min_p[r] times the row's largest.
void check_tokens(Op op, int64_t rows, int64_t n, bool bf16, const uint8_t* input,
                  const Filters& f, const std::vector<int32_t>& tokens, Row& row) {
  const size_t row_bytes = size_t(n) * (bf16 ? 2 : 4);
  std::string first;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* x = input + r * row_bytes;
    const int32_t t = tokens[size_t(r)];
    bool ok = t >= 0 && t < n;
    if (ok && op == Op::top_k_top_p_sample) {
      const float v = element(x, t, bf16);
      int64_t above = 0;
      for (int64_t i = 0; i < n; ++i) above += element(x, i, bf16) > v;
      ok = above < f.top_k[size_t(r)];
    } else if (ok) {
      float top = 0;
      for (int64_t i = 0; i < n; ++i) top = std::max(top, element(x, i, false));
      ok = element(x, t, false) >= f.min_p[size_t(r)] * top * (1 - 1e-6f);
    }
    if (!ok && row.mismatch_rows++ == 0)
      first = "row " + std::to_string(r) + ": token " + std::to_string(t) + " outside the filter";
  }
  row.rows_checked = rows;
  row.status = row.mismatch_rows > 0
                   ? "mismatch"
                   : "not comparable (the peer draws its own randoms); its tokens are inside the "
                     "filter";
  if (!first.empty()) row.note += (row.note.empty() ? "" : "; ") + first;
}

// ---- inputs -------------------------------------------------------------------------------------

// Float32 probabilities: each row's softmax (in double) of float32 logits.
std::vector<uint8_t> softmax_rows(const std::vector<uint8_t>& logits, int64_t rows, int64_t n) {
  std::vector<uint8_t> probs(logits.size());
  std::vector<double> e(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* x = logits.data() + r * n * 4;
    double top = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i) top = std::max(top, double(element(x, i, false)));
    for (int64_t i = 0; i < n; ++i) sum += e[size_t(i)] = std::exp(element(x, i, false) - top);
    for (int64_t i = 0; i < n; ++i) {
      const float p = float(e[size_t(i)] / sum);
      std::memcpy(&probs[size_t(r * n + i) * 4], &p, 4);
    }
  }
  return probs;
}

// One input kind of a shape on the device, rotated over 4 buffers when it fits in L2 (as the
// other families), and its first buffer's host copy.
struct Rotation {
  std::vector<DeviceBuffer> buffers;
  std::vector<uint8_t> first;
  const void* at(int i) const { return buffers[size_t(i) % buffers.size()].get(); }
};

template <class Make>
Rotation upload(size_t bytes, size_t l2_bytes, Make&& make) {
  Rotation rot;
  const int count = bytes <= l2_bytes ? 4 : 1;
  for (int b = 0; b < count; ++b) {
    std::vector<uint8_t> host = make(b);
    rot.buffers.emplace_back(bytes);
    checked(cudaMemcpy(rot.buffers.back().get(), host.data(), bytes, cudaMemcpyHostToDevice),
            "upload input");
    if (b == 0) rot.first = std::move(host);
  }
  return rot;
}

template <class T>
DeviceBuffer upload_vector(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 256));
  checked(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return b;
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t count) {
  std::vector<T> v(count);
  checked(cudaMemcpy(v.data(), b.get(), count * sizeof(T), cudaMemcpyDeviceToHost), "download");
  return v;
}

// ---- one shape ----------------------------------------------------------------------------------

struct Case {
  int64_t rows, n;
  bool bf16;  // the logits' dtype; probabilities are always float32
  Op op;
  const Filters& filters;
  const Rotation& input;
};

struct Peer {
  std::string name, note;
  Call call;
};

bool bench_case(const Case& c, mtk_context ctx, mtk_context cpu, cudaStream_t stream,
                const Settings& base, Output& out) {
  const bool bf16 = c.bf16 && reads_logits(c.op);
  const std::string label = std::to_string(c.rows) + "x" + std::to_string(c.n);
  std::fprintf(stderr, "[peers] sampling %s %s %s %s\n", label.c_str(), op_name(c.op),
               bf16 ? "bf16" : "f32", c.filters.describe(c.op).c_str());
  const size_t count = size_t(c.rows * c.n), width = bf16 ? 2 : 4;
  const Settings st = scaled(base, double(count * width));
  const Filters& f = c.filters;
  const mtk_dtype in_dtype = bf16 ? MTK_BFLOAT16 : MTK_FLOAT32;
  // The output: masked logits (the input's dtype), probabilities, or one int32 token per row.
  const size_t out_bytes = samples(c.op) ? size_t(c.rows) * 4 : count * width;
  const mtk_dtype out_dtype = samples(c.op) ? MTK_INT32 : in_dtype;
  auto out_tensor = [&](void* data) {
    return samples(c.op) ? row_vector(data, MTK_INT32, c.rows)
                         : describe(data, out_dtype, c.rows, c.n);
  };

  // metaltopk's CPU backend on the host copy: the reference for metaltopk's CUDA result and for
  // the peers' checks.
  std::vector<int32_t> top_k = f.top_k;
  std::vector<float> top_p = f.top_p, min_p = f.min_p, uniforms = f.uniforms;
  std::vector<uint8_t> want(out_bytes);
  std::string no_reference;  // why there is none: the checks are then skipped, the timings kept
  try {
    MtkCall call(c.op, f, c.rows, top_k.data(), top_p.data(), min_p.data());
    const mtk_tensor x =
        describe(const_cast<uint8_t*>(c.input.first.data()), in_dtype, c.rows, c.n);
    const mtk_tensor u = row_vector(uniforms.data(), MTK_FLOAT32, c.rows);
    const mtk_tensor o = out_tensor(want.data());
    size_t bytes = 0;
    check(mtk_sampling_workspace_size(cpu, call.op, &x, &call.params, out_dtype, &bytes),
          "mtk_sampling_workspace_size on the CPU backend");
    std::vector<uint8_t> workspace(std::max<size_t>(bytes, 1));
    check(mtk_sampling_with_workspace(cpu, call.op, &x, &call.params, samples(c.op) ? &u : nullptr,
                                      &o, workspace.data(), bytes, nullptr),
          "mtk_sampling_with_workspace on the CPU backend (the reference)");
  } catch (const std::exception& e) {
    no_reference = e.what();
  }

  DeviceBuffer top_k_d = upload_vector(f.top_k), top_p_d = upload_vector(f.top_p),
               min_p_d = upload_vector(f.min_p), uniforms_d = upload_vector(f.uniforms);
  DeviceBuffer out_d(std::max<size_t>(out_bytes, 256));

  // metaltopk on the device; a refusal (the CUDA backend before its sampling kernels) leaves
  // metaltopk_us null and the peers still run.
  double mtk_graph = -1, mtk_loop = -1;
  std::string mtk_result, mtk_note;
  {
    std::fprintf(stderr, "[peers]   metaltopk\n");
    MtkCall call(c.op, f, c.rows, top_k_d.get(), top_p_d.get(), min_p_d.get());
    std::vector<mtk_tensor> x;
    for (const DeviceBuffer& b : c.input.buffers)
      x.push_back(describe(b.get(), in_dtype, c.rows, c.n));
    const mtk_tensor u = row_vector(uniforms_d.get(), MTK_FLOAT32, c.rows);
    const mtk_tensor* uniforms_arg = samples(c.op) ? &u : nullptr;
    const mtk_tensor o = out_tensor(out_d.get());
    size_t ws_bytes = 0;
    mtk_status status =
        mtk_sampling_workspace_size(ctx, call.op, &x[0], &call.params, out_dtype, &ws_bytes);
    std::unique_ptr<DeviceBuffer> workspace;
    if (status == MTK_SUCCESS) {
      workspace = std::make_unique<DeviceBuffer>(std::max<size_t>(ws_bytes, 256));
      status = mtk_sampling_with_workspace(ctx, call.op, &x[0], &call.params, uniforms_arg, &o,
                                           workspace->get(), ws_bytes, stream);
    }
    if (status != MTK_SUCCESS) {
      mtk_result = status == MTK_ERROR_BACKEND_UNAVAILABLE ? "refused" : "failed";
      mtk_note = std::string("metaltopk: ") + mtk_status_string(status) + ": " +
                 mtk_last_error_message();
    } else {
      try {
        checked(cudaStreamSynchronize(stream), "metaltopk");
        const std::vector<uint8_t> got = download<uint8_t>(out_d, out_bytes);
        const size_t row_bytes = out_bytes / size_t(c.rows);
        int64_t differ = 0;
        for (int64_t r = 0; r < c.rows; ++r)
          differ += std::memcmp(&got[size_t(r) * row_bytes], &want[size_t(r) * row_bytes],
                                row_bytes) != 0;
        mtk_result = !no_reference.empty() ? "unchecked"
                     : differ == 0         ? "match (CPU backend, bit for bit)"
                                           : "mismatch";
        if (differ > 0 && no_reference.empty())
          mtk_note = "metaltopk: " + std::to_string(differ) + " of " + std::to_string(c.rows) +
                     " rows differ from its CPU backend's";
        time_both(stream, st, [&](int i) -> cudaError_t {
          check(mtk_sampling_with_workspace(ctx, call.op, &x[size_t(i) % x.size()], &call.params,
                                            uniforms_arg, &o, workspace->get(), ws_bytes, stream),
                "mtk_sampling_with_workspace");
          return cudaSuccess;
        }, mtk_graph, mtk_loop, mtk_note);
      } catch (const std::exception& e) {
        cudaGetLastError();
        mtk_result = "failed";
        mtk_note += (mtk_note.empty() ? "" : "; ") + std::string(e.what());
      }
    }
  }

  // FlashInfer, as its Python API calls it (per-row values as device arrays).
  const auto rows = uint32_t(c.rows), n = uint32_t(c.n);
  const peers::Dtype dtype = bf16 ? peers::Dtype::bf16 : peers::Dtype::f32;
  auto* k_arr = f.per_row ? static_cast<const int32_t*>(top_k_d.get()) : nullptr;
  auto* p_arr = f.per_row ? static_cast<const float*>(top_p_d.get()) : nullptr;
  auto* m_arr = f.per_row ? static_cast<const float*>(min_p_d.get()) : nullptr;
  auto probs = [&](int i) { return static_cast<const float*>(c.input.at(i)); };
  auto* out_f32 = static_cast<float*>(out_d.get());
  auto* tokens = static_cast<int32_t*>(out_d.get());
  DeviceBuffer row_states(peers::flashinfer_row_states_bytes());
  checked(cudaMemset(row_states.get(), 0, peers::flashinfer_row_states_bytes()), "memset");
  constexpr uint64_t kSeed = 42, kOffset = 0;  // FlashInfer's Philox stream, fixed
  std::vector<Peer> peer_list;
  std::unique_ptr<DeviceBuffer> scratch, scratch_joint;
  size_t scratch_bytes = 0, joint_bytes = 0;
  switch (c.op) {
    case Op::top_k_mask:
      peer_list.push_back({"flashinfer_top_k_mask_logits", "RadixTopKMaskLogitsMultiCTA",
                           [&](int i) {
                             return peers::flashinfer_top_k_mask_logits(
                                 dtype, c.input.at(i), out_d.get(), k_arr, uint32_t(kTopK), rows,
                                 n, row_states.get(), stream);
                           }});
      break;
    case Op::top_k_renorm:
      peer_list.push_back({"flashinfer_top_k_renorm_probs", "RadixTopKRenormProbMultiCTA",
                           [&](int i) {
                             return peers::flashinfer_top_k_renorm_probs(
                                 probs(i), out_f32, k_arr, uint32_t(kTopK), rows, n,
                                 row_states.get(), stream);
                           }});
      break;
    case Op::top_p_renorm:
      scratch_bytes = peers::flashinfer_top_p_renorm_workspace_bytes(rows, n);
      scratch = std::make_unique<DeviceBuffer>(scratch_bytes);
      peer_list.push_back({"flashinfer_top_p_renorm_probs", "AirTopPRenormProb (non-deterministic)",
                           [&](int i) {
                             return peers::flashinfer_top_p_renorm_probs(
                                 probs(i), out_f32, p_arr, kTopP, rows, n, scratch->get(), stream);
                           }});
      break;
    case Op::top_k_top_p_sample: {
      const peers::FlashinferChain chain =
          peers::flashinfer_top_k_first_chain(f.per_row, uint32_t(kTopK), n);
      const uint32_t survivors = f.per_row ? kTopKMax : uint32_t(kTopK);
      scratch_bytes = peers::flashinfer_top_k_top_p_scratch_bytes(chain, rows, n, survivors);
      scratch = std::make_unique<DeviceBuffer>(scratch_bytes);
      joint_bytes = peers::flashinfer_top_k_top_p_scratch_bytes(peers::FlashinferChain::joint,
                                                                rows, n, survivors);
      scratch_joint = std::make_unique<DeviceBuffer>(joint_bytes);
      const bool fast = chain == peers::FlashinferChain::top_k_first_fast;
      peer_list.push_back(
          {"flashinfer_top_k_top_p_sampling_from_logits",
           std::string("filter_apply_order=\"top_k_first\" (the default): ") +
               (fast ? "its fast path (sorted radix top-k, softmax of the k, top-p sampling)"
                     : "top_k_mask_logits, softmax, top-p sampling"),
           [&, chain](int i) {
             return peers::flashinfer_top_k_top_p_sampling_from_logits(
                 chain, dtype, c.input.at(i), k_arr, uint32_t(kTopK), p_arr, kTopP, tokens, rows,
                 n, row_states.get(), scratch->get(), scratch_bytes, kSeed, kOffset, stream);
           }});
      peer_list.push_back(
          {"flashinfer_top_k_top_p_sampling_from_logits_joint",
           "filter_apply_order=\"joint\": softmax, then TopKTopPSamplingFromProb",
           [&](int i) {
             return peers::flashinfer_top_k_top_p_sampling_from_logits(
                 peers::FlashinferChain::joint, dtype, c.input.at(i), k_arr, uint32_t(kTopK),
                 p_arr, kTopP, tokens, rows, n, row_states.get(), scratch_joint->get(),
                 joint_bytes, kSeed, kOffset, stream);
           }});
      break;
    }
    case Op::min_p_sample:
      scratch_bytes = std::max<size_t>(c.rows, 256);  // the `valid` flags
      scratch = std::make_unique<DeviceBuffer>(scratch_bytes);
      peer_list.push_back({"flashinfer_min_p_sampling_from_probs", "MinPSamplingFromProb",
                           [&](int i) {
                             return peers::flashinfer_min_p_sampling_from_probs(
                                 probs(i), m_arr, kMinP, tokens,
                                 static_cast<bool*>(scratch->get()), rows, n, kSeed, kOffset,
                                 stream);
                           }});
      break;
  }

  bool ok = mtk_result != "failed" && mtk_result != "mismatch";
  for (const Peer& peer : peer_list) {
    Row r;
    r.shape = label;
    r.family = "sampling";
    r.op = op_name(c.op);
    r.params = f.describe(c.op);
    const bool has_top_k = c.op == Op::top_k_mask || c.op == Op::top_k_renorm ||
                           c.op == Op::top_k_top_p_sample;
    r.k = !has_top_k ? 0 : f.per_row ? -1 : kTopK;  // -1: per row (see params)
    r.dtype = bf16 ? "bf16" : "f32";
    r.peer = peer.name;
    r.metaltopk_us = mtk_graph;
    r.metaltopk_loop_us = mtk_loop;
    r.metaltopk_status = mtk_result;
    r.note = peer.note + (mtk_note.empty() ? "" : "; " + mtk_note);
    std::fprintf(stderr, "[peers]   %s\n", peer.name.c_str());
    try {
      checked(cudaMemset(out_d.get(), 0, out_bytes), "memset");
      const cudaError_t first = peer.call(0);
      if (first == cudaErrorNotSupported) {
        cudaGetLastError();
        r.status = "unsupported";
        r.note += "; the peer returns cudaErrorNotSupported for this shape";
      } else {
        checked(first, "first call");
        checked(cudaStreamSynchronize(stream), "first call");
        const std::vector<uint8_t> got = download<uint8_t>(out_d, out_bytes);
        if (!no_reference.empty()) {
          r.status = "unchecked";
          r.note += "; no reference: " + no_reference;
        } else if (c.op == Op::top_k_mask) {
          compare_mask(c.rows, c.n, bf16, c.input.first.data(), want.data(), got.data(), r);
        } else if (!samples(c.op)) {
          compare_renorm(c.rows, c.n, c.op == Op::top_p_renorm,
                         reinterpret_cast<const float*>(c.input.first.data()),
                         reinterpret_cast<const float*>(want.data()),
                         reinterpret_cast<const float*>(got.data()), r);
        } else {
          std::vector<int32_t> t(size_t(c.rows));
          std::memcpy(t.data(), got.data(), out_bytes);
          check_tokens(c.op, c.rows, c.n, bf16, c.input.first.data(), f, t, r);
        }
        time_both(stream, st, peer.call, r.peer_us, r.peer_loop_us, r.note);
      }
    } catch (const std::exception& e) {
      cudaGetLastError();
      r.status = "failed";
      r.note += "; " + std::string(e.what());
    }
    ok = ok && r.status != "failed" && r.status != "mismatch";
    out.add(r);
  }
  return ok;
}

}  // namespace

bool bench_sampling(const Settings& st, mtk_context ctx, cudaStream_t stream, size_t l2_bytes,
                    const std::function<bool(const std::string&)>& wanted, Output& out) {
  Context cpu(MTK_BACKEND_CPU);  // the reference
  bool ok = true;
  constexpr Op kOps[] = {Op::top_k_top_p_sample, Op::top_k_mask, Op::top_k_renorm,
                         Op::top_p_renorm, Op::min_p_sample};
  for (int64_t rows : {1, 64, 256}) {
    for (int64_t n : {151936, 262144}) {
      const std::string label = "sampling " + std::to_string(rows) + "x" + std::to_string(n);
      // A filter may name a whole case ("sampling 64x151936 min_p_sampling_from_probs f32
      // scalar"), so the shape's inputs are made where any of its cases is wanted.
      const auto name_of = [&](Op op, bool bf16, bool per_row) {
        return label + " " + op_name(op) + (bf16 ? " bf16" : " f32") +
               (per_row ? " per-row" : " scalar");
      };
      bool shape_wanted = false;
      for (bool per_row : {false, true}) {
        for (Op op : kOps) {
          for (bool bf16 : {false, true}) {
            if (bf16 && !reads_logits(op)) continue;
            shape_wanted = shape_wanted || wanted(name_of(op, bf16, per_row));
          }
        }
      }
      if (!shape_wanted) continue;
      const size_t count = size_t(rows * n);
      const uint64_t seed = uint64_t(rows * 7919 + n) * 16 + 5;
      // Standard-normal logits (as FlashInfer's and vLLM's own sampling tests and benchmarks
      // draw them); the probabilities are their softmax. The bfloat16 logits round the float32.
      Rotation logits_f32 = upload(count * 4, l2_bytes, [&](int b) {
        return standard_normal_bytes(count, false, seed + b);
      });
      Rotation logits_bf16 = upload(count * 2, l2_bytes, [&](int b) {
        return standard_normal_bytes(count, true, seed + b);
      });
      Rotation probs = upload(count * 4, l2_bytes, [&](int b) {
        return softmax_rows(standard_normal_bytes(count, false, seed + b), rows, n);
      });
      for (bool per_row : {false, true}) {
        const Filters filters(rows, per_row);
        for (Op op : kOps) {
          for (bool bf16 : {false, true}) {
            if (bf16 && !reads_logits(op)) continue;
            const Rotation& input = !reads_logits(op) ? probs : bf16 ? logits_bf16 : logits_f32;
            const std::string name = name_of(op, bf16, per_row);
            if (!wanted(name)) continue;
            try {
              ok = bench_case({rows, n, bf16, op, filters, input}, ctx, cpu.get(), stream, st,
                              out) && ok;
            } catch (const std::exception& e) {
              std::fprintf(stderr, "%s: %s\n", name.c_str(), e.what());
              cudaGetLastError();
              ok = false;
            }
          }
        }
      }
    }
  }
  return ok;
}

int sampling_self_test() {
  int failures = 0;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) {
      std::fprintf(stderr, "self-test FAILED: sampling: %s\n", what);
      ++failures;
    }
  };
  auto bytes = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  const float ninf = -INFINITY;
  // Masks: 1 row of 6, k = 2; the input has 5.0 twice (the k-th value).
  const auto x = bytes({1, 5, 7, 5, 0, 2});
  const auto want = bytes({ninf, 5, 7, ninf, ninf, ninf});
  Row a;
  compare_mask(1, 6, false, x.data(), want.data(), want.data(), a);
  expect(a.status == "match", "identical mask");
  Row b;
  const auto both = bytes({ninf, 5, 7, 5, ninf, ninf});
  compare_mask(1, 6, false, x.data(), want.data(), both.data(), b);
  expect(b.status == "match (ties at the k-th value)" && b.tie_rows == 1, "mask keeps both ties");
  Row m;
  const auto wrong = bytes({ninf, 5, 7, ninf, ninf, 2});
  compare_mask(1, 6, false, x.data(), want.data(), wrong.data(), m);
  expect(m.status == "mismatch" && m.mismatch_rows == 1, "mask keeps a smaller value");

  // Renormalisation: probabilities of 1 row of 5.
  const std::vector<float> p = {0.4f, 0.1f, 0.3f, 0.15f, 0.05f};
  const std::vector<float> kept = {0.4f / 0.7f, 0, 0.3f / 0.7f, 0, 0};
  Row c;
  std::vector<float> close = kept;
  close[0] *= 1 + 1e-6f;
  compare_renorm(1, 5, false, p.data(), kept.data(), close.data(), c);
  expect(c.status == "match" && c.max_prob_rel_err > 0 && c.max_prob_rel_err < 1e-5,
         "renorm within rounding");
  Row d;
  std::vector<float> far = kept;
  far[0] *= 1.01f;
  compare_renorm(1, 5, false, p.data(), kept.data(), far.data(), d);
  expect(d.status == "mismatch", "renorm 1% off");
  Row e;
  const std::vector<float> other = {0.4f / 0.55f, 0, 0, 0.15f / 0.55f, 0};
  compare_renorm(1, 5, true, p.data(), kept.data(), other.data(), e);
  expect(e.status == "mismatch", "top-p keeps a set that is not a prefix");
  Row g;
  const std::vector<float> longer = {0.4f / 0.85f, 0, 0.3f / 0.85f, 0.15f / 0.85f, 0};
  compare_renorm(1, 5, true, p.data(), kept.data(), longer.data(), g);
  expect(g.status == "mismatch", "top-p prefix longer by real mass");
  Row j;
  const std::vector<float> q = {0.5f, 0.3f, 0.19999f, 0.00001f};
  const std::vector<float> q_want = {0.5f / 0.99999f, 0.3f / 0.99999f, 0.19999f / 0.99999f, 0};
  const std::vector<float> q_got = {0.5f, 0.3f, 0.19999f, 0.00001f};
  compare_renorm(1, 4, true, q.data(), q_want.data(), q_got.data(), j);
  expect(j.status == "match (top-p boundary rounding)" && j.tie_rows == 1 &&
             j.note.find("up to 1 tokens") != std::string::npos,
         "top-p prefix longer by 1e-5 of the mass");

  // Tokens: top-k = 2 of logits {1, 5, 7, 5, 0, 2}: 7 and either 5 are inside.
  const Filters f(1, false);
  Filters k2 = f;
  k2.top_k = {2};
  Row h;
  check_tokens(Op::top_k_top_p_sample, 1, 6, false, x.data(), k2, {3}, h);
  expect(h.mismatch_rows == 0, "token at the k-th value");
  Row i;
  check_tokens(Op::top_k_top_p_sample, 1, 6, false, x.data(), k2, {5}, i);
  expect(i.status == "mismatch", "token below the k-th value");

  // metaltopk's CPU backend (the reference) on a small case of every operation: the mask keeps
  // each row's k, a renormalised row sums to 1, a token is in range.
  {
    Context cpu(MTK_BACKEND_CPU);
    for (Op op : {Op::top_k_mask, Op::top_k_renorm, Op::top_p_renorm, Op::top_k_top_p_sample,
                  Op::min_p_sample}) {
      Filters small(2, true);
      small.top_k = {2, 3};
      std::vector<float> in = {1, 5, 7, 4, 0, 2, 0.5f, 3, 9, 1, 2, 8};
      if (!reads_logits(op)) in = {0.1f, 0.2f, 0.3f, 0.25f, 0.05f, 0.1f,
                                   0.3f, 0.1f, 0.2f, 0.1f, 0.25f, 0.05f};
      MtkCall call(op, small, 2, small.top_k.data(), small.top_p.data(), small.min_p.data());
      const mtk_tensor xt = describe(in.data(), MTK_FLOAT32, 2, 6);
      std::vector<float> o(12, -1);
      std::vector<int32_t> t(2, -1);
      const mtk_tensor ot = samples(op) ? row_vector(t.data(), MTK_INT32, 2)
                                        : describe(o.data(), MTK_FLOAT32, 2, 6);
      const mtk_tensor ut = row_vector(small.uniforms.data(), MTK_FLOAT32, 2);
      size_t ws = 0;
      bool ran = mtk_sampling_workspace_size(cpu.get(), call.op, &xt, &call.params,
                                             samples(op) ? MTK_INT32 : MTK_FLOAT32,
                                             &ws) == MTK_SUCCESS;
      std::vector<uint8_t> workspace(std::max<size_t>(ws, 1));
      ran = ran && mtk_sampling_with_workspace(cpu.get(), call.op, &xt, &call.params,
                                               samples(op) ? &ut : nullptr, &ot, workspace.data(),
                                               ws, nullptr) == MTK_SUCCESS;
      expect(ran, op_name(op));
      if (!ran) continue;
      if (op == Op::top_k_mask) {
        expect(o[0] == ninf && o[1] == 5 && o[2] == 7 && o[3] == ninf && o[8] == 9 &&
                   o[11] == 8 && o[7] == 3 && o[6] == ninf,
               "CPU mask of per-row k 2 and 3");
      } else if (samples(op)) {
        expect(t[0] >= 0 && t[0] < 6 && t[1] >= 0 && t[1] < 6, "CPU tokens in range");
      } else {
        double sum = 0;
        for (int j = 0; j < 6; ++j) sum += o[size_t(j)];
        expect(std::fabs(sum - 1) < 1e-6, "CPU renormalised row sums to 1");
      }
    }
  }
  return failures;
}

}  // namespace harness
