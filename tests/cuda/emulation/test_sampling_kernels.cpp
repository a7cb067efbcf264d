// The CUDA sampling kernel's row function (lib/cuda/sampling_rows.cuh) on the host under
// fiber_cuda.hpp, against the CPU backend through the C ABI, bit for bit, so CI checks its logic
// without a GPU: every operation and input format, rows of ties, NaN, infinities, zeros and no
// mass, scalar and per-row parameters at their boundaries, both the shared-memory candidates
// path (top_k <= 2048) and the workspace path (no top-k, or a larger one).
//
// Usage: test_sampling_kernels [--quick]   (`make test` runs --quick: fewer rows and sizes).
// Exits 0 when every case matches.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "fiber_cuda.hpp"

// The 64-bit collectives and atomics the sampling kernel uses, beside fiber_cuda.hpp's.
inline unsigned long long __shfl_up_sync(unsigned mask, unsigned long long v, int delta) {
  return emu::wait_in(9, delta, mask, v, [](const emu::Word* in, emu::Word* out, unsigned m,
                                            int d) {
    for (int l = 0; l < 32; ++l) {
      if (m >> l & 1) out[l] = l >= d ? shuffle_source(in, m, l - d) : in[l];
    }
  });
}
inline unsigned long long __shfl_xor_sync(unsigned mask, unsigned long long v, int lane_mask) {
  return __shfl_xor_sync(mask, uint64_t(v), lane_mask);
}

#include "../conformance_support.hpp"
#include "cuda/sampling_split.cuh"
#include "metaltopk.h"

namespace {

using namespace mtk::cuda::sampling;

int failures = 0, cases = 0;

SharedState shared_state;  // the block's shared memory, one for all fibers

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// A row value as float32 bits: `kind` picks gaussian values, ties, specials, one constant or no
// mass; probabilities (`probs`) or logits.
uint32_t make_value(int kind, bool probs, std::mt19937_64& rng,
                    std::normal_distribution<float>& normal) {
  const uint64_t raw = rng();
  const float g = normal(rng);
  switch (kind) {
    case 0: return bits_of(probs ? std::exp(2.0f * g) / 4096.0f : 3.0f * g);
    case 1: return bits_of(probs ? float(raw % 8) / 1024.0f : float(int(raw % 9) - 4));
    case 2: {
      if (raw % 6 != 0) return bits_of(probs ? std::exp(g) / 1000.0f : 2.0f * g);
      const uint32_t logit[] = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u, 0u,
                                0x00000001u, 0x42f00000u, 0xffc00000u};
      const uint32_t prob[] = {0x7fc00000u, 0xbf800000u, 0x7f800000u, 0x80000000u, 0u,
                               0x00000003u, 0x70000000u, 0xff800000u};
      return (probs ? prob : logit)[(raw >> 8) % 8];
    }
    case 3: return bits_of(probs ? 0.25f : -2.0f);
    case 4:
      if (probs) return (raw & 1) ? 0u : 0xc0000000u;
      return (raw % 16 == 0) ? 0x7fc00000u : 0xff800000u;
    // Stresses of top-p's exponent bins and their refinement: a long run of equal values under
    // a few larger ones (the cut falls inside the run, decided by count and index) ...
    case 5:
      if (raw % 20 == 0) return bits_of(probs ? std::exp(2.0f * g) / 64.0f : 2.0f + g);
      return bits_of(probs ? 1.0f / 4096.0f : 0.0f);
    // ... masses over every binade, 2^64 and subnormals included ...
    case 6:
      return probs ? 1u + uint32_t(raw % 0x5f800000u) : bits_of(40.0f * g);
    // ... subnormal masses and the first normal binade (softmax gaps of 88 to 110) ...
    case 7:
      if (probs) return (raw % 4 != 0 ? 0u : 0x00800000u) + 1u + uint32_t((raw >> 8) % 0x7fffffu);
      return bits_of(raw % 50 == 0 ? 0.0f : -88.0f - 7.0f * std::fabs(g));
    // ... masses a few units in the last place apart, across a binade's edge (the refinement's
    // last passes) ...
    case 10: return probs ? 0x3a7ff000u + uint32_t(raw % 8192) : bits_of(1e-4f * float(raw % 512));
    default: return bits_of(probs ? 1.0f : 0.0f);
  }
}

