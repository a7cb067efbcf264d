// Runs the Metal MoE router kernel (lib/metal/router_kernels.h) on the CPU through PoCL and
// compares it with the CPU backend's mtk_moe_route through the library's C ABI.
//
// Every case is planned by make_metal_router_plan exactly as the Metal backend plans it (grid,
// threadgroup size, threadgroup memory) and run with canary-filled outputs. Checks:
//   ids: exactly equal, position by position;
//   weights: within kWeightRelTolerance of the CPU's (see there why not bit for bit), NaN where
//     the CPU has NaN, infinities equal;
//   every output byte outside the [T, k] results still holds its canary.
// Cases: E in {8, 64, 256, 512} x k in {1, 2, 8, 10} x softmax / sigmoid / none x plain / bias /
// groups / bias and groups x f32 / f16 / bf16 x random / tie-heavy logits, plus logits with
// NaN, infinities and signed zeros; contiguous, transposed, negative-stride and stepped
// layouts; int32 and int64 ids; renormalised or not; threadgroups the plan shrinks.
//
// usage: pocl_router_harness <kernels.bc>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "metal/metal_router_plan.hpp"
#include "metaltopk.h"
#include "pocl_runtime.hpp"

namespace {

using namespace mtk_pocl;

// Weights are float32 results of exp, a division and sums. Each implementation's float32 exp is
// within a few ulp of the true value (glibc's expf on the CPU, PoCL's own exp here, Apple's exp
// under safe math on the Mac), and the softmax denominator S is summed in double on the CPU but
// as a float32 tree here, which adds up to log2(threads) roundings (~10 ulp for 1024 threads).
// Together well under 1e-5 (84 ulp), which still catches any wrong formula, id or order.
constexpr double kWeightRelTolerance = 1e-5;
// Below this, exp has left the normal range and relative precision means nothing.
constexpr double kWeightAbsFloor = 1e-36;

enum class Data { Random, Ties, Specials };
enum class Layout { Contiguous, Transposed, NegativeTokens, Stepped };

const char* data_name(Data d) {
  switch (d) {
    case Data::Random: return "random";
    case Data::Ties: return "ties";
    case Data::Specials: return "specials";
  }
  return "?";
}
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::NegativeTokens: return "negative-token-stride";
    case Layout::Stepped: return "stepped";
  }
  return "?";
}
const char* scoring_name(mtk_scoring s) {
  switch (s) {
    case MTK_SCORING_SOFTMAX: return "softmax";
    case MTK_SCORING_SIGMOID: return "sigmoid";
    case MTK_SCORING_NONE: return "none";
  }
  return "?";
}

struct Case {
  int64_t tokens, experts, k;
  mtk_scoring scoring;
  bool bias;
  int64_t n_group, topk_group;  // 1, 1 when not grouped
  mtk_dtype dtype;
  Data data;
  Layout layout;
  bool renormalize;
  float scale;
  mtk_dtype index_dtype;
  mtk::MetalLimits limits;
};

size_t logit_size(mtk_dtype d) { return d == MTK_FLOAT32 ? 4 : 2; }

// A 2-D [rows, cols] tensor in an owned byte buffer; element 0 sits at byte `base`.
struct Tensor2d {
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 0;
  size_t element = 0;
  size_t base = 0;
  std::vector<unsigned char> bytes;

  size_t offset(int64_t r, int64_t c) const {
    return size_t(int64_t(base) + (r * row_stride + c * col_stride) * int64_t(element));
  }
  mtk_tensor descriptor(mtk_dtype dtype) {
    mtk_tensor t{};
    t.data = bytes.data() + base;
    t.dtype = dtype;
    t.ndim = 2;
    t.sizes[0] = rows;
    t.sizes[1] = cols;
    t.strides[0] = row_stride;
    t.strides[1] = col_stride;
    return t;
  }
};

