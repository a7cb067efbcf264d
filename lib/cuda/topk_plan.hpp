// The host-side policy of the CUDA backend: which kernel family serves a problem, how the work
// is split, and the exact scratch it needs. Plain C++ (topk_plan.cpp), unit-tested without nvcc
// or a GPU (tests/cuda/test_plan.cpp). Plans depend only on (dtype, rows, n, k, ragged) and the
// device, so the backend caches them (mtk::LruCache; hits and misses reach mtk_cache_stats).
//
// Heuristic:
//  - Warp: n <= 1024 and k <= 32. A warp per row, everything in registers, no scratch. Covers
//    MoE routing (128..1024 experts, top-1..32), any row count.
//  - Block: otherwise, when one block per row already gives the GPU enough blocks (rows >=
//    kTargetBlocksPerSm * SMs, or rows too short to split) and k <= kSortCapacity. No scratch;
//    rows whose keys fit kBlockKeyCacheMaxBytes are cached in shared memory, read once.
//  - Cluster: rows that would take Multi but are few (one wave of clusters: cluster_rows, what
//    the device co-schedules), no longer than a cluster holds in registers (kClusterMaxItems
//    slots a thread), with keys of at most 32 bits and k <= kSortCapacity. One launch, no
//    scratch, where Multi takes a memset and four dependent launches.
//  - Multi: everything else (long rows, few rows, or large k). Each row is split over
//    blocks_per_row blocks so that rows * blocks_per_row ~ kTargetBlocksPerSm * SMs, with at
//    least kMinElementsPerBlock elements each. Scratch: per-row state, the k winners, and two
//    candidate buffers of `capacity` composites per row; plus, when k is too large for a block
//    to sort in shared memory, the sorted winners and the scratch of CUB's segmented sort. Large problems whose k is small next to the row take a sampled
//    threshold first (see multi_sample_kernel), so the input is read once instead of twice.
//  - Ragged rows (mtk_topk_ragged) are planned by their dense shape (n the row's full length, k
//    the requested k, which may exceed n) and take Block or Multi, sampled or not: the windows
//    are read on the device, and only those kernels know them. A sampled plan thresholds each
//    window at its own rank (no split sample), or whole where it is short (window_threshold).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cuda/topk_config.hpp"
#include "metaltopk.h"

namespace mtk {
namespace cuda {

enum class TopkPath { Warp, Block, Cluster, Multi };

// Who sorts the Multi path's winners: the finish kernel (k <= kSortCapacity), a block per row
// by a radix sort of their packed bits (keys up to 32 bits, k up to kRowRadixSortMaxK), a block
// per row in dynamic shared memory (up to kRowSortMaxBytes), or CUB's segmented sort.
enum class WinnerSort { Finish, RowRadix, RowBlocks, Segmented };

// Rows longer than this are refused: indices must fit a composite's 32 bits, with the all-ones
// index kept free (see Composite).
constexpr int64_t kMaxRowLength = int64_t(0xfffffffe);
// Blocks one launch may take (a CUDA grid's x dimension).
constexpr int64_t kMaxGridBlocks = int64_t(0x7fffffff);

// Every region of the scratch layout starts on this boundary, counted from the scratch base
// rounded up to it (a caller's workspace may be unaligned; workspace_bytes includes the slack).
constexpr size_t kScratchAlignment = 256;

// Where the Multi path's regions lie, in bytes from the aligned scratch base (carve_scratch).
struct ScratchLayout {
  size_t states = 0;             // rows RowStates
  size_t winners = 0;            // rows * k composites
  size_t candidates[2] = {0, 0}; // rows * capacity composites each
  // When the winners take CUB's segmented sort (WinnerSort::Segmented): its output (rows * k
  // composites) and its scratch.
  size_t sorted_winners = 0;
  size_t sort_temp = 0;
  size_t sort_temp_bytes = 0;
};

struct TopkPlan {
  TopkPath path = TopkPath::Warp;
  // The widest launch's grid: Warp ceil(rows / kWarpPathRowsPerBlock) (the dim-0 tile kernel
  // takes fewer), Block rows, Cluster rows * kClusterBlocks, Multi rows * blocks_per_row (its
  // passes; the sample and finish launches take fewer).
  int64_t blocks = 0;
  int warp_items = 0;           // Warp: elements per lane (a power of two, 1..32)
  int64_t block_key_cache_bytes = 0;  // Block: dynamic shared memory caching a row's keys
  int cluster_items = 0;        // Cluster: key slots a thread (kClusterSmallItems or ...MaxItems)
  int blocks_per_row = 1;       // Multi
  int64_t capacity = 0;         // Multi: candidate slots per row and buffer
  WinnerSort winner_sort = WinnerSort::Finish;  // Multi
  int64_t row_sort_bytes = 0;   // Multi, WinnerSort::RowBlocks: dynamic shared memory a block
  int64_t finish_placement_bytes = 0;  // Multi, RowRadix from key prefixes: dynamic shared memory
                                       // of the finish, k composites
  uint32_t sample_rank = 0;     // Multi: > 0 reads the input once through a sampled threshold
  int samples_per_thread = 0;   // Multi, sampled: which sample size
  bool split_sample = false;    // Multi, sampled: the wide sample over kSplitSampleParts blocks
  CandidateHistogram candidate_histogram = CandidateHistogram::None;  // Multi, sampled
  bool large_threshold_stage = false;  // Multi, sampled: over two candidates a thread expected
  uint32_t l2_prefetch_bytes = 0;      // Multi, sampled: head of each segment asked into L2
  ScratchLayout scratch;        // Multi
  size_t workspace_bytes = 0;   // exact scratch for the call (0 for Warp, Block and Cluster)
};

struct PlanKey {
  mtk_dtype dtype;
  int64_t rows, n, k;
  bool ragged = false;  // rows select within per-row windows (see the heuristic above)
  bool operator==(const PlanKey& o) const {
    return dtype == o.dtype && rows == o.rows && n == o.n && k == o.k && ragged == o.ragged;
  }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& key) const {
    size_t h = std::hash<int64_t>()(key.rows);
    h = h * 1000003u ^ std::hash<int64_t>()(key.n);
    h = h * 1000003u ^ std::hash<int64_t>()(key.k);
    h = h * 1000003u ^ size_t(key.ragged);
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

// The scratch of CUB's segmented sort of `rows` rows of `k` composites of keys of `key_bytes`
// bytes: the one size that only nvcc's side can tell (winner_sort_temp_bytes in
// topk_launch.hpp; tests pass a stand-in).
using WinnerSortBytes = size_t (*)(int key_bytes, int64_t rows, int64_t k);

// Throws MTK_ERROR_INVALID_ARGUMENT for rows longer than kMaxRowLength and for more rows than
// a launch's grid holds.
TopkPlan make_topk_plan(const PlanKey& key, const DeviceLimits& device,
                        WinnerSortBytes winner_sort_bytes);

// The Multi path's scratch regions in a workspace of at least plan.workspace_bytes bytes that
// starts at `scratch` (any alignment).
struct ScratchRegions {
  void* states;
  void* winners;
  void* candidates[2];
  void* sorted_winners;
  void* sort_temp;
};
ScratchRegions carve_scratch(const TopkPlan& plan, void* scratch);

}  // namespace cuda
}  // namespace mtk