// Rows whose top-p cut is their very first token (one mass dwarfs the rest) or needs their very
// last (equal masses and one small one at the end, reached by top_p just below 1).
// Kind 11: rows that mislead the top-k filter's guess from a sample in one block (the sample's
// runs of kSampleRun every n / (kSampleKeys / kSampleRun) tokens): runs valued 1000 down to 873,
// the row's other tokens low but for a value just under the third run's at every 113th, so that
// a first guess for k = 1024 gathers a few runs and those, about 740 tokens (870 of
// probabilities), fewer than k; one for k = 128 the first run alone, 32 tokens.
// Kind 12: the runs valued 1000 down by 8 each, the rest low: the guess gathers a few runs,
// fewer than k = 128 on all three guesses and fewer than k = 700 or 1024 on the one guess that
// counts the histogram.
uint32_t edge_value(int kind, bool probs, int64_t i, int64_t n, uint32_t body) {
  if (kind == 12) {
    const int64_t stride = n / (kSampleKeys / kSampleRun);
    const float scale = probs ? 1e-6f : 1.0f;
    if (i % stride < kSampleRun) return bits_of(scale * float(1000 - 8 * (i / stride)));
    return bits_of(scale * float(i % 13));
  }
  if (kind == 11) {
    const int64_t stride = n / (kSampleKeys / kSampleRun);
    const float scale = probs ? 1e-6f : 1.0f;
    if (i % stride < kSampleRun) return bits_of(scale * float(1000 - i / stride));
    return bits_of(i % 113 == 0 ? scale * 997.5f : scale * float(i % 13));
  }
  if (kind == 8 && i == 0) return bits_of(probs ? 0x1p60f : 0.0f);
  if (kind == 8) return bits_of(probs ? 1.0f : -30.0f);
  if (kind == 9 && i == n - 1) return bits_of(probs ? 0x1p-10f : -6.9314718f);
  return body;
}

struct Case {
  mtk_sampling_op op;
  mtk_dtype dtype;
  int64_t rows, n;
  bool per_row;
  int kind;  // of every row's values (make_value), or -1 for a mix
  std::vector<int64_t> top_k;  // int64 tensor when per_row, else top_k[0] as the scalar
  std::vector<float> top_p, min_p, temperature, uniforms;
};

mtk_tensor vector_tensor(void* data, mtk_dtype dtype, int64_t size) {
  mtk_tensor t{};
  t.data = data;
  t.dtype = dtype;
  t.ndim = 1;
  t.sizes[0] = size;
  t.strides[0] = 1;
  return t;
}

bool samples(mtk_sampling_op op) {
  return op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
}

// How the rows run: one block a row, a cluster of blocks a row (the split kernel), or one block a
// row in min-p's own kernel (sampling.cu's min_p_rows_kernel).
struct Launch {
  unsigned blocks;
  bool min_p_kernel;
};

// Each row by one block, or (blocks > 1) by a cluster of that many, as the split kernel runs it;
// shared memory starts as garbage, as it may on the GPU.
template <mtk_sampling_op kOp, class Format>
void run_rows(const SamplingArgs& args, int64_t rows, Launch launch) {
  const unsigned blocks = launch.blocks;
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (kOp == MTK_SAMPLING_RENORM_PROBS || kOp == MTK_SAMPLING_SAMPLE) {
      if (launch.min_p_kernel) {
        std::memset(static_cast<void*>(&shared_state), 0xa5, sizeof(SharedState));
        emu::block_idx.x = unsigned(r);
        emu::run_block(kThreads, [&] {
          min_p_row<kOp, MinPReads::kCandidates>(shared_state, args, r,
                                                 input_row<Float32Input>(args, r));
        });
        continue;
      }
    }
    if (blocks == 1u) {
      std::memset(static_cast<void*>(&shared_state), 0xa5, sizeof(SharedState));
      emu::block_idx.x = unsigned(r);
      emu::run_block(kThreads, [&] { sampling_row<kOp, Format>(shared_state, args, r); });
      continue;
    }
    std::vector<SharedState> shared(blocks);
    std::memset(static_cast<void*>(shared.data()), 0xa5, shared.size() * sizeof(SharedState));
    const emu::Cluster<SharedState> cluster{shared.data()};
    emu::run_cluster(blocks, kThreads, unsigned(r) * blocks, [&] {
      sampling_row_in_cluster<kOp, Format>(cluster, shared[emu::cluster_rank], args, r);
    });
  }
}

