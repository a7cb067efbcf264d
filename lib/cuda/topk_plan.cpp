// make_topk_plan: the shape-class heuristic, the grid and the exact scratch layout, which
// carve_scratch alone turns into addresses (see topk_plan.hpp).
#include "cuda/topk_plan.hpp"

#include <algorithm>
#include <cmath>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace mtk {
namespace cuda {
namespace {

constexpr int64_t kTargetBlocksPerSm = 8;
constexpr int64_t kMinElementsPerBlock = 2048;
constexpr int64_t kMinCapacity = 16384;
constexpr int64_t kCapacityDivisor = 32;  // candidate buffer: 1/32 of the row, at least 16384
// ... and at least 8 k: a sampled threshold of large k leaves ~1.2 k candidates (k = 4096 of
// 131072: 4880), which a quarter of the buffer must hold for the plan to take the sample.
constexpr int64_t kCapacityPerWinner = 8;
// Below this many input bytes the sample kernel's launch costs more than the read it saves.
constexpr int64_t kSampledMinBytes = int64_t(4) << 20;
constexpr int64_t kWideSampleRowLength = int64_t(1) << 22;
constexpr int64_t kMaxSegmentPrefetch = int64_t(1) << 20;  // bytes asked into L2 per segment

// A sample of S elements of a row of n ranks k at k*S/n; the threshold is the sample's r-th
// largest key with r = ceil(m + 4 sqrt(m) + 8), m = k*S/n. The row's elements at or above it
// number about r*n/S, spread like a Gamma(r) variable (sd ~ sqrt(r) in units of n/S), so k stays
// more than 4 sd below that count (the 8 keeps misses negligible when m is tiny).
struct SampleChoice {
  int per_thread;
  double rank, expected_candidates, candidates_sd;
};

SampleChoice sample_choice(int per_thread, int64_t n, int64_t k) {
  const double samples = double(kSampleThreads) * per_thread;
  const double k_in_sample = double(k) * samples / double(n);
  const double rank = std::ceil(k_in_sample + 4 * std::sqrt(k_in_sample) + 8);
  return {per_thread, rank, rank * double(n) / samples, std::sqrt(rank) * double(n) / samples};
}

// Chooses the sample size and rank (see SampleChoice), or leaves the plan unsampled. The plan
// takes the sampled path only when the expected candidates fill at most a quarter of the
// buffer. Huge rows take the wide sample, and so does large k, whose narrow sample's threshold
// leaves too many candidates (k = 2048 of 262144: ~5100, against ~2900 after the wide one;
// unsampled, the input is read twice), or more than the threshold pass's threads stage (past
// two thirds of their slots, one thread in sixteen spills to global atomics: k = 4096 of 262144
// on 256 rows left ~15.8 a thread for 12 slots, and the pass took 141 us against 75 for
// k = 2048; the wide sample leaves ~10.3); others the narrow one, unless the wide one would let
// the finish kernel rank every row's candidates by counting (at most a block of them, 6 sd of
// margin) where the narrow one would not: 150k-long sampling rows with k = 50 leave ~890
// candidates after 2048 samples, whose radix rounds cost the finish 13 us, and ~210 after 16384,
// for ~4 us more sampling.
//
// Ragged rows are planned by their full length; the sample kernel thresholds each window at a
// rank of its own, or whole where it is short (window_threshold). Their parts could not share
// one rank, so they never split the sample.
void choose_sampling(TopkPlan& plan, int64_t rows, int64_t n, int64_t k, int64_t element_bytes,
                     int sm_count, int64_t l2_bytes, bool ragged) {
  // In floating point: rows of a broadcast input (stride 0) may hold more bytes than int64.
  if (double(rows) * double(n) * double(element_bytes) < double(kSampledMinBytes)) return;
  auto counting_fits = [](const SampleChoice& c) {
    return c.expected_candidates + 6 * c.candidates_sd <= double(kBlockThreads);
  };
  // The threshold pass is the one full read: one wave of long-lived blocks (four loads in
  // flight each already cover the memory latency) pays the per-block setup and the row-state
  // round trips once per SM slot instead of a wave and a half of short blocks.
  const int64_t one_wave = int64_t(threshold_blocks_per_sm(int(element_bytes))) *
                           std::max(sm_count, 1) / rows;
  const int64_t threshold_blocks =
      std::max<int64_t>(1, std::min<int64_t>(plan.blocks_per_row, one_wave));
  const double stage_slots =
      element_bytes == 8
          ? kThresholdSlotsPerThread<kLargeThresholdStageBytes, sizeof(Composite<uint64_t>)>
          : kThresholdSlotsPerThread<kLargeThresholdStageBytes, sizeof(Composite<uint32_t>)>;
  auto crowds_stage = [&](const SampleChoice& c) {
    return c.expected_candidates >
           double(threshold_blocks) * kMultiThreads * stage_slots * 2.0 / 3.0;
  };
  const double wide_samples = double(kSampleThreads) * kWideSamplesPerThread;
  SampleChoice choice = sample_choice(kNarrowSamplesPerThread, n, k);
  if (n >= 2 * wide_samples) {
    const SampleChoice wide = sample_choice(kWideSamplesPerThread, n, k);
    const bool narrow_overflows = choice.expected_candidates > double(plan.capacity) / 4;
    if (n >= kWideSampleRowLength || narrow_overflows || crowds_stage(choice) ||
        (!counting_fits(choice) && counting_fits(wide))) {
      choice = wide;
    }
  }
  const double samples = double(kSampleThreads) * choice.per_thread;
  const double expected_candidates = choice.expected_candidates;
  if (double(n) < 2 * samples || choice.rank > samples / 4 ||
      expected_candidates > double(plan.capacity) / 4) {
    return;
  }
  plan.sample_rank = uint32_t(choice.rank);
  plan.samples_per_thread = choice.per_thread;
  // A wide sample ranked by one block takes ~9 us on one SM; where the rows leave SMs idle and
  // the parts' tops fit the threshold blocks' merge, its blocks split it.
  plan.split_sample = !ragged && choice.per_thread == kWideSamplesPerThread &&
                      rows * kSplitSampleParts <= int64_t(sm_count) &&
                      plan.sample_rank <= kSplitSampleMaxRank;
  // Key-prefix bins span 512 units of the sample's keys above the threshold and take 2047: they
  // hold the k-th with room to spare when at least 4 of the k fall in the sample, or when keys
  // have few values (8 and 16 bits); the finish kernel's radix rounds then start from its
  // bucket, worth it above a block of candidates (up to a block it ranks them by counting). A
  // k-th far above the sample's largest key (k = 100 of 2^28 sits ~16000 ranks above it) needs
  // the composite's top digits instead, which any spread fits. Below a quarter of what the
  // finish takes alone, overshooting it is as unlikely as a miss, so no histogram at all.
  const double k_in_sample = double(k) * samples / double(n);
  if ((element_bytes <= 2 || k_in_sample >= 4) && expected_candidates > double(kBlockThreads)) {
    plan.candidate_histogram = CandidateHistogram::KeyPrefix;
  } else if (expected_candidates > double(kDirectFinishCandidates) / 4) {
    plan.candidate_histogram = CandidateHistogram::TopDigit;
  }
  plan.blocks_per_row = int(threshold_blocks);
  // Four slots a thread in the small stage (two for 64-bit keys): with two candidates a thread
  // expected, one thread in twenty spills; a huge row's ~1.1 (2^28, k = 100) one in 190.
  plan.large_threshold_stage =
      expected_candidates > 2.0 * double(plan.blocks_per_row) * double(kMultiThreads);
  // A quarter of the L2 for the segments' heads (prefetch_segment_head): measured against half,
  // a quarter gained 1-4% on every sampled shape; half lost 1% on 256 rows of 150k (the heads
  // pushed out lines still in use) and gained less elsewhere.
  const int64_t per_segment = l2_bytes / 4 / (rows * plan.blocks_per_row) / 16 * 16;
  plan.l2_prefetch_bytes = uint32_t(std::clamp<int64_t>(per_segment, 0, kMaxSegmentPrefetch));
}

size_t align_up(size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// Keys of 8 bytes rank by 128-bit composites, narrower ones by 64-bit composites.
size_t composite_bytes(int key_bytes) {
  return key_bytes == 8 ? sizeof(Composite<uint64_t>) : sizeof(Composite<uint32_t>);
}

size_t row_state_bytes(int key_bytes) {
  return key_bytes == 8 ? sizeof(RowState<Composite<uint64_t>>)
                        : sizeof(RowState<Composite<uint32_t>>);
}

// The Multi path's regions, one after another, each on a kScratchAlignment boundary.
ScratchLayout multi_scratch_layout(int64_t rows, int64_t k, int64_t capacity,
                                   WinnerSort winner_sort, int key_bytes,
                                   WinnerSortBytes winner_sort_bytes, size_t& total) {
  const size_t comp = composite_bytes(key_bytes);
  ScratchLayout layout;
  size_t offset = 0;
  layout.states = offset;
  offset += align_up(size_t(rows) * row_state_bytes(key_bytes));
  layout.winners = offset;
  offset += align_up(size_t(rows) * size_t(k) * comp);
  for (size_t& buffer : layout.candidates) {
    buffer = offset;
    offset += align_up(size_t(rows) * size_t(capacity) * comp);
  }
  if (winner_sort == WinnerSort::Segmented) {
    layout.sorted_winners = offset;
    offset += align_up(size_t(rows) * size_t(k) * comp);
    layout.sort_temp = offset;
    layout.sort_temp_bytes = winner_sort_bytes(key_bytes, rows, k);
    offset += align_up(layout.sort_temp_bytes);
  }
  total = offset;
  return layout;
}

// The blocks of the plan's widest launch (see TopkPlan::blocks); rows > 0.
int64_t widest_grid(const TopkPlan& plan, int64_t rows) {
  switch (plan.path) {
    case TopkPath::Warp: return (rows + kWarpPathRowsPerBlock - 1) / kWarpPathRowsPerBlock;
    case TopkPath::Block: return rows;
    case TopkPath::Cluster: return rows * kClusterBlocks;
    case TopkPath::Multi: break;
  }
  return rows * plan.blocks_per_row;
}

// The path and its parameters, without the grid and scratch.
TopkPlan choose_path(const PlanKey& key, const DeviceLimits& device) {
  const int64_t rows = key.rows, n = key.n, k = key.k;
  const int sm_count = device.sm_count;
  TopkPlan plan;
  if (n <= kWarpPathMaxRowLength && k <= kWarpPathMaxK && !key.ragged) {
    plan.path = TopkPath::Warp;
    plan.warp_items = 1;
    while (int64_t(plan.warp_items) * 32 < n) plan.warp_items *= 2;
    return plan;
  }
  const int64_t target_blocks = kTargetBlocksPerSm * std::max(sm_count, 1);
  const int64_t by_occupancy = (target_blocks + rows - 1) / rows;
  const int64_t by_length = (n + kMinElementsPerBlock - 1) / kMinElementsPerBlock;
  const int64_t blocks_per_row = std::max<int64_t>(1, std::min(by_occupancy, by_length));
  const int key_bytes = int(dtype_info(key.dtype)->size);
  if (blocks_per_row == 1 && k <= kSortCapacity) {
    plan.path = TopkPath::Block;
    // Whole 16-byte words: the sweeps over the cache read one a lane (sweep_cached_share).
    const int64_t cache_bytes = (n * key_bytes + 15) / 16 * 16;
    if (cache_bytes <= kBlockKeyCacheMaxBytes) plan.block_key_cache_bytes = cache_bytes;
    return plan;
  }
  const int64_t cluster_slots = int64_t(kClusterBlocks) * kBlockThreads;
  if (rows <= device.cluster_rows && key_bytes <= 4 && k <= kSortCapacity &&
      n <= cluster_slots * kClusterMaxItems && !key.ragged) {
    plan.path = TopkPath::Cluster;
    plan.cluster_items = n <= cluster_slots * kClusterSmallItems ? kClusterSmallItems
                                                                   : kClusterMaxItems;
    return plan;
  }
  plan.path = TopkPath::Multi;
  plan.blocks_per_row = int(blocks_per_row);
  plan.capacity =
      std::min(n, std::max({kMinCapacity, n / kCapacityDivisor, kCapacityPerWinner * k}));
  const int64_t sort_bytes = row_sort_bytes(k, int64_t(composite_bytes(key_bytes)));
  if (k > kSortCapacity && k <= kRowRadixSortMaxK && key_bytes <= 4) {
    plan.winner_sort = WinnerSort::RowRadix;
  } else if (k > kSortCapacity) {
    plan.winner_sort =
        sort_bytes <= kRowSortMaxBytes ? WinnerSort::RowBlocks : WinnerSort::Segmented;
  }
  if (plan.winner_sort == WinnerSort::RowBlocks) plan.row_sort_bytes = sort_bytes;
  choose_sampling(plan, rows, n, k, key_bytes, sm_count, device.l2_bytes, key.ragged);
  // Key-prefix bins let the finish rank k past its sort within them, as it does up to its sort
  // (finish_placing_kernel); the radix sort then takes only the rows that could not. 16-bit
  // keys crowd whole keys with ties, which the finish splits by index (TiedKeyBins); 8-bit
  // keys crowd even those (a key of 256 may hold all k winners), so they keep the sort.
  if (plan.winner_sort == WinnerSort::RowRadix && key_bytes >= 2 &&
      plan.candidate_histogram == CandidateHistogram::KeyPrefix) {
    plan.finish_placement_bytes = k * int64_t(composite_bytes(key_bytes));
  }
  return plan;
}

}  // namespace

TopkPlan make_topk_plan(const PlanKey& key, const DeviceLimits& device,
                        WinnerSortBytes winner_sort_bytes) {
  if (key.n > kMaxRowLength) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "rows of ", key.n,
         " elements exceed the CUDA backend's limit of ", kMaxRowLength, " elements per row");
  }
  TopkPlan plan = choose_path(key, device);
  plan.blocks = widest_grid(plan, key.rows);
  if (plan.blocks > kMaxGridBlocks) {
    fail(MTK_ERROR_INVALID_ARGUMENT, key.rows, " rows take ", plan.blocks,
         " blocks of one launch, more than the CUDA backend's limit of ", kMaxGridBlocks);
  }
  if (plan.path != TopkPath::Multi) return plan;
  size_t layout_bytes = 0;
  plan.scratch = multi_scratch_layout(key.rows, key.k, plan.capacity, plan.winner_sort,
                                      int(dtype_info(key.dtype)->size), winner_sort_bytes,
                                      layout_bytes);
  // Caller workspaces may start anywhere: room to align the layout's base (see kScratchAlignment).
  plan.workspace_bytes = layout_bytes + kScratchAlignment - 1;
  return plan;
}

ScratchRegions carve_scratch(const TopkPlan& plan, void* scratch) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(scratch);
  char* base = static_cast<char*>(scratch) +
               ((kScratchAlignment - address % kScratchAlignment) % kScratchAlignment);
  const ScratchLayout& layout = plan.scratch;
  return ScratchRegions{base + layout.states,
                        base + layout.winners,
                        {base + layout.candidates[0], base + layout.candidates[1]},
                        base + layout.sorted_winners,
                        base + layout.sort_temp};
}

}  // namespace cuda
}  // namespace mtk