// Lays out [rows, cols] as `layout` asks, every byte set to `fill`.
Tensor2d make_tensor(int64_t rows, int64_t cols, size_t element, Layout layout, unsigned char fill) {
  Tensor2d t;
  t.rows = rows;
  t.cols = cols;
  t.element = element;
  int64_t span = rows * cols;
  switch (layout) {
    case Layout::Contiguous:
      t.row_stride = cols;
      t.col_stride = 1;
      break;
    case Layout::Transposed:
      t.row_stride = 1;
      t.col_stride = rows;
      break;
    case Layout::NegativeTokens:
      t.row_stride = -cols;
      t.col_stride = 1;
      t.base = size_t((rows - 1) * cols) * element;
      break;
    case Layout::Stepped:  // gaps between elements and between rows
      t.col_stride = 2;
      t.row_stride = 2 * cols + 3;
      span = rows * t.row_stride;
      break;
  }
  t.bytes.assign(size_t(span) * element, fill);
  return t;
}

// Raw bits of a logit of `dtype` from a float32 that the dtype represents exactly.
uint32_t narrow_bits(mtk_dtype dtype, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (dtype == MTK_FLOAT32) return bits;
  if (dtype == MTK_BFLOAT16) return bits >> 16;
  // float16, for values of the tables below (halves, subnormal halves, infinities, quiet NaN).
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t exponent = (bits >> 23) & 0xffu;
  const uint32_t mantissa = bits & 0x7fffffu;
  if (exponent == 0xffu) return sign | 0x7c00u | (mantissa ? 0x200u : 0u);
  if (exponent < 113) return sign | uint32_t(std::ldexp(std::fabs(value), 24));  // subnormal: m * 2^-24
  return sign | ((exponent - 112) << 10) | (mantissa >> 13);
}

// Random logits in +-[2^-7, 8) with every mantissa bit of the dtype random.
uint32_t random_bits(mtk_dtype dtype, std::mt19937_64& rng) {
  const uint64_t r = rng();
  const uint32_t sign = uint32_t(r & 1);
  const uint32_t step = uint32_t((r >> 1) % 10);  // binade 2^-7 .. 2^2
  switch (dtype) {
    case MTK_FLOAT32: return sign << 31 | (120 + step) << 23 | (uint32_t(r >> 8) & 0x7fffffu);
    case MTK_FLOAT16: return sign << 15 | (8 + step) << 10 | (uint32_t(r >> 8) & 0x3ffu);
    default: return sign << 15 | (120 + step) << 7 | (uint32_t(r >> 8) & 0x7fu);
  }
}

void fill_logits(Tensor2d& logits, mtk_dtype dtype, Data data, std::mt19937_64& rng) {
  static const float kTies[] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 2.0f};
  // Subnormal in float16 (and exact in every dtype): 2^-20 and -3 * 2^-22.
  static const float kSpecials[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 0x1p-20f, -0x3p-22f};
  for (int64_t t = 0; t < logits.rows; ++t) {
    for (int64_t e = 0; e < logits.cols; ++e) {
      uint32_t bits = random_bits(dtype, rng);
      if (data == Data::Ties) bits = narrow_bits(dtype, kTies[rng() % 6]);
      // About one special value per token.
      if (data == Data::Specials && rng() % uint64_t(logits.cols) == 0) bits = narrow_bits(dtype, kSpecials[rng() % 8]);
      std::memcpy(&logits.bytes[logits.offset(t, e)], &bits, logits.element);
    }
  }
}

struct Outputs {
  std::vector<unsigned char> weights, ids;
};

class RouterHarness {
 public:
  explicit RouterHarness(const std::string& spir) : pocl_(spir) {}

  double worst_relative_error() const { return worst_relative_error_; }

