// The CUDA sampling kernels' launch: one kernel per operation and input format, one block per
// row (sampling_rows.cuh), or in a small batch a cluster of blocks per row (sampling_split.cuh).
#include "cuda/sampling.hpp"

#include <cooperative_groups.h>

#include "core/error.hpp"
#include "core/sampling_math.hpp"
#include "cuda/device_utils.cuh"
#include "cuda/kernel_launch.cuh"
#include "cuda/sampling_split.cuh"

namespace mtk {
namespace cuda {

namespace {

constexpr size_t kMassRowAlignment = 256;  // bytes

// Two blocks an SM (64 registers a thread), so that a batch of 256 rows runs in one wave on
// an H100 or H200 (132 SMs).
template <mtk_sampling_op kOp, class Format>
__global__ __launch_bounds__(sampling::kThreads, 2) void sampling_rows_kernel(
    sampling::SamplingArgs args) {
  __shared__ sampling::SharedState shared;
  wait_for_previous_kernel();
  sampling::sampling_row<kOp, Format>(shared, args, blockIdx.x);
}

// The same, a row to a cluster of blocks (launched with the cluster's size). A split block has
// its SM alone (kSplitBlockPadding), so it may take the SM's registers: 128 a thread, where 64
// spilled up to 800 bytes a thread around the cluster's steps.
template <mtk_sampling_op kOp, class Format>
__global__ __launch_bounds__(sampling::kThreads, 1) void sampling_split_rows_kernel(
    sampling::SamplingArgs args) {
  __shared__ sampling::SharedState shared;
  wait_for_previous_kernel();
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  sampling::sampling_row_in_cluster<kOp, Format>(cluster, shared, args,
                                                 blockIdx.x / cluster.num_blocks());
}

// Rows of probabilities that min-p alone filters (every_row_reads_input_alone), a row to a block,
// in a kernel of their own: the registers and spills of the other steps stay out of its two
// reads.
template <mtk_sampling_op kOp>
__global__ __launch_bounds__(sampling::kThreads, 2) void min_p_rows_kernel(
    sampling::SamplingArgs args) {
  __shared__ sampling::SharedState shared;
  wait_for_previous_kernel();
  sampling::min_p_row<kOp, sampling::MinPReads::kCandidates>(shared, args, blockIdx.x,
                           sampling::input_row<sampling::Float32Input>(args, blockIdx.x));
}

// The same, a row to a cluster of blocks (launched as the split kernels are).
template <mtk_sampling_op kOp>
__global__ __launch_bounds__(sampling::kThreads, 1) void min_p_split_rows_kernel(
    sampling::SamplingArgs args) {
  __shared__ sampling::SharedState shared;
  wait_for_previous_kernel();
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  sampling::min_p_row_in_cluster<kOp>(cluster, shared, args, blockIdx.x / cluster.num_blocks());
}

// Dynamic shared memory the split kernels reserve and never use, so that no two blocks share an
// SM (228 KB an SM on the H100 and H200, 37 KB of static shared memory a block): the split
// spreads a row over SMs, and two of its blocks on one SM share its load units. Measured: 64 rows
// of min-p at two blocks a row ran slower than at one.
constexpr size_t kSplitBlockPadding = 80 * 1024;

// A slice of a split row holds at least this many tokens: fewer would cost the cluster's
// barriers more than the reading they share out.
constexpr int64_t kMinSliceTokens = 8192;

bool every_row_finishes_on_candidates(const SamplingProblem& p) {
  return p.top_k.vector.data == nullptr && top_k_filters(p.top_k.value, p.n) &&
         p.top_k.value <= sampling::kCandidateCapacity;
}

// Rows of probabilities that neither top-k nor top-p filters read their input alone (min_p_row).
bool every_row_reads_input_alone(const SamplingProblem& p) {
  return p.op != MTK_SAMPLING_SAMPLE_FROM_LOGITS && p.top_k.vector.data == nullptr &&
         !top_k_filters(p.top_k.value, p.n) && p.top_p.data == nullptr &&
         !top_p_filters(p.top_p.value);
}

// Whether splitting the rows over clusters shares out reading: some row may take a split step
// (sampling_row_in_cluster). Greedy rows, and those whose top-k filter keeps more than
// kCandidateCapacity tokens, run in one block of their cluster.
bool some_row_splits(const SamplingProblem& p) {
  if (p.op == MTK_SAMPLING_TOP_K_MASK_LOGITS || p.top_k.vector.data != nullptr) return true;
  if (p.op == MTK_SAMPLING_SAMPLE_FROM_LOGITS && p.temperature.data == nullptr &&
      !temperature_samples(p.temperature.value)) {
    return false;
  }
  return !top_k_filters(p.top_k.value, p.n) ||
         p.top_k.value <= sampling::kCandidateCapacity;
}

// Blocks a row: the most (up to kMaxSplitBlocks) at which the whole batch still runs at once,
// each slice at least kMinSliceTokens; one where even clusters of two would queue.
unsigned blocks_per_row(const SamplingProblem& p, const SplitCapacity& capacity) {
  if (!some_row_splits(p)) return 1u;
  unsigned blocks = 1u;
  for (int log2 = 1; (1 << log2) <= sampling::kMaxSplitBlocks; ++log2) {
    if (p.rows <= capacity.rows_at_once[log2] && p.n >= (int64_t(1) << log2) * kMinSliceTokens) {
      blocks = 1u << log2;
    }
  }
  return blocks;
}

int64_t mass_row_floats(int64_t n) {
  const int64_t per_line = int64_t(kMassRowAlignment / sizeof(float));
  return (n + per_line - 1) / per_line * per_line;
}

sampling::RowFloatArg row_float(const RowFloat& f) { return {f.data, f.stride, f.value}; }

// Where the launch goes: the stream and the blocks a row.
struct RowLaunch {
  int64_t rows;
  unsigned blocks;
  cudaStream_t stream;
};

// The row kernel, or the split one in clusters of l.blocks.
template <auto kRowKernel, auto kSplitKernel>
void launch_row_kernels(const sampling::SamplingArgs& args, const RowLaunch& l, const char* what) {
  if (l.blocks == 1u) {
    launch_overlapped<kRowKernel>(dim3(unsigned(l.rows)), dim3(sampling::kThreads), 0, l.stream,
                                  what, args);
  } else {
    allow_dynamic_shared_bytes<kSplitKernel>(kSplitBlockPadding);
    launch_overlapped_in_clusters<kSplitKernel>(l.blocks, dim3(unsigned(l.rows) * l.blocks),
                                                dim3(sampling::kThreads), kSplitBlockPadding,
                                                l.stream, what, args);
  }
}

template <mtk_sampling_op kOp, class Format>
void launch_rows(const sampling::SamplingArgs& args, const RowLaunch& l) {
  launch_row_kernels<sampling_rows_kernel<kOp, Format>,
                     sampling_split_rows_kernel<kOp, Format>>(args, l,
                                                              "launching the sampling kernel");
}

// Logits come as float32, float16 or bfloat16.
template <mtk_sampling_op kOp>
bool launch_logit_rows(const sampling::SamplingArgs& args, const SamplingProblem& p,
                       const RowLaunch& l) {
  switch (p.dtype) {
    case MTK_FLOAT32: launch_rows<kOp, sampling::Float32Input>(args, l); return true;
    case MTK_FLOAT16: launch_rows<kOp, sampling::Float16Input>(args, l); return true;
    case MTK_BFLOAT16: launch_rows<kOp, sampling::Bfloat16Input>(args, l); return true;
    default: return false;
  }
}

// Probabilities come as float32 (validate_sampling.cpp).
template <mtk_sampling_op kOp>
bool launch_probability_rows(const sampling::SamplingArgs& args, const SamplingProblem& p,
                             const RowLaunch& l) {
  if (p.dtype != MTK_FLOAT32) return false;
  if (every_row_reads_input_alone(p)) {
    launch_row_kernels<min_p_rows_kernel<kOp>, min_p_split_rows_kernel<kOp>>(
        args, l, "launching the min-p sampling kernel");
    return true;
  }
  launch_rows<kOp, sampling::Float32Input>(args, l);
  return true;
}

// Floats of workspace a row: its masses, or where min-p alone filters the slots of the
// candidates min-p may keep (a quarter of the tokens, sampling_rows.cuh's min_p_row: a softmax
// row under min_p 0.05 gathers about a tenth); none where nothing needs them.
int64_t workspace_row_floats(const SamplingProblem& p) {
  if (p.op == MTK_SAMPLING_TOP_K_MASK_LOGITS || every_row_finishes_on_candidates(p)) return 0;
  if (every_row_reads_input_alone(p)) {
    const bool min_p_may_filter = p.min_p.data != nullptr || min_p_filters(p.min_p.value);
    return min_p_may_filter ? mass_row_floats((p.n + 1) / 2) : 0;
  }
  return mass_row_floats(p.n);
}

}  // namespace

// Asks the occupancy of one split kernel: all have the same block and shared memory, and their
// registers are capped alike by __launch_bounds__ (one block an SM, as the padding has it).
SplitCapacity sampling_split_capacity() {
  constexpr auto kernel = sampling_split_rows_kernel<MTK_SAMPLING_SAMPLE, sampling::Float32Input>;
  SplitCapacity capacity;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) !=
          cudaSuccess ||
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           int(kSplitBlockPadding)) != cudaSuccess) {
    cudaGetLastError();
    return capacity;
  }
  for (int log2 = 1; (1 << log2) <= sampling::kMaxSplitBlocks; ++log2) {
    cudaLaunchAttribute cluster = cluster_dimension(1u << log2);
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1u << log2);
    config.blockDim = dim3(sampling::kThreads);
    config.dynamicSmemBytes = kSplitBlockPadding;
    config.attrs = &cluster;
    config.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&capacity.rows_at_once[log2], kernel, &config) !=
        cudaSuccess) {
      cudaGetLastError();
      capacity.rows_at_once[log2] = 0;
    }
  }
  return capacity;
}