// The kernel lib/cuda/sampling.cu launches for the operation and input dtype.
template <mtk_sampling_op kOp>
void run_rows(const SamplingArgs& args, mtk_dtype dtype, int64_t rows, Launch launch) {
  switch (dtype) {
    case MTK_FLOAT32: run_rows<kOp, Float32Input>(args, rows, launch); break;
    case MTK_FLOAT16: run_rows<kOp, Float16Input>(args, rows, launch); break;
    default: run_rows<kOp, Bfloat16Input>(args, rows, launch); break;
  }
}

// Whether min-p alone filters every row of probabilities, so that min-p's own kernel may take
// them. The library launches it only where no top-k or top-p tensor is given; its rows come out
// the same as sampling_row's, and per-row min-p needs testing, so here the rows decide.
bool every_row_min_p_alone(const Case& c) {
  if (c.op != MTK_SAMPLING_RENORM_PROBS && c.op != MTK_SAMPLING_SAMPLE) return false;
  for (int64_t r = 0; r < c.rows; ++r) {
    const size_t at = size_t(c.per_row ? r : 0);
    if (mtk::top_k_filters(c.top_k[at], c.n) || mtk::top_p_filters(c.top_p[at])) return false;
  }
  return true;
}

void run_kernel(Case& c, std::vector<uint8_t>& input, std::vector<uint8_t>& got, Launch launch);
void report(const Case& c, const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
            Launch launch);

// The case's rows through the CPU backend, then through the kernel's row function.
void check(mtk_context cpu, Case& c, std::mt19937_64& rng) {
  ++cases;
  const bool logits = c.op == MTK_SAMPLING_TOP_K_MASK_LOGITS ||
                      c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  const size_t size = c.dtype == MTK_FLOAT32 ? 4 : 2;
  std::vector<uint8_t> input(size_t(c.rows * c.n) * size);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t r = 0; r < c.rows; ++r) {
    const int kind = c.kind >= 0 ? c.kind : int((r + int64_t(rng() % 11)) % 11);
    for (int64_t i = 0; i < c.n; ++i) {
      const uint32_t b = edge_value(kind, !logits, i, c.n, make_value(kind, !logits, rng, normal));
      uint8_t* p = input.data() + size_t(r * c.n + i) * size;
      if (size == 4) {
        std::memcpy(p, &b, 4);
      } else {
        // bf16 by truncation; for f16 any pattern is an input (bits are what is ranked).
        const uint16_t h = c.dtype == MTK_BFLOAT16 ? uint16_t(b >> 16) : uint16_t(b ^ (b >> 16));
        std::memcpy(p, &h, 2);
      }
    }
  }
  const size_t out_bytes = samples(c.op) ? size_t(c.rows) * 8
                           : size_t(c.rows * c.n) * (c.op == MTK_SAMPLING_RENORM_PROBS ? 4 : size);
  std::vector<uint8_t> want(out_bytes, 0), got(out_bytes, 0);

  // The CPU backend.
  mtk_tensor in{};
  in.data = input.data();
  in.dtype = c.dtype;
  in.ndim = 2;
  in.sizes[0] = c.rows;
  in.sizes[1] = c.n;
  in.strides[0] = c.n;
  in.strides[1] = 1;
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  mtk_tensor top_k = vector_tensor(c.top_k.data(), MTK_INT64, c.rows);
  mtk_tensor top_p = vector_tensor(c.top_p.data(), MTK_FLOAT32, c.rows);
  mtk_tensor min_p = vector_tensor(c.min_p.data(), MTK_FLOAT32, c.rows);
  mtk_tensor temperature = vector_tensor(c.temperature.data(), MTK_FLOAT32, c.rows);
  mtk_tensor uniforms = vector_tensor(c.uniforms.data(), MTK_FLOAT32, c.rows);
  const bool filters = c.op != MTK_SAMPLING_TOP_K_MASK_LOGITS;
  const bool tempered = c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  if (c.per_row) {
    params.top_k = &top_k;
    if (filters) params.top_p = &top_p;
    if (filters) params.min_p = &min_p;
    if (tempered) params.temperature = &temperature;
  } else {
    params.top_k_value = c.top_k[0];
    if (filters) params.top_p_value = c.top_p[0];
    if (filters) params.min_p_value = c.min_p[0];
    if (tempered) params.temperature_value = c.temperature[0];
  }
  mtk_tensor out{};
  if (samples(c.op)) {
    out = vector_tensor(want.data(), MTK_INT64, c.rows);
  } else {
    out = in;
    out.data = want.data();
    out.dtype = c.op == MTK_SAMPLING_RENORM_PROBS ? MTK_FLOAT32 : c.dtype;
  }
  switch (c.op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS:
      CHECK_OK(mtk_top_k_mask_logits(cpu, &in, &params, &out, nullptr));
      break;
    case MTK_SAMPLING_RENORM_PROBS:
      CHECK_OK(mtk_renorm_probs(cpu, &in, &params, &out, nullptr));
      break;
    case MTK_SAMPLING_SAMPLE:
      CHECK_OK(mtk_sample(cpu, &in, &params, &uniforms, &out, nullptr));
      break;
    case MTK_SAMPLING_SAMPLE_FROM_LOGITS:
      CHECK_OK(mtk_sample_from_logits(cpu, &in, &params, &uniforms, &out, nullptr));
      break;
  }

  // The kernel's row function, one block a row, then a cluster of 2, 3 or 4 blocks a row (the
  // split path: uneven slices, and empty ones where the row is short). The output starts as
  // garbage, so that an element the kernel does not write shows.
  const unsigned split_blocks = 2u + unsigned(cases % 3);
  std::vector<Launch> launches = {{1u, false}, {split_blocks, false}};
  if (every_row_min_p_alone(c)) launches.push_back({1u, true});
  for (const Launch launch : launches) {
    std::fill(got.begin(), got.end(), uint8_t(0xa5));
    run_kernel(c, input, got, launch);
    report(c, want, got, launch);
  }
}

