// Unit tests of the CUDA plan (lib/cuda/topk_plan.cpp), host C++ only: the path each shape
// class takes (warp, block, cluster, multi-block, sampled threshold and its variants), the grid,
// the scratch layout and its size, carve_scratch on unaligned workspaces, the row-length and
// grid limits, and ragged rows' plans (block or multi-block, never a split sample). Expected values
// are worked out by hand from the rules in topk_plan.hpp for an H200-like device (132 SMs).
#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

#include "core/error.hpp"
#include "cuda/topk_config.hpp"
#include "cuda/topk_plan.hpp"
#include "../host_expect.hpp"

namespace {

using mtk::cuda::CandidateHistogram;
using mtk::cuda::Composite;
using mtk::cuda::DeviceLimits;
using mtk::cuda::kScratchAlignment;
using mtk::cuda::PlanKey;
using mtk::cuda::RowState;
using mtk::cuda::ScratchRegions;
using mtk::cuda::TopkPath;
using mtk::cuda::TopkPlan;
using mtk::cuda::WinnerSort;

constexpr int kSms = 132;
constexpr int64_t kL2Bytes = 50 << 20;
constexpr int kClusterRows = 8;
const DeviceLimits kH200{kSms, kL2Bytes, kClusterRows};

// Stands in for CUB's sizing: a size no layout would produce by accident.
size_t fake_winner_sort_bytes(int key_bytes, int64_t rows, int64_t k) {
  return size_t(1000 + 3 * key_bytes * k + 7 * rows);
}

TopkPlan plan(mtk_dtype dtype, int64_t rows, int64_t n, int64_t k,
              const DeviceLimits& device = kH200) {
  return mtk::cuda::make_topk_plan(PlanKey{dtype, rows, n, k}, device, fake_winner_sort_bytes);
}

TopkPlan ragged_plan(mtk_dtype dtype, int64_t rows, int64_t n, int64_t k) {
  return mtk::cuda::make_topk_plan(PlanKey{dtype, rows, n, k, true}, kH200,
                                   fake_winner_sort_bytes);
}

// Returns the status a call throws, or MTK_SUCCESS.
mtk_status status_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const mtk::Error& e) {
    return e.status();
  }
  return MTK_SUCCESS;
}

const mtk_dtype kAllDtypes[] = {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_FLOAT64, MTK_INT8,
                                MTK_UINT8,   MTK_INT16,   MTK_INT32,    MTK_INT64};

int key_bytes(mtk_dtype dtype) {
  switch (dtype) {
    case MTK_INT8: case MTK_UINT8: return 1;
    case MTK_FLOAT16: case MTK_BFLOAT16: case MTK_INT16: return 2;
    case MTK_FLOAT64: case MTK_INT64: return 8;
    default: return 4;
  }
}