  // Runs one case; returns false (after printing why) on any mismatch.
  bool run(const Case& c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Tensor2d logits = make_tensor(c.tokens, c.experts, logit_size(c.dtype), c.layout, 0);
    fill_logits(logits, c.dtype, c.data, rng);
    // The bias is one row of a [1, E] tensor, stepped in the stepped layout.
    Tensor2d bias = make_tensor(1, c.experts, 4, c.layout == Layout::Stepped ? Layout::Stepped : Layout::Contiguous, 0);
    std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
    for (int64_t e = 0; e < c.experts; ++e) {
      const float b = c.data == Data::Ties ? 0.25f * float(int(rng() % 3) - 1) : bias_value(rng);
      std::memcpy(&bias.bytes[bias.offset(0, e)], &b, 4);
    }
    const Layout out_layout = c.layout == Layout::NegativeTokens ? Layout::Contiguous : c.layout;
    const Tensor2d weights_layout = make_tensor(c.tokens, c.k, 4, out_layout, 0xa5);
    const Tensor2d ids_layout = make_tensor(c.tokens, c.k, c.index_dtype == MTK_INT64 ? 8 : 4, out_layout, 0xa5);

    mtk_tensor bias_1d = bias.descriptor(MTK_FLOAT32);
    bias_1d.ndim = 1;
    bias_1d.sizes[0] = c.experts;
    bias_1d.strides[0] = bias.col_stride;
    mtk_router_params params = MTK_ROUTER_PARAMS_INIT;
    params.k = c.k;
    params.scoring = c.scoring;
    params.bias = c.bias ? &bias_1d : nullptr;
    params.n_group = c.n_group;
    params.topk_group = c.topk_group;
    params.renormalize = c.renormalize ? 1 : 0;
    params.scale = c.scale;

    char label[256];
    std::snprintf(label, sizeof label, "%s T=%lld E=%lld k=%lld %s%s groups=%lld/%lld %s %s %s ids%d scale=%g",
                  mtk::metal_dtype_suffix(c.dtype), (long long)c.tokens, (long long)c.experts, (long long)c.k,
                  scoring_name(c.scoring), c.bias ? " bias" : "", (long long)c.n_group, (long long)c.topk_group,
                  data_name(c.data), layout_name(c.layout), c.renormalize ? "renorm" : "raw",
                  c.index_dtype == MTK_INT64 ? 64 : 32, double(c.scale));

    Tensor2d cpu_weights = weights_layout, cpu_ids = ids_layout;
    const mtk_tensor tl = logits.descriptor(c.dtype);
    const mtk_tensor tw = cpu_weights.descriptor(MTK_FLOAT32);
    const mtk_tensor ti = cpu_ids.descriptor(c.index_dtype);
    check_mtk(mtk_moe_route(cpu_.get(), &tl, &params, &tw, &ti, nullptr), "mtk_moe_route(cpu)");
    const Outputs cpu{cpu_weights.bytes, cpu_ids.bytes};

    mtk::RouterProblem problem{};
    problem.dtype = c.dtype;
    problem.index_dtype = c.index_dtype;
    problem.tokens = c.tokens;
    problem.experts = c.experts;
    problem.k = c.k;
    problem.scoring = c.scoring;
    problem.n_group = c.n_group;
    problem.topk_group = c.topk_group;
    problem.renormalize = c.renormalize;
    problem.scale = c.scale;
    problem.logits = logits.bytes.data() + logits.base;
    problem.logits_token_stride = logits.row_stride;
    problem.logits_expert_stride = logits.col_stride;
    problem.bias = c.bias ? reinterpret_cast<const float*>(bias.bytes.data()) : nullptr;
    problem.bias_stride = bias.col_stride;
    problem.weights_token_stride = weights_layout.row_stride;
    problem.weights_k_stride = weights_layout.col_stride;
    problem.ids_token_stride = ids_layout.row_stride;
    problem.ids_k_stride = ids_layout.col_stride;
    mtk::MetalRouterPlan plan = mtk::make_metal_router_plan(problem, c.limits);
    mtk::set_metal_router_buffer_offsets(plan, problem, logits.base, bias.base, weights_layout.base, ids_layout.base);
    if (!extents_inside(problem, logits, bias, weights_layout, ids_layout)) {
      std::printf("FAIL %s: metal_router_extents reaches outside the tensors' memory\n", label);
      return false;
    }

    const Outputs metal = run_plan(plan, logits, bias, weights_layout.bytes, ids_layout.bytes);
    if (!compare(c, weights_layout, ids_layout, metal, cpu, label)) return false;
    ++threads_seen_[plan.threads];
    return true;
  }

