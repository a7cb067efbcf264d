// The host-side policy of the CUDA backend: which kernel family serves a problem, how the work
// is split, and the exact scratch it needs. Plans depend only on (dtype, rows, n, k) and the
// device, so the backend caches them (mtk::LruCache; hits and misses reach mtk_cache_stats).
//
// Heuristic:
//  - Warp: n <= 1024 and k <= 32. A warp per row, everything in registers, no scratch. Covers
//    MoE routing (128..1024 experts, top-1..32), any row count.
//  - Block: otherwise, when one block per row already gives the GPU enough blocks (rows >=
//    kTargetBlocksPerSm * SMs, or rows too short to split) and k <= kSortCapacity. No scratch.
//  - Cluster: rows that would take Multi but are few (one wave of clusters: cluster_rows, what
//    the device co-schedules), no longer than a cluster holds in registers (kClusterMaxItems
//    slots a thread), with keys of at most 32 bits and k <= kSortCapacity. One launch, no
//    scratch, where Multi takes a memset and four dependent launches.
//  - Multi: everything else (long rows, few rows, or large k). Each row is split over
//    blocks_per_row blocks so that rows * blocks_per_row ~ kTargetBlocksPerSm * SMs, with at
//    least kMinElementsPerBlock elements each. Scratch: per-row state, the k winners, and two
//    candidate buffers of `capacity` composites per row; plus CUB merge-sort temporary storage
//    when k > kSortCapacity. Large problems whose k is small next to the row take a sampled
//    threshold first (see multi_sample_kernel), so the input is read once instead of twice.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "metaltopk.h"

namespace mtk {
namespace cuda {

enum class TopkPath { Warp, Block, Cluster, Multi };

// What the threshold pass of a sampled plan histograms of its candidates (topk_plan.cu says
// when which).
enum class CandidateHistogram : uint32_t {
  None,       // few expected: the finish kernel ranks them all from the empty prefix
  TopDigit,   // the composite's top 11 bits, where the filter passes start
  KeyPrefix,  // key prefixes (threshold_key_bin): the k-th's bucket, for the finish too
};

// Every region of the scratch layout starts on this boundary, counted from the scratch base
// rounded up to it (a caller's workspace may be unaligned; workspace_bytes includes the slack).
constexpr size_t kScratchAlignment = 256;

struct TopkPlan {
  TopkPath path = TopkPath::Warp;
  int warp_items = 0;           // Warp: elements per lane (a power of two, 1..32)
  int cluster_items = 0;        // Cluster: key slots a thread (kClusterSmallItems or ...MaxItems)
  int blocks_per_row = 1;       // Multi
  int64_t capacity = 0;         // Multi: candidate slots per row and buffer
  bool sort_in_block = true;    // Multi: k fits the finish kernel's shared-memory sort
  uint32_t sample_rank = 0;     // Multi: > 0 reads the input once through a sampled threshold
  int samples_per_thread = 0;   // Multi, sampled: which sample size
  bool split_sample = false;    // Multi, sampled: the wide sample over kSplitSampleParts blocks
  CandidateHistogram candidate_histogram = CandidateHistogram::None;  // Multi, sampled
  bool large_threshold_stage = false;  // Multi, sampled: over two candidates a thread expected
  uint32_t l2_prefetch_bytes = 0;      // Multi, sampled: head of each segment asked into L2
  size_t states_offset = 0, winners_offset = 0, candidates_offset[2] = {0, 0};
  size_t sort_temp_offset = 0, sort_temp_bytes = 0;
  size_t workspace_bytes = 0;   // exact scratch for the call (0 for Warp and Block)
};

struct PlanKey {
  mtk_dtype dtype;
  int64_t rows, n, k;
  bool operator==(const PlanKey& o) const {
    return dtype == o.dtype && rows == o.rows && n == o.n && k == o.k;
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = std::hash<int64_t>()(key.rows);
    h = h * 1000003u ^ std::hash<int64_t>()(key.n);
    h = h * 1000003u ^ std::hash<int64_t>()(key.k);
    return h * 1000003u ^ size_t(key.dtype);
  }
};

// What the device offers the plan: its SMs, its L2, and how many select clusters it runs at
// once (0: none, before sm_90).
struct DeviceLimits {
  int sm_count;
  int64_t l2_bytes;
  int cluster_rows;
};

// Throws MTK_ERROR_INVALID_ARGUMENT for rows longer than the backend handles (2^32 - 2).
TopkPlan make_topk_plan(const PlanKey& key, const DeviceLimits& device);

}  // namespace cuda
}  // namespace mtk