void run_kernel(Case& c, std::vector<uint8_t>& input, std::vector<uint8_t>& got, Launch launch) {
  const bool filters = c.op != MTK_SAMPLING_TOP_K_MASK_LOGITS;
  const bool tempered = c.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  std::vector<float> masses(size_t(c.rows * c.n));
  SamplingArgs a{};
  a.n = c.n;
  a.input = input.data();
  a.input_row_stride = c.n;
  a.input_stride = 1;
  auto row_float = [&](std::vector<float>& v, bool read, float fallback) {
    RowFloatArg f{nullptr, 0, fallback};
    if (read && c.per_row) f = {v.data(), 1, 0.0f};
    if (read && !c.per_row) f.value = v[0];
    return f;
  };
  a.top_k = {c.per_row ? c.top_k.data() : nullptr, 1, c.top_k[0], false};
  a.top_p = row_float(c.top_p, filters, 1.0f);
  a.min_p = row_float(c.min_p, filters, 0.0f);
  a.temperature = row_float(c.temperature, tempered, 1.0f);
  a.uniforms = {c.uniforms.data(), 1, 0.0f};
  a.output = got.data();
  a.output_int64 = true;
  a.output_row_stride = samples(c.op) ? 1 : c.n;
  a.output_stride = 1;
  a.masses = masses.data();
  // min-p's candidate slots are half a row of floats, as sampling.cu gives them.
  a.masses_row_stride = launch.min_p_kernel ? (c.n + 1) / 2 : c.n;
  switch (c.op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS:
      run_rows<MTK_SAMPLING_TOP_K_MASK_LOGITS>(a, c.dtype, c.rows, launch);
      break;
    case MTK_SAMPLING_RENORM_PROBS:
      run_rows<MTK_SAMPLING_RENORM_PROBS>(a, c.dtype, c.rows, launch);
      break;
    case MTK_SAMPLING_SAMPLE: run_rows<MTK_SAMPLING_SAMPLE>(a, c.dtype, c.rows, launch); break;
    case MTK_SAMPLING_SAMPLE_FROM_LOGITS:
      run_rows<MTK_SAMPLING_SAMPLE_FROM_LOGITS>(a, c.dtype, c.rows, launch);
      break;
  }
}