  const std::map<uint32_t, int>& threads_seen() const { return threads_seen_; }

 private:
  static bool extents_inside(const mtk::RouterProblem& problem, const Tensor2d& logits, const Tensor2d& bias,
                             const Tensor2d& weights, const Tensor2d& ids) {
    const mtk::MetalRouterExtents e = mtk::metal_router_extents(problem);
    const auto inside = [](const mtk::ByteExtent& x, const Tensor2d& t) {
      return x.first <= 0 && uint64_t(-x.first) <= t.base && t.base + x.first + x.bytes <= t.bytes.size();
    };
    return inside(e.logits, logits) && (problem.bias == nullptr || inside(e.bias, bias)) && inside(e.weights, weights) &&
           inside(e.ids, ids);
  }

  Outputs run_plan(const mtk::MetalRouterPlan& plan, const Tensor2d& logits, const Tensor2d& bias,
                   const std::vector<unsigned char>& weights_canary, const std::vector<unsigned char>& ids_canary) {
    ClBuffer in = pocl_.buffer(logits.bytes.size(), logits.bytes.data());
    ClBuffer bias_buffer = pocl_.buffer(bias.bytes.size(), bias.bytes.data());
    ClBuffer weights = pocl_.buffer(weights_canary.size(), weights_canary.data());
    ClBuffer ids = pocl_.buffer(ids_canary.size(), ids_canary.data());
    ClBuffer params = pocl_.buffer(sizeof plan.params, &plan.params);
    const cl_mem buffers[5] = {in.get(), bias_buffer.get(), weights.get(), ids.get(), params.get()};
    pocl_.run_kernel(plan.function, buffers, plan.threadgroup_bytes, plan.threads, plan.threadgroups_y);
    Outputs out{std::vector<unsigned char>(weights_canary.size()), std::vector<unsigned char>(ids_canary.size())};
    pocl_.read(weights, out.weights.data(), out.weights.size());
    pocl_.read(ids, out.ids.data(), out.ids.size());
    return out;
  }

  bool compare(const Case& c, const Tensor2d& weights, const Tensor2d& ids, const Outputs& got, const Outputs& want,
               const char* label) {
    // Result positions; every other byte must still be the canary.
    std::vector<bool> weight_result(got.weights.size()), id_result(got.ids.size());
    int reported = 0;
    auto report = [&](int64_t t, int64_t r, const char* what, double g, double w) {
      if (reported++ < 4) std::printf("FAIL %s: token %lld position %lld: %s got %.9g, CPU %.9g\n", label, (long long)t,
                                      (long long)r, what, g, w);
    };
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t r = 0; r < c.k; ++r) {
        const size_t wo = weights.offset(t, r), io = ids.offset(t, r);
        for (size_t b = 0; b < 4; ++b) weight_result[wo + b] = true;
        for (size_t b = 0; b < ids.element; ++b) id_result[io + b] = true;
        int64_t gid = 0, wid = 0;
        std::memcpy(&gid, &got.ids[io], ids.element);
        std::memcpy(&wid, &want.ids[io], ids.element);
        if (ids.element == 4) gid = int32_t(gid), wid = int32_t(wid);
        if (gid != wid) report(t, r, "id", double(gid), double(wid));
        float gw, ww;
        std::memcpy(&gw, &got.weights[wo], 4);
        std::memcpy(&ww, &want.weights[wo], 4);
        if (!weights_agree(gw, ww)) report(t, r, "weight", gw, ww);
      }
    }
    for (size_t b = 0; b < got.weights.size(); ++b) {
      if (!weight_result[b] && got.weights[b] != 0xa5) {
        report(-1, -1, "weights canary byte", got.weights[b], 0xa5);
        break;
      }
    }
    for (size_t b = 0; b < got.ids.size(); ++b) {
      if (!id_result[b] && got.ids[b] != 0xa5) {
        report(-1, -1, "ids canary byte", got.ids[b], 0xa5);
        break;
      }
    }
    return reported == 0;
  }

  bool weights_agree(float got, float want) {
    if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
    if (std::isinf(want) || std::isinf(got)) return got == want;
    const double error = std::fabs(double(got) - double(want));
    if (error <= kWeightAbsFloor) return true;
    const double relative = error / std::fabs(double(want));
    worst_relative_error_ = std::max(worst_relative_error_, relative);
    return relative <= kWeightRelTolerance;
  }

  PoclRuntime pocl_;
  CpuContext cpu_ = create_cpu_context();
  double worst_relative_error_ = 0.0;
  std::map<uint32_t, int> threads_seen_;
};

