// The launch sequence of each plan path, templated on the element type; included only by the
// per-key-width files topk_key*.cu.
#pragma once

#include <algorithm>

#include <cub/device/device_segmented_sort.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include "core/error.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/kernel_launch.cuh"
#include "cuda/topk_block_cached.cuh"
#include "cuda/topk_kernels.cuh"
#include "cuda/topk_launch.hpp"
#include "cuda/topk_plan.hpp"
#include "cuda/topk_sort_rows.cuh"

namespace mtk {
namespace cuda {

// The plan's warp path (topk_config.hpp) is what the warp kernels serve.
static_assert(kWarpPathMaxK == kWarpMaxK, "the warp path's k is the warp kernels' k");
static_assert(kWarpPathMaxRowLength == int64_t(kWarpMaxItems) * 32,
              "the warp path's rows are the warp kernels' rows");
static_assert(kWarpPathRowsPerBlock == kWarpRowsPerBlock, "the warp path's grid is the kernel's");

// Dynamic shared memory a kernel may take without opting in.
constexpr size_t kDefaultDynamicSharedBytes = 48 << 10;

// Where each row's k winners start in the winner buffers: the segmented sort's offsets.
struct RowStart {
  int64_t k;
  __host__ __device__ int64_t operator()(int64_t row) const { return row * k; }
};

using RowStarts = thrust::transform_iterator<RowStart, thrust::counting_iterator<int64_t>>;

inline RowStarts row_starts(int64_t k) {
  return RowStarts(thrust::counting_iterator<int64_t>(0), RowStart{k});
}

// Sorts every row's k winners into descending order, all rows in one CUB call: a sort per row
// took a launch sequence per row (64 rows of k = 4096: 1.1 ms).
template <class Comp>
cudaError_t sort_winners(void* temp, size_t& temp_bytes, const Comp* winners, Comp* sorted,
                         int64_t rows, int64_t k, cudaStream_t stream) {
  const RowStarts starts = row_starts(k);
  return cub::DeviceSegmentedSort::SortKeysDescending(temp, temp_bytes, winners, sorted,
                                                      rows * k, rows, starts, starts + 1, stream);
}

template <class Comp>
size_t winner_sort_temp_bytes_for(int64_t rows, int64_t k) {
  size_t bytes = 0;
  check_cuda(sort_winners<Comp>(nullptr, bytes, nullptr, nullptr, rows, k, nullptr),
             "sizing the winner sort");
  return bytes;
}

constexpr const char* kLaunching = "launching a top-k kernel";

template <int Items, class T>
void launch_warp_rows(const TopkProblem& p, const TopkPlan& plan, cudaStream_t stream) {
  const RowGeometry& g = p.geometry;
  const T* input = static_cast<const T*>(p.input);
  const bool index64 = p.index_dtype == MTK_INT64;
  // dim-0 inputs (rows adjacent in memory, their elements strided) go through shared-memory
  // tiles of kTileRows rows, where the tile fits.
  if constexpr (kTileKernelFits<T, Items>) {
    const size_t tile = tile_bytes<T>(g.n);
    if (g.batch_ndim == 1 && g.input_batch_strides[0] == 1 && g.input_stride != 1 &&
        tile <= kTileMaxBytes) {
      const int64_t blocks = (g.rows + kTileRows - 1) / kTileRows;
      launch_overlapped<warp_topk_tile_kernel<T, Items>>(unsigned(blocks), kTileThreads, tile,
                                                         stream, kLaunching, g, input, p.values,
                                                         p.indices, index64, p.largest);
      return;
    }
  }
  const bool vector_rows = rows_are_whole_vectors<T, Items>(g, input);
  const unsigned blocks = unsigned(plan.blocks);
  if (vector_rows) {
    launch_overlapped<warp_topk_kernel<T, Items, true>>(blocks, kWarpRowThreads, 0, stream,
                                                        kLaunching, g, input, p.values,
                                                        p.indices, index64, p.largest);
  } else {
    launch_overlapped<warp_topk_kernel<T, Items, false>>(blocks, kWarpRowThreads, 0, stream,
                                                         kLaunching, g, input, p.values,
                                                         p.indices, index64, p.largest);
  }
}

template <class T>
void launch_topk(const TopkProblem& p, const RaggedRows& ragged, const TopkPlan& plan,
                 void* scratch, cudaStream_t stream) {
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  const RowGeometry& g = p.geometry;
  const T* input = static_cast<const T*>(p.input);
  const bool index64 = p.index_dtype == MTK_INT64;
  // The warp and cluster kernels know no windows (the plan keeps ragged rows from them).
  if (ragged.is_ragged() && (plan.path == TopkPath::Warp || plan.path == TopkPath::Cluster)) {
    fail(MTK_ERROR_INTERNAL, "a ragged call planned for the warp or cluster kernels");
  }

  switch (plan.path) {
    case TopkPath::Warp:
      switch (plan.warp_items) {
        case 1: launch_warp_rows<1, T>(p, plan, stream); break;
        case 2: launch_warp_rows<2, T>(p, plan, stream); break;
        case 4: launch_warp_rows<4, T>(p, plan, stream); break;
        case 8: launch_warp_rows<8, T>(p, plan, stream); break;
        case 16: launch_warp_rows<16, T>(p, plan, stream); break;
        case 32: launch_warp_rows<32, T>(p, plan, stream); break;
        default: fail(MTK_ERROR_INTERNAL, "warp plan with ", plan.warp_items, " items per lane");
      }
      break;
    case TopkPath::Block:
      if (plan.block_key_cache_bytes > 0) {
        // With BlockShared beside it, the cache may pass the 48 KB a block gets unasked.
        check_cuda(cudaFuncSetAttribute(block_select_cached_kernel<T>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(plan.block_key_cache_bytes)),
                   "allowing the block kernel its key cache");
        launch_overlapped<block_select_cached_kernel<T>>(
            unsigned(plan.blocks), kBlockThreads, size_t(plan.block_key_cache_bytes), stream,
            kLaunching, g, input, p.values, p.indices, index64, p.largest, p.sorted, ragged);
      } else {
        launch_overlapped<block_select_kernel<T>>(unsigned(plan.blocks), kBlockThreads, 0,
                                                  stream, kLaunching, g, input, p.values,
                                                  p.indices, index64, p.largest, p.sorted,
                                                  ragged);
      }
      break;
    case TopkPath::Cluster:
      if constexpr (sizeof(Key) <= 4) {
        const unsigned grid = unsigned(plan.blocks);
        if (plan.cluster_items == kClusterSmallItems) {
          launch_overlapped_in_clusters<cluster_select_kernel<T, kClusterSmallItems>>(
              kClusterBlocks, grid, kBlockThreads, 0, stream, kLaunching, g, input, p.values,
              p.indices, index64, p.largest, p.sorted);
        } else {
          launch_overlapped_in_clusters<cluster_select_kernel<T, kClusterMaxItems>>(
              kClusterBlocks, grid, kBlockThreads, 0, stream, kLaunching, g, input, p.values,
              p.indices, index64, p.largest, p.sorted);
        }
      } else {
        fail(MTK_ERROR_INTERNAL, "cluster plan for a ", sizeof(Key), "-byte key");
      }
      break;
    case TopkPath::Multi: {
      const ScratchRegions regions = carve_scratch(plan, scratch);
      auto* states = static_cast<RowState<Comp>*>(regions.states);
      auto* winners = static_cast<Comp*>(regions.winners);
      auto* buffer0 = static_cast<Comp*>(regions.candidates[0]);
      auto* buffer1 = static_cast<Comp*>(regions.candidates[1]);
      const MultiLayout layout{plan.blocks_per_row, plan.capacity, plan.l2_prefetch_bytes,
                               plan.split_sample ? plan.sample_rank : 0u};
      const unsigned grid = unsigned(plan.blocks);
      if (plan.sample_rank > 0) {
        // The sample kernel initialises the row state; rows whose threshold missed take their
        // histogram pass in the first filter launch, and rows with many candidates from few
        // winners have their winners placed there.
        if (plan.split_sample) {
          launch_overlapped<multi_sample_kernel<T, kWideSamplesPerThread / kSplitSampleParts,
                                                kSplitSampleParts>>(
              unsigned(g.rows * kSplitSampleParts), kSampleThreads, 0, stream, kLaunching, g,
              input, p.largest, plan.sample_rank, layout, states, ragged);
        } else if (plan.samples_per_thread == kWideSamplesPerThread) {
          launch_overlapped<multi_sample_kernel<T, kWideSamplesPerThread>>(
              unsigned(g.rows), kSampleThreads, 0, stream, kLaunching, g, input, p.largest,
              plan.sample_rank, layout, states, ragged);
        } else {
          launch_overlapped<multi_sample_kernel<T, kNarrowSamplesPerThread>>(
              unsigned(g.rows), kSampleThreads, 0, stream, kLaunching, g, input, p.largest,
              plan.sample_rank, layout, states, ragged);
        }
        if (plan.large_threshold_stage) {
          launch_overlapped<multi_threshold_kernel<T, kLargeThresholdStageBytes>>(
              grid, kMultiThreads, 0, stream, kLaunching, g, input, p.largest, layout, states,
              buffer0, plan.candidate_histogram, ragged);
        } else {
          launch_overlapped<multi_threshold_kernel<T, kSmallThresholdStageBytes>>(
              grid, kMultiThreads, 0, stream, kLaunching, g, input, p.largest, layout, states,
              buffer0, plan.candidate_histogram, ragged);
        }
      } else {
        // A memset is no kernel to overlap with: the histogram pass follows it in plain order.
        check_cuda(cudaMemsetAsync(states, 0, size_t(g.rows) * sizeof(RowState<Comp>), stream),
                   "clearing top-k row state");
        launch_overlapped<multi_histogram_kernel<T>>(grid, kMultiThreads, 0, stream, kLaunching,
                                                     g, input, p.largest, layout, states, ragged);
      }
      // Candidates ping-pong: (threshold pass ->) buffer0 -> pass 0 -> buffer1 -> pass 1 ->
      // buffer0 -> finish; a small bucket after pass 0 goes from buffer1 to the finish.
      static_assert(kMultiPasses == 2, "the filter passes below ping-pong two buffers");
      const bool sampled = plan.sample_rank > 0;
      launch_overlapped<multi_filter_kernel<T>>(grid, kMultiThreads, 0, stream, kLaunching, g,
                                                input, p.largest, layout, states, winners,
                                                buffer0, buffer1, true, sampled, ragged);
      launch_overlapped<multi_filter_kernel<T>>(grid, kMultiThreads, 0, stream, kLaunching, g,
                                                input, p.largest, layout, states, winners,
                                                buffer1, buffer0, false, false, ragged);
      const bool sort_in_finish = plan.winner_sort == WinnerSort::Finish;
      if (plan.finish_placement_bytes > 0) {
        // Beside the finish's static shared memory (FinishShared) even 16 KB pass the 48 KB a
        // block gets without asking.
        const size_t placement_bytes = size_t(plan.finish_placement_bytes);
        check_cuda(cudaFuncSetAttribute(finish_placing_kernel<T>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        int(placement_bytes)),
                   "allowing the finish its winners' shared memory");
        launch_overlapped<finish_placing_kernel<T>>(
            unsigned(g.rows), kBlockThreads, placement_bytes, stream, kLaunching, g, input,
            p.values, p.indices, index64, p.largest, layout, states, winners, buffer0, buffer1,
            ragged);
      } else {
        launch_overlapped<finish_kernel<T>>(unsigned(g.rows), kBlockThreads, 0, stream,
                                            kLaunching, g, input, p.values, p.indices, index64,
                                            p.largest, layout, states, winners, buffer0, buffer1,
                                            sort_in_finish, ragged);
      }
      if (plan.winner_sort == WinnerSort::RowRadix) {
        if constexpr (sizeof(Key) <= 4) {
          launch_overlapped<radix_sort_rows_kernel<T>>(unsigned(g.rows), kBlockThreads, 0,
                                                       stream, kLaunching, g, input, p.values,
                                                       p.indices, index64, p.largest, states,
                                                       winners, ragged);
        } else {
          fail(MTK_ERROR_INTERNAL, "radix winner sort planned for a ", sizeof(Key), "-byte key");
        }
      } else if (plan.winner_sort == WinnerSort::RowBlocks) {
        const size_t sort_bytes = size_t(plan.row_sort_bytes);
        if (sort_bytes > kDefaultDynamicSharedBytes) {
          check_cuda(cudaFuncSetAttribute(sort_rows_kernel<T>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(sort_bytes)),
                     "allowing the winner sort its shared memory");
        }
        launch_overlapped<sort_rows_kernel<T>>(unsigned(g.rows), kBlockThreads, sort_bytes,
                                               stream, kLaunching, g, input, p.values,
                                               p.indices, index64, p.largest, winners, ragged);
      } else if (plan.winner_sort == WinnerSort::Segmented) {
        auto* sorted = static_cast<Comp*>(regions.sorted_winners);
        size_t temp_bytes = plan.scratch.sort_temp_bytes;
        check_cuda(sort_winners(regions.sort_temp, temp_bytes, winners, sorted, g.rows, g.k,
                                stream),
                   "sorting the winners");
        const int64_t total = g.rows * g.k;
        const int threads = 256;
        const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65536);
        launch_overlapped<write_sorted_kernel<T>>(unsigned(blocks), threads, 0, stream,
                                                  kLaunching, g, input, p.values, p.indices,
                                                  index64, p.largest, sorted, ragged);
      }
      break;
    }
  }
}

}  // namespace cuda
}  // namespace mtk