void report(const Case& c, const std::vector<uint8_t>& want, const std::vector<uint8_t>& got,
            Launch launch) {
  if (want != got) {
    ++failures;
    const size_t out_bytes = want.size();
    const size_t row_bytes = out_bytes / size_t(c.rows);
    int64_t row = 0;
    while (row < c.rows && std::memcmp(want.data() + size_t(row) * row_bytes,
                                       got.data() + size_t(row) * row_bytes, row_bytes) == 0) {
      ++row;
    }
    std::fprintf(stderr,
                 "FAIL op=%d dtype=%d rows=%lld n=%lld per_row=%d blocks=%u%s: row %lld differs "
                 "(top_k %lld top_p %g min_p %g temperature %g uniform %g)\n",
                 int(c.op), int(c.dtype), (long long)c.rows, (long long)c.n, int(c.per_row),
                 launch.blocks, launch.min_p_kernel ? " (min-p kernel)" : "",
                 (long long)row, (long long)c.top_k[c.per_row ? size_t(row) : 0],
                 c.top_p[c.per_row ? size_t(row) : 0], c.min_p[c.per_row ? size_t(row) : 0],
                 c.temperature[c.per_row ? size_t(row) : 0], c.uniforms[size_t(row)]);
  }
}

// The rank of the top-k filter's next guess (next_sample_rank): it moves by the sample's known
// rate whatever the last guess's luck, always past the prefix that missed, within the sample,
// and gives up where no other prefix is left. A wrong rank never breaks a result (a guess
// holds only when its gathered count fits), so only these cases see it.
// The first guess's rank: by the sample's rate, and from at least 16 keys where those stand for
// at most half the capacity.
void check_first_sample_rank() {
  struct RankCase {
    uint32_t k;
    int64_t n, sampled;
    uint32_t want;
  };
  const RankCase rank_cases[] = {
      {50u, 262144, 4096, 16u},     // the rate says 5 (320 tokens at one key in 64)
      {1024u, 262144, 4096, 23u},   // 1448 tokens: the rate's
      {50u, 1 << 20, 4096, 4u},     // 16 keys would be 4096 tokens: as many as half the capacity
      {1u, int64_t(1) << 30, 4096, 1u},  // one key stands for more than the capacity
  };
  for (const RankCase& c : rank_cases) {
    ++cases;
    const uint32_t got = first_sample_rank(c.k, c.n, c.sampled);
    if (got != c.want) {
      ++failures;
      std::fprintf(stderr, "FAIL first_sample_rank(k %u, n %lld, sampled %lld): %u, want %u\n",
                   c.k, (long long)c.n, (long long)c.sampled, got, c.want);
    }
  }
}