// Grouping per expert count: (n_group, topk_group), topk_group raised where k needs more groups.
void grouping_for(int64_t experts, int64_t k, int64_t& n_group, int64_t& topk_group) {
  switch (experts) {
    case 8: n_group = 4, topk_group = 2; break;
    case 64: n_group = 8, topk_group = 3; break;
    case 256: n_group = 8, topk_group = 4; break;
    default: n_group = 16, topk_group = 4; break;
  }
  const int64_t size = experts / n_group;
  topk_group = std::max(topk_group, (k + size - 1) / size);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const mtk::MetalLimits apple;
  // A pipeline allowing 96 threads, and a 5 KB threadgroup budget under which the plan shrinks
  // the threadgroup to 64 threads to fit 512 experts: threads no longer one per expert.
  const mtk::MetalLimits capped = mtk::metal_router_limits_for_pipeline(100);
  mtk::MetalLimits tight;
  tight.threadgroup_memory_bytes = 5120;
  const Layout layouts[] = {Layout::Contiguous, Layout::Transposed, Layout::NegativeTokens, Layout::Stepped};
  const mtk_scoring scorings[] = {MTK_SCORING_SOFTMAX, MTK_SCORING_SIGMOID, MTK_SCORING_NONE};
  const mtk_dtype dtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16};
  int serial = 0;
  for (int64_t experts : {8, 64, 256, 512}) {
    for (int64_t k : {1, 2, 8, 10}) {
      if (k > experts) continue;
      for (mtk_scoring scoring : scorings) {
        for (int mode = 0; mode < 4; ++mode) {  // plain, bias, groups, bias and groups
          for (mtk_dtype dtype : dtypes) {
            for (Data data : {Data::Random, Data::Ties, Data::Specials}) {
              Case c{};
              c.tokens = 3 + serial % 6;
              c.experts = experts;
              c.k = k;
              c.scoring = scoring;
              c.bias = mode == 1 || mode == 3;
              c.n_group = 1;
              c.topk_group = 1;
              if (mode >= 2) grouping_for(experts, k, c.n_group, c.topk_group);
              c.dtype = dtype;
              c.data = data;
              c.layout = layouts[serial % 4];
              c.renormalize = serial % 3 != 0;
              c.scale = serial % 5 == 0 ? 2.5f : 1.0f;
              c.index_dtype = serial % 2 == 0 ? MTK_INT64 : MTK_INT32;
              c.limits = serial % 7 == 3 ? capped : apple;
              if (experts == 512 && serial % 5 == 1) c.limits = tight;
              out.push_back(c);
              ++serial;
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  return harness_main(argc, argv, [](const char* spir) {
    RouterHarness harness(spir);
    int failures = 0, ran = 0;
    uint64_t seed = 1;
    for (const Case& c : cases()) {
      ++ran;
      if (!harness.run(c, seed++)) ++failures;
    }
    std::printf("PoCL router: %d cases ran, %d matched the CPU backend (ids exact, weights within %g relative; "
                "worst seen %.3g)\n",
                ran, ran - failures, kWeightRelTolerance, harness.worst_relative_error());
    std::printf("threads per threadgroup (matching cases):");
    for (const auto& [threads, count] : harness.threads_seen()) std::printf(" %u:%d", threads, count);
    std::printf("\n");
    return failures == 0 ? 0 : 1;
  });
}