size_t sampling_workspace_bytes(const SamplingProblem& p) {
  return size_t(p.rows) * size_t(workspace_row_floats(p)) * sizeof(float);
}

void launch_sampling(const SamplingProblem& p, void* workspace, const SplitCapacity& capacity,
                     cudaStream_t stream) {
  sampling::SamplingArgs args{};
  args.n = p.n;
  args.input = p.input;
  args.input_row_stride = p.input_row_stride;
  args.input_stride = p.input_stride;
  args.top_k = {p.top_k.vector.data, p.top_k.vector.stride, p.top_k.value,
                p.top_k.vector.dtype == MTK_INT32};
  args.top_p = row_float(p.top_p);
  args.min_p = row_float(p.min_p);
  args.temperature = row_float(p.temperature);
  args.uniforms = row_float(p.uniforms);
  args.output = p.output;
  args.output_int64 = p.output_dtype == MTK_INT64;
  args.output_row_stride = p.output_row_stride;
  args.output_stride = p.output_stride;
  args.masses_row_stride = workspace_row_floats(p);
  args.masses = args.masses_row_stride != 0 ? static_cast<float*>(workspace) : nullptr;
  const RowLaunch l{p.rows, blocks_per_row(p, capacity), stream};
  bool launched = false;
  switch (p.op) {
    case MTK_SAMPLING_TOP_K_MASK_LOGITS:
      launched = launch_logit_rows<MTK_SAMPLING_TOP_K_MASK_LOGITS>(args, p, l);
      break;
    case MTK_SAMPLING_SAMPLE_FROM_LOGITS:
      launched = launch_logit_rows<MTK_SAMPLING_SAMPLE_FROM_LOGITS>(args, p, l);
      break;
    case MTK_SAMPLING_RENORM_PROBS:
      launched = launch_probability_rows<MTK_SAMPLING_RENORM_PROBS>(args, p, l);
      break;
    case MTK_SAMPLING_SAMPLE:
      launched = launch_probability_rows<MTK_SAMPLING_SAMPLE>(args, p, l);
      break;
  }
  if (!launched) {
    fail(MTK_ERROR_INTERNAL, "no CUDA sampling kernel for operation ", int(p.op),
         " and input dtype ", int(p.dtype));
  }
}

}  // namespace cuda
}  // namespace mtk