void check_next_sample_rank() {
  struct RankCase {
    CountSelection guess;  // the prefix that missed: sample keys above it and at it
    uint32_t gathered, k;
    int64_t n, sampled;
    uint32_t want;
  };
  const RankCase rank_cases[] = {
      // One sampled key in 64; k = 50 aims at 320 tokens: the 5th key's prefix gathered 45, so
      // 275 more lie about 4 keys further down (the ratio 5 keys : 45 tokens would say 35).
      {{0u, 4u, 1u}, 45u, 50u, 262144, 4096, 9u},
      // 2191 gathered at the 35th key: 1871 too many, 29 keys back up.
      {{0u, 34u, 1u}, 2191u, 50u, 262144, 4096, 6u},
      // A step under one key still leaves the prefix: one key past its own keys ...
      {{0u, 8u, 2u}, 1000u, 1024u, int64_t(1) << 30, 4096, 11u},
      // ... or the last key above it.
      {{0u, 3u, 2u}, 2100u, 1024u, int64_t(1) << 30, 4096, 3u},
      // A step past either end of the sample stops at it.
      {{0u, 3990u, 10u}, 20u, 1024u, 16384, 4096, 4096u},
      {{0u, 40u, 1u}, 60000u, 50u, 262144, 4096, 1u},
      // No key above a prefix that gathered too many, or none below one that gathered too few.
      {{0u, 0u, 3u}, 2500u, 50u, 262144, 4096, 0u},
      {{0u, 4000u, 96u}, 20u, 50u, 262144, 4096, 0u},
  };
  for (const RankCase& c : rank_cases) {
    ++cases;
    const uint32_t got = next_sample_rank(c.guess, c.gathered, c.k, c.n, c.sampled);
    if (got != c.want) {
      ++failures;
      std::fprintf(stderr, "FAIL next_sample_rank(before %u, equal %u, gathered %u, k %u): %u, "
                   "want %u\n", c.guess.before, c.guess.equal, c.gathered, c.k, got, c.want);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  mtk_context cpu = nullptr;
  CHECK_OK(mtk_context_create(MTK_BACKEND_CPU, 0, &cpu));
  emu::fiber_stack_bytes = 256 * 1024;  // the row function inlines deep chains of exact sums
  std::mt19937_64 rng(33);
  check_first_sample_rank();
  check_next_sample_rank();
  const mtk_sampling_op ops[] = {MTK_SAMPLING_TOP_K_MASK_LOGITS, MTK_SAMPLING_RENORM_PROBS,
                                 MTK_SAMPLING_SAMPLE, MTK_SAMPLING_SAMPLE_FROM_LOGITS};
  // 2500 tokens: the two-read top-k both fits and overflows; 20000 (full runs): rows shaped as
  // the benchmark's, mostly on the two-read path.
  const int64_t sizes[] = {1, 2, 7, 300, 2500, 20000};
  const int rounds = quick ? 2 : 6;
  for (const int64_t n : sizes) {
    if (quick && n > 2500) continue;
    for (mtk_sampling_op op : ops) {
      const bool logits = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ||
                          op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
      for (int round = 0; round < rounds; ++round) {
        const mtk_dtype dtypes[] = {MTK_FLOAT32, MTK_BFLOAT16, MTK_FLOAT16};
        Case c{};
        c.op = op;
        c.dtype = logits ? dtypes[round % 3] : MTK_FLOAT32;
        c.rows = quick ? 3 : 5;
        c.n = n;
        c.per_row = round % 2 == 1;
        c.kind = -1;
        for (int64_t r = 0; r < c.rows; ++r) {
          const int64_t ks[] = {0, 1, 3, n - 1, n, -2, 2048, 2049, 17, 50, 1000};
          const float ps[] = {1.0f, 0.5f, 0.9f, 0.0f, NAN, 0.99f, 0x1.fffffep-1f, 1e-30f};
          const float mins[] = {0.0f, 0.1f, 0.5f, 2.0f, NAN};
          const float temps[] = {1.0f, 0.5f, 0.0f, INFINITY, 1e-39f, 3.0f};
          const float us[] = {0.0f, 0.5f, 0.999f, 1.0f, NAN, 0.3f, 0.75f};
          c.top_k.push_back(ks[rng() % 11]);
          c.top_p.push_back(ps[rng() % 8]);
          c.min_p.push_back(mins[rng() % 5]);
          c.temperature.push_back(temps[rng() % 6]);
          c.uniforms.push_back(us[rng() % 7]);
        }
        check(cpu, c, rng);
      }
    }
  }
  // Every stress of top-p's bins on its own, with top_p at the cut's edges (first token, last
  // token, inside a run of ties), with and without top-k and min-p after.
  const int64_t stress_sizes[] = {300, 2500, 20000};
  for (const int64_t n : stress_sizes) {
    if (quick && n > 2500) continue;
    const mtk_sampling_op stress_ops[] = {MTK_SAMPLING_RENORM_PROBS, MTK_SAMPLING_SAMPLE,
                                          MTK_SAMPLING_SAMPLE_FROM_LOGITS};
    for (mtk_sampling_op op : stress_ops) {
      for (int kind = 5; kind <= 10; ++kind) {
        Case c{};
        c.op = op;
        c.dtype = MTK_FLOAT32;
        c.rows = 6;
        c.n = n;
        c.per_row = true;
        c.kind = kind;
        const float ps[] = {0.9f, 0.99f, 0x1.fffffep-1f, 0.5f, 1e-30f, 0.999f};
        const int64_t ks[] = {0, 0, 0, 2049, 1000, n - 1};
        const float mins[] = {0.0f, 0.0f, 0.0f, 0.0f, 0.3f, 1e-6f};
        for (int64_t r = 0; r < c.rows; ++r) {
          c.top_k.push_back(ks[r]);
          c.top_p.push_back(ps[r]);
          c.min_p.push_back(mins[(r + kind) % 6]);
          c.temperature.push_back(1.0f);
          c.uniforms.push_back(float(rng() % 1000) / 1000.0f);
        }
        check(cpu, c, rng);
      }
    }
  }
  // The top-k filter's guess from a sample of keys (k at most half the candidates' capacity, at
  // least kMinSampledTokens tokens a block: 70000 tokens guess in one block and in clusters of 2
  // to 4): gaussian rows, where the guess holds, and rows of ties, specials, every binade and
  // near-equal values, where it may gather too many or too few and the histogram takes over; k
  // at the guess's limits (1, and half the capacity, and one past it). Kind 11's first guess
  // gathers fewer than k = 1024 (then the histogram its read counted) and than k = 128 (then a
  // second guess), but more than 700; kind 12 misleads all three guesses for k = 128 and the
  // counting guess for k = 700 and 1024.
  for (mtk_sampling_op op : ops) {
    const bool logits = op == MTK_SAMPLING_TOP_K_MASK_LOGITS ||
                        op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
    for (const int kind : {0, 1, 2, 6, 10, 11, 12}) {
      Case c{};
      c.op = op;
      c.dtype = logits && kind == 0 ? MTK_BFLOAT16 : MTK_FLOAT32;
      const int64_t misled_ks[] = {kCandidateCapacity / 2, 128, 700};
      c.rows = 3;
      c.n = 70000;
      c.per_row = true;
      c.kind = kind;
      const int64_t ks[] = {1, kCandidateCapacity / 2, 50, kCandidateCapacity / 2 + 1, 700};
      for (int64_t r = 0; r < c.rows; ++r) {
        c.top_k.push_back(kind >= 11 ? misled_ks[r] : ks[size_t(r + kind) % 5]);
        c.top_p.push_back(r == 1 ? 0.9f : 1.0f);
        c.min_p.push_back(0.0f);
        c.temperature.push_back(1.0f);
        c.uniforms.push_back(float(rng() % 1000) / 1000.0f);
      }
      check(cpu, c, rng);
    }
  }
  // Probabilities that neither top-k nor top-p filters (min_p_row reads the input alone): every
  // kind of row under min-p bounds that keep one token, a few, all, or filter nothing, with draws
  // at both ends of the row's mass; 70000 tokens split the draw's ranges unevenly. 20000 tokens
  // are the fewest whose warp ranges hold whole batches of loads, which the second read goes
  // through backward (ReadOrder), in one block and in clusters of two. The first read gathers
  // min-p's candidates (their slots half a row here), which fit under the larger bounds and
  // overflow under 1e-6; rows of 4999 tokens start off 16-byte boundaries, read a token a lane.
  const int64_t min_p_sizes[] = {1, 300, 2500, 4999, 20000, 70000};
  for (const int64_t n : min_p_sizes) {
    if (quick && n > 20000) continue;
    for (mtk_sampling_op op : {MTK_SAMPLING_RENORM_PROBS, MTK_SAMPLING_SAMPLE}) {
      for (int kind = 0; kind <= 10; ++kind) {
        Case c{};
        c.op = op;
        c.dtype = MTK_FLOAT32;
        c.rows = 6;
        c.n = n;
        c.per_row = kind % 2 == 0;
        c.kind = kind;
        const float mins[] = {0.1f, 1e-6f, 1.0f, 0.0f, NAN, 0.5f};
        const float us[] = {0.0f, 0.999f, 0.5f, 0x1.fffffep-1f, 0.3f, 0.75f};
        const int64_t ks[] = {0, n, -1, 0, 0, 0};
        const float ps[] = {1.0f, NAN, 1.0f, 2.0f, 1.0f, 1.0f};
        for (int64_t r = 0; r < c.rows; ++r) {
          const size_t at = size_t(c.per_row ? r : 0);
          c.top_k.push_back(ks[at]);
          c.top_p.push_back(ps[at]);
          c.min_p.push_back(mins[(size_t(r) + size_t(kind)) % 6]);
          c.temperature.push_back(1.0f);
          c.uniforms.push_back(us[(size_t(r) + size_t(kind)) % 6]);
        }
        check(cpu, c, rng);
      }
    }
  }
  CHECK_OK(mtk_context_destroy(cpu));
  std::printf("test_sampling_kernels: %d cases, %d failures\n", cases, failures);
  return failures == 0 ? 0 : 1;
}