size_t round_up(size_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

bool is_scratchless(const TopkPlan& p) { return p.workspace_bytes == 0; }

void test_warp_path() {
  for (mtk_dtype dtype : kAllDtypes) {
    for (int64_t n : {1, 2, 31, 32, 33, 64, 100, 128, 256, 257, 512, 1000, 1024}) {
      for (int64_t k : {int64_t(1), std::min<int64_t>(n, 8), std::min<int64_t>(n, 32)}) {
        const TopkPlan p = plan(dtype, 4097, n, k);
        EXPECT(p.path == TopkPath::Warp);
        // The fewest elements a lane that cover the row, a power of two.
        EXPECT((p.warp_items & (p.warp_items - 1)) == 0);
        EXPECT(int64_t(p.warp_items) * 32 >= n);
        EXPECT(p.warp_items == 1 || int64_t(p.warp_items) * 16 < n);
        EXPECT(p.blocks == 1025);  // four rows a block
        EXPECT(is_scratchless(p));
      }
    }
  }
  EXPECT(plan(MTK_FLOAT32, 1, 1024, 32).warp_items == 32);
  // One past either limit leaves the warp path.
  EXPECT(plan(MTK_FLOAT32, 4096, 1025, 8).path != TopkPath::Warp);
  EXPECT(plan(MTK_FLOAT32, 4096, 1024, 33).path != TopkPath::Warp);
}

void test_block_path() {
  // Enough rows to fill the GPU with a block each (8 blocks an SM: 1056 rows).
  for (mtk_dtype dtype : kAllDtypes) {
    const TopkPlan p = plan(dtype, 4096, 4096, 64);
    EXPECT(p.path == TopkPath::Block);
    EXPECT(p.blocks == 4096);
    EXPECT(is_scratchless(p));
  }
  EXPECT(plan(MTK_FLOAT32, 1056, 100000, 2048).path == TopkPath::Block);
  // Rows too short to split (at most 2048 elements), however few.
  EXPECT(plan(MTK_BFLOAT16, 1, 2048, 100).path == TopkPath::Block);
  EXPECT(plan(MTK_BFLOAT16, 1, 2049, 100).path != TopkPath::Block);
  // One row of 1025 with k = 1 is past the warp path's length, not the block kernel's.
  EXPECT(plan(MTK_INT8, 3, 1025, 1).path == TopkPath::Block);
  // k past the finish's shared-memory sort takes the multi-block pipeline and a block a row to
  // sort the winners.
  const TopkPlan large_k = plan(MTK_FLOAT32, 4096, 4096, 2049);
  EXPECT(large_k.path == TopkPath::Multi);
  EXPECT(large_k.winner_sort == WinnerSort::RowRadix);
}

void test_cluster_path() {
  // A few rows that would take the multi-block pipeline, of keys up to 32 bits.
  for (mtk_dtype dtype : {MTK_FLOAT32, MTK_FLOAT16, MTK_BFLOAT16, MTK_INT8, MTK_UINT8,
                          MTK_INT16, MTK_INT32}) {
    const TopkPlan p = plan(dtype, kClusterRows, 150000, 50);
    EXPECT(p.path == TopkPath::Cluster);
    EXPECT(p.cluster_items == mtk::cuda::kClusterMaxItems);  // past 16 * 512 * 8 = 65536
    EXPECT(p.blocks == kClusterRows * mtk::cuda::kClusterBlocks);
    EXPECT(is_scratchless(p));
  }
  EXPECT(plan(MTK_FLOAT32, 1, 65536, 10).cluster_items == mtk::cuda::kClusterSmallItems);
  EXPECT(plan(MTK_FLOAT32, 1, 65537, 10).cluster_items == mtk::cuda::kClusterMaxItems);
  EXPECT(plan(MTK_FLOAT32, 1, 262144, 2048).path == TopkPath::Cluster);
  // Past the cluster's registers, its co-scheduled rows, 32-bit keys or the sort.
  EXPECT(plan(MTK_FLOAT32, 1, 262145, 10).path == TopkPath::Multi);
  EXPECT(plan(MTK_FLOAT32, kClusterRows + 1, 150000, 50).path == TopkPath::Multi);
  EXPECT(plan(MTK_FLOAT64, 1, 150000, 50).path == TopkPath::Multi);
  EXPECT(plan(MTK_INT64, 1, 150000, 50).path == TopkPath::Multi);
  EXPECT(plan(MTK_FLOAT32, 1, 150000, 2049).path == TopkPath::Multi);
  // A device that runs no clusters (before sm_90).
  EXPECT(plan(MTK_FLOAT32, 1, 150000, 50, DeviceLimits{kSms, kL2Bytes, 0}).path ==
         TopkPath::Multi);
}

// The layout's regions follow one another on kScratchAlignment boundaries, each as large as
// its contents; the workspace adds the slack to align an arbitrary base.
void expect_layout(const TopkPlan& p, mtk_dtype dtype, int64_t rows, int64_t k) {
  const bool wide = key_bytes(dtype) == 8;
  const size_t comp = wide ? 16 : 8;
  const size_t state = wide ? sizeof(RowState<Composite<uint64_t>>)
                            : sizeof(RowState<Composite<uint32_t>>);
  const mtk::cuda::ScratchLayout& s = p.scratch;
  EXPECT(s.states == 0);
  EXPECT(s.winners == round_up(size_t(rows) * state));
  EXPECT(s.candidates[0] == s.winners + round_up(size_t(rows) * size_t(k) * comp));
  const size_t buffer = round_up(size_t(rows) * size_t(p.capacity) * comp);
  EXPECT(s.candidates[1] == s.candidates[0] + buffer);
  size_t end = s.candidates[1] + buffer;
  if (p.winner_sort != WinnerSort::Segmented) {
    EXPECT(s.sort_temp_bytes == 0);
  } else {
    EXPECT(s.sorted_winners == end);
    end += round_up(size_t(rows) * size_t(k) * comp);
    EXPECT(s.sort_temp == end);
    EXPECT(s.sort_temp_bytes == fake_winner_sort_bytes(key_bytes(dtype), rows, k));
    end += round_up(s.sort_temp_bytes);
  }
  EXPECT(p.workspace_bytes == end + kScratchAlignment - 1);
}

void test_multi_path_unsampled() {
  // 400 KB: below the bytes where a sample pays. k past the finish's sort: a block per row
  // radix-sorts the winners (keys up to 32 bits, k up to 4096).
  const TopkPlan small = plan(MTK_FLOAT32, 1, 100000, 3000);
  EXPECT(small.path == TopkPath::Multi);
  EXPECT(small.sample_rank == 0);
  EXPECT(small.blocks_per_row == 49);  // ceil(100000 / 2048) < 8 * 132
  EXPECT(small.blocks == 49);
  EXPECT(small.capacity == 24000);     // 8 k
  EXPECT(small.winner_sort == WinnerSort::RowRadix);
  EXPECT(small.row_sort_bytes == 0);
  EXPECT(small.finish_placement_bytes == 0);  // unsampled: no key-prefix bins to rank within
  expect_layout(small, MTK_FLOAT32, 1, 3000);
  // Sampled with key-prefix bins (256 rows of 131072, k = 4096): the finish ranks the winners
  // within them, k composites of its shared memory.
  const TopkPlan placed = plan(MTK_FLOAT32, 256, 131072, 4096);
  EXPECT(placed.winner_sort == WinnerSort::RowRadix);
  EXPECT(placed.sample_rank > 0);
  EXPECT(placed.candidate_histogram == CandidateHistogram::KeyPrefix);
  EXPECT(placed.finish_placement_bytes == 4096 * 8);
  // 16-bit keys too (the finish splits their crowded keys by index), not 8-bit ones.
  const TopkPlan ties = plan(MTK_BFLOAT16, 64, 1048576, 4096);
  EXPECT(ties.candidate_histogram == CandidateHistogram::KeyPrefix);
  EXPECT(ties.finish_placement_bytes == 4096 * 8);
  const TopkPlan bytes = plan(MTK_INT8, 64, 1048576, 4096);
  EXPECT(bytes.winner_sort == WinnerSort::RowRadix);
  EXPECT(bytes.candidate_histogram == CandidateHistogram::KeyPrefix);
  EXPECT(bytes.finish_placement_bytes == 0);
  EXPECT(plan(MTK_INT8, 1, 100000, 4096).winner_sort == WinnerSort::RowRadix);
  // Past 4096, or 64-bit keys: a bitonic sort in dynamic shared memory, 64 KB for 5000
  // composites of 64 bits or 3000 of 128.
  const TopkPlan bitonic = plan(MTK_FLOAT32, 1, 100000, 5000);
  EXPECT(bitonic.winner_sort == WinnerSort::RowBlocks);
  EXPECT(bitonic.row_sort_bytes == 8192 * 8);
  const TopkPlan wide_keys = plan(MTK_FLOAT64, 1, 100000, 3000);
  EXPECT(wide_keys.winner_sort == WinnerSort::RowBlocks);
  EXPECT(wide_keys.row_sort_bytes == 4096 * 16);
  expect_layout(wide_keys, MTK_FLOAT64, 1, 3000);

  // k past what a block sorts (128 KB: 16384 64-bit composites, 8192 128-bit ones): CUB's
  // segmented sort, its output and scratch in the layout.
  const TopkPlan segmented = plan(MTK_FLOAT32, 1, 100000, 16385);
  EXPECT(segmented.winner_sort == WinnerSort::Segmented && segmented.sample_rank == 0);
  EXPECT(segmented.row_sort_bytes == 0);
  EXPECT(segmented.capacity == 100000);
  expect_layout(segmented, MTK_FLOAT32, 1, 16385);
  EXPECT(plan(MTK_FLOAT32, 1, 100000, 16384).winner_sort == WinnerSort::RowBlocks);
  EXPECT(plan(MTK_FLOAT64, 1, 100000, 8192).winner_sort == WinnerSort::RowBlocks);
  EXPECT(plan(MTK_FLOAT64, 1, 100000, 8193).winner_sort == WinnerSort::Segmented);

  // 64-bit keys: 128-bit composites and their row state (narrower keys past the cluster rows).
  for (mtk_dtype dtype : {MTK_FLOAT64, MTK_INT64, MTK_INT8, MTK_BFLOAT16}) {
    const TopkPlan p = plan(dtype, key_bytes(dtype) == 8 ? 3 : kClusterRows + 1, 20000, 100);
    EXPECT(p.path == TopkPath::Multi);
    EXPECT(p.sample_rank == 0);
    EXPECT(p.capacity == 16384);
    EXPECT(p.blocks_per_row == 10);  // ceil(20000 / 2048)
    EXPECT(p.winner_sort == WinnerSort::Finish);
    expect_layout(p, dtype, key_bytes(dtype) == 8 ? 3 : kClusterRows + 1, 100);
  }
  // A candidate buffer never holds more than the row.
  EXPECT(plan(MTK_FLOAT64, 9, 5000, 3000).capacity == 5000);
}

void test_sampled_threshold() {
  // 256 rows of 151936 bf16, k = 50: the wide sample (16384) leaves ~213 candidates, which the
  // finish ranks by counting; the narrow one's ~890 would not fit a block.
  const TopkPlan vocab = plan(MTK_BFLOAT16, 256, 151936, 50);
  EXPECT(vocab.path == TopkPath::Multi);
  EXPECT(vocab.samples_per_thread == mtk::cuda::kWideSamplesPerThread);
  EXPECT(vocab.sample_rank == 23);  // ceil(m + 4 sqrt(m) + 8), m = 50 * 16384 / 151936
  EXPECT(!vocab.split_sample);      // 256 rows fill the GPU
  EXPECT(vocab.candidate_histogram == CandidateHistogram::None);
  EXPECT(!vocab.large_threshold_stage);
  EXPECT(vocab.blocks_per_row == 2);  // one wave: 4 blocks an SM over 256 rows
  EXPECT(vocab.blocks == 512);
  expect_layout(vocab, MTK_BFLOAT16, 256, 50);

  // 2 rows of 2^20 f32, k = 4096: the narrow sample's expected 14336 candidates would exceed a
  // quarter of the 32768-slot buffer, the wide one's 6656 (rank 104) do not.
  const TopkPlan large_k = plan(MTK_FLOAT32, 2, int64_t(1) << 20, 4096);
  EXPECT(large_k.path == TopkPath::Multi);
  EXPECT(large_k.samples_per_thread == mtk::cuda::kWideSamplesPerThread);
  EXPECT(large_k.sample_rank == 104);
  EXPECT(!large_k.split_sample);  // rank past kSplitSampleMaxRank
  EXPECT(large_k.candidate_histogram == CandidateHistogram::KeyPrefix);
  EXPECT(large_k.blocks_per_row == 264);  // one wave: 4 blocks an SM over 2 rows
  EXPECT(large_k.winner_sort == WinnerSort::RowRadix);
  expect_layout(large_k, MTK_FLOAT32, 2, 4096);

  // 256 rows of 262144 f32, k = 4096: the narrow sample's ~8064 candidates a row fit the buffer
  // but not the two threshold blocks' stages (15.8 a thread for 12 slots); the wide sample's
  // ~5248 (rank 328) leave 10.3 a thread.
  const TopkPlan crowded = plan(MTK_FLOAT32, 256, 262144, 4096);
  EXPECT(crowded.blocks_per_row == 2);
  EXPECT(crowded.samples_per_thread == mtk::cuda::kWideSamplesPerThread);
  EXPECT(crowded.sample_rank == 328);
  EXPECT(crowded.large_threshold_stage);
  // 256 rows of 131072, k = 4096: 13 a thread after the narrow sample, 9.5 after the wide one
  // (rank 611); k = 2048 leaves 7.9 after the narrow one, which it keeps (rank 63).
  EXPECT(plan(MTK_FLOAT32, 256, 131072, 4096).sample_rank == 611);
  const TopkPlan roomy = plan(MTK_FLOAT32, 256, 131072, 2048);
  EXPECT(roomy.samples_per_thread == mtk::cuda::kNarrowSamplesPerThread);
  EXPECT(roomy.sample_rank == 63);

  // One bf16 row of 2^26, k = 100: the wide sample split over 16 blocks, key-prefix bins (keys
  // of 16 bits), one wave of 4 * 132 threshold blocks.
  const TopkPlan huge = plan(MTK_BFLOAT16, 1, int64_t(1) << 26, 100);
  EXPECT(huge.path == TopkPath::Multi);
  EXPECT(huge.samples_per_thread == mtk::cuda::kWideSamplesPerThread);
  EXPECT(huge.sample_rank == 9);
  EXPECT(huge.split_sample);
  EXPECT(huge.candidate_histogram == CandidateHistogram::KeyPrefix);
  EXPECT(huge.blocks_per_row == 528);
  EXPECT(huge.blocks == 528);
  EXPECT(!huge.large_threshold_stage);  // 36864 expected, under 2 a thread
  EXPECT(huge.capacity == int64_t(1) << 21);
  EXPECT(huge.l2_prefetch_bytes == 24816);  // a quarter of the L2 over 528 segments
  expect_layout(huge, MTK_BFLOAT16, 1, 100);

  // The same row in f32: k sits far above the sample's largest key, so the top digit.
  const TopkPlan huge_f32 = plan(MTK_FLOAT32, 1, int64_t(1) << 26, 100);
  EXPECT(huge_f32.candidate_histogram == CandidateHistogram::TopDigit);
  // 1-byte elements: two threshold blocks an SM.
  EXPECT(plan(MTK_INT8, 1, int64_t(1) << 26, 100).blocks_per_row == 264);

  // Many candidates a thread: the large stage.
  const TopkPlan many = plan(MTK_FLOAT32, 256, 151936, 1024);
  EXPECT(many.sample_rank > 0);
  EXPECT(many.large_threshold_stage);

  // The narrow sample where the wide one would not let the finish count either: 64 rows of
  // 300000, k = 1024 (~3800 candidates expected, ~1700 from the wide sample).
  const TopkPlan narrow = plan(MTK_FLOAT32, 64, 300000, 1024);
  EXPECT(narrow.sample_rank > 0);
  EXPECT(narrow.samples_per_thread == mtk::cuda::kNarrowSamplesPerThread);
  EXPECT(narrow.sample_rank == 26);
  // k = 1 of the same rows: the wide sample leaves a block's worth (~165), the narrow ~1300.
  EXPECT(plan(MTK_FLOAT32, 64, 300000, 1).samples_per_thread == mtk::cuda::kWideSamplesPerThread);

  // Every sampled plan: rank within a quarter of the sample, prefetch in 16-byte units up to a
  // megabyte, a split only of the wide sample with a rank its parts' tops cover.
  for (mtk_dtype dtype : kAllDtypes) {
    for (int64_t rows : {1, 4, 64, 256}) {
      for (int64_t n : {int64_t(150000), int64_t(1) << 20, int64_t(1) << 24}) {
        for (int64_t k : {1, 50, 1024}) {
          const TopkPlan p = plan(dtype, rows, n, k);
          if (p.path != TopkPath::Multi) continue;
          EXPECT(int64_t(p.blocks) == rows * p.blocks_per_row);
          expect_layout(p, dtype, rows, k);
          if (p.sample_rank == 0) continue;
          const int64_t samples = int64_t(mtk::cuda::kSampleThreads) * p.samples_per_thread;
          EXPECT(int64_t(p.sample_rank) * 4 <= samples);
          EXPECT(p.l2_prefetch_bytes % 16 == 0 && p.l2_prefetch_bytes <= (1u << 20));
          if (p.split_sample) {
            EXPECT(p.samples_per_thread == mtk::cuda::kWideSamplesPerThread);
            EXPECT(p.sample_rank <= mtk::cuda::kSplitSampleMaxRank);
            EXPECT(rows * mtk::cuda::kSplitSampleParts <= kSms);
          }
          const int64_t one_wave =
              mtk::cuda::threshold_blocks_per_sm(key_bytes(dtype)) * int64_t(kSms) / rows;
          EXPECT(p.blocks_per_row <= std::max<int64_t>(1, one_wave));
        }
      }
    }
  }
  // Under 4 MB of input no sample pays.
  EXPECT(plan(MTK_FLOAT32, 1, (int64_t(1) << 20) - 1, 10).sample_rank == 0);
  EXPECT(plan(MTK_FLOAT32, 1, int64_t(1) << 20, 10).sample_rank > 0);
}

void test_carve_scratch() {
  const TopkPlan p = plan(MTK_FLOAT64, 5, 500000, 9000);
  EXPECT(p.path == TopkPath::Multi && p.winner_sort == WinnerSort::Segmented);
  // Workspaces at every offset of an alignment unit: every region aligned, inside the
  // workspace, at its layout offset from the aligned base.
  for (uintptr_t offset = 0; offset < kScratchAlignment; offset += 17) {
    const uintptr_t start = (uintptr_t(1) << 32) + offset;
    const ScratchRegions r = mtk::cuda::carve_scratch(p, reinterpret_cast<void*>(start));
    const uintptr_t base = reinterpret_cast<uintptr_t>(r.states);
    EXPECT(base % kScratchAlignment == 0 && base >= start && base - start < kScratchAlignment);
    const void* regions[] = {r.winners, r.candidates[0], r.candidates[1], r.sorted_winners,
                             r.sort_temp};
    const size_t offsets[] = {p.scratch.winners, p.scratch.candidates[0],
                              p.scratch.candidates[1], p.scratch.sorted_winners,
                              p.scratch.sort_temp};
    for (int i = 0; i < 5; ++i) {
      EXPECT(reinterpret_cast<uintptr_t>(regions[i]) == base + offsets[i]);
    }
    const uintptr_t sort_end = reinterpret_cast<uintptr_t>(r.sort_temp) + p.scratch.sort_temp_bytes;
    EXPECT(sort_end <= start + p.workspace_bytes);
  }
}

void test_limits() {
  // Indices fit a composite's 32 bits, the all-ones index excepted.
  const int64_t longest = int64_t(0xfffffffe);
  EXPECT(status_of([&] { plan(MTK_INT8, 1, longest, 10); }) == MTK_SUCCESS);
  EXPECT(plan(MTK_INT8, 1, longest, 10).path == TopkPath::Multi);
  EXPECT(status_of([&] { plan(MTK_INT8, 1, longest + 1, 10); }) == MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([&] { plan(MTK_FLOAT32, 1, int64_t(1) << 40, 1); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  // A launch's grid: 2^31 - 1 blocks (rows of a broadcast input can ask for more).
  const int64_t most_blocks = int64_t(0x7fffffff);
  EXPECT(plan(MTK_FLOAT32, most_blocks, 4096, 8).blocks == most_blocks);
  EXPECT(status_of([&] { plan(MTK_FLOAT32, most_blocks + 1, 4096, 8); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([&] { plan(MTK_FLOAT32, most_blocks * 4, 64, 8); }) == MTK_SUCCESS);
  EXPECT(status_of([&] { plan(MTK_FLOAT32, most_blocks * 4 + 1, 64, 8); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
  EXPECT(status_of([&] { plan(MTK_FLOAT32, most_blocks + 1, 4096, 3000); }) ==
         MTK_ERROR_INVALID_ARGUMENT);
}

// Ragged rows take the block kernel where a dense call would take the warp kernels, the
// multi-block pipeline where it would take the cluster kernel, and a sampled threshold where a
// dense call would, but never split over blocks (each window has a rank of its own); k may
// exceed n. Their plans are cached apart from the dense ones.
void test_ragged_plans() {
  for (mtk_dtype dtype : kAllDtypes) {
    const TopkPlan short_rows = ragged_plan(dtype, 4097, 1000, 8);
    EXPECT(short_rows.path == TopkPath::Block);
    EXPECT(short_rows.blocks == 4097);
    EXPECT(is_scratchless(short_rows));
  }
  EXPECT(ragged_plan(MTK_FLOAT32, 256, 1000, 2048).path == TopkPath::Block);  // k > n
  EXPECT(ragged_plan(MTK_FLOAT32, 4096, 4096, 2048).path == TopkPath::Block);
  // Prefill rows: a block per row, the row's keys cached in shared memory while they fit.
  const TopkPlan prefill = ragged_plan(MTK_FLOAT32, 8192, 9216, 2048);
  EXPECT(prefill.path == TopkPath::Block && prefill.block_key_cache_bytes == 9216 * 4);
  EXPECT(ragged_plan(MTK_BFLOAT16, 8192, 9216, 2048).block_key_cache_bytes == 9216 * 2);
  EXPECT(ragged_plan(MTK_BFLOAT16, 8192, 9215, 2048).block_key_cache_bytes == 9216 * 2);
  const TopkPlan long_prefill = ragged_plan(MTK_FLOAT32, 8192, 16384, 2048);
  EXPECT(long_prefill.path == TopkPath::Block && long_prefill.block_key_cache_bytes == 0);
  EXPECT(is_scratchless(prefill));
  const TopkPlan few_rows = ragged_plan(MTK_FLOAT32, kClusterRows, 150000, 50);
  EXPECT(few_rows.path == TopkPath::Multi);
  EXPECT(few_rows.sample_rank > 0);
  // 256 rows of 151936 bf16, k = 50: sampled as the dense call is (test_sampled_threshold).
  const TopkPlan vocab = ragged_plan(MTK_BFLOAT16, 256, 151936, 50);
  const TopkPlan dense_vocab = plan(MTK_BFLOAT16, 256, 151936, 50);
  EXPECT(vocab.path == TopkPath::Multi);
  EXPECT(vocab.sample_rank > 0 && vocab.sample_rank == dense_vocab.sample_rank);
  EXPECT(vocab.workspace_bytes == dense_vocab.workspace_bytes);
  // One bf16 row of 2^26, k = 100: the dense call splits its wide sample, a ragged one does not.
  const TopkPlan huge = ragged_plan(MTK_BFLOAT16, 1, int64_t(1) << 26, 100);
  EXPECT(plan(MTK_BFLOAT16, 1, int64_t(1) << 26, 100).split_sample);
  EXPECT(huge.samples_per_thread == mtk::cuda::kWideSamplesPerThread);
  EXPECT(huge.sample_rank > 0 && !huge.split_sample);
  // k past the finish's sort, and past n: the winners (k slots a row) are sorted by a block
  // per row.
  const TopkPlan large_k = ragged_plan(MTK_FLOAT32, 64, 3000, 4096);
  EXPECT(large_k.path == TopkPath::Multi);
  EXPECT(large_k.winner_sort == WinnerSort::RowRadix);
  EXPECT(large_k.capacity == 3000);
  expect_layout(large_k, MTK_FLOAT32, 64, 4096);
  // Dense and ragged keys differ.
  EXPECT(!(PlanKey{MTK_FLOAT32, 1, 2, 1} == PlanKey{MTK_FLOAT32, 1, 2, 1, true}));
  EXPECT(mtk::cuda::PlanKeyHash()(PlanKey{MTK_FLOAT32, 1, 2, 1}) !=
         mtk::cuda::PlanKeyHash()(PlanKey{MTK_FLOAT32, 1, 2, 1, true}));
}

}  // namespace

int main() {
  test_warp_path();
  test_block_path();
  test_cluster_path();
  test_multi_path_unsampled();
  test_sampled_threshold();
  test_carve_scratch();
  test_limits();
  test_ragged_plans();
  if (g_failures != 0) {
    std::printf("%d CUDA plan check(s) failed\n", g_failures);
    return 1;
  }
  std::printf("CUDA plan: all checks passed\n");
  return 0;
}
