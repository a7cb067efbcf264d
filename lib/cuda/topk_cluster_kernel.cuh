// The cluster select kernel (see topk_kernels.cuh for the other shape classes). Its work is a
// template over the cluster's operations (cluster_select_block), so that the host emulation
// (tests/cuda/emulation), which has no cooperative_groups, runs it with blocks of its own.
#pragma once

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

#include "cuda/topk_kernels.cuh"

namespace mtk {
namespace cuda {

// ---------------------------------------------------------------------------------------------
// Cluster select: one launch for a few rows that the multi-block pipeline would split into a
// memset and four dependent launches (the chain, not the reading, is their cost).

// Blocks per cluster: 16, the non-portable size sm_90 allows (portable is 8), so a row of 150k
// is read by 16 SMs and each holds ~9.5k of it.
constexpr int kClusterBlocks = 16;
// Key slots a thread: rows up to 64k take the small kernel, up to 256k the large one.
constexpr int kClusterSmallItems = 8;
constexpr int kClusterMaxItems = 32;

template <class Comp>
struct ClusterShared {
  // Block 0's winners list is where every block appends its winners.
  BlockShared<Comp> block;
  // The round's counts in kHistogramCopies copies, a lane adding to copy lane % copies: the top
  // digit of real data falls in a few bins (a float's sign and exponent), and lanes of one
  // atomic that hit one address are serialised. Rows are padded by a word so that one bin's
  // copies lie in different banks.
  static constexpr int kHistogramCopies = 8;
  static constexpr int kCopyStride = kBlockBins + 1;
  uint32_t copies[kHistogramCopies * kCopyStride];
  // The block's summed counts, alternating between two so that a block may write the next
  // round's while others still read this round's (they have all read it once they reach the
  // next round's barrier), and the cluster's sum.
  uint32_t hist[2][kBlockBins];
  uint32_t cluster_hist[kBlockBins];
};

// Rows of n <= kClusterBlocks * kBlockThreads * Items elements whose keys are at most 32 bits
// wide (a key a slot: wider keys would take twice the registers) and k <= kSortCapacity. Block
// `rank` of a row's cluster holds a contiguous slice of it, one key per slot of each thread,
// where element i of the slice is slot i / kBlockThreads of thread i % kBlockThreads (coalesced
// loads); composites are rebuilt from slot and thread. Every block computes the same selection
// from the same summed histograms, so all take the same number of cluster barriers. Each block
// appends its winners (exactly k in all: composites are unique) to block 0's shared memory,
// which sorts and writes them.
//
// `Cluster` gives what cooperative_groups' cluster_group gives on the GPU: block_rank(), sync()
// and map_shared_rank(address in this block's shared memory, rank); `sh` is this block's shared
// memory.
template <class T, int Items, class Cluster>
__device__ void cluster_select_block(const Cluster& cluster,
                                     ClusterShared<Composite<typename KeyTraits<T>::Key>>& sh,
                                     const RowGeometry& g, const T* input, void* values,
                                     void* indices, bool index64, bool largest) {
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  static_assert(sizeof(Key) <= 4, "one 32-bit register a slot");
  constexpr int kBits = kCompositeBits<Key>;
  const unsigned rank = cluster.block_rank();
  const int64_t row = blockIdx.x / kClusterBlocks;
  const RowOffsets o = device_row_offsets(g, row);
  const T* base = input + o.input;
  // Slices are whole multiples of 32 elements, so warps' loads start on the same alignment.
  const int64_t slice = (g.n + kClusterBlocks * 32 - 1) / (kClusterBlocks * 32) * 32;
  const int64_t begin = min(g.n, int64_t(rank) * slice);
  const int64_t end = min(g.n, begin + slice);
  const int64_t first = begin + threadIdx.x;
  const int slots = end > first ? int((end - first + kBlockThreads - 1) / kBlockThreads) : 0;
  if (threadIdx.x == 0) sh.block.winner_count = 0;
  wait_for_previous_kernel();
  allow_next_kernel();
  uint32_t keys[Items];
#pragma unroll
  for (int i = 0; i < Items; ++i) {
    keys[i] = i < slots ? uint32_t(selection_key(
                              base[(first + int64_t(i) * kBlockThreads) * g.input_stride], largest))
                        : 0u;
  }
  auto composite = [&](int i) {
    return make_composite(Key(keys[i]), uint32_t(first + int64_t(i) * kBlockThreads));
  };

  const Selection<Comp> start{Comp(0), 0, uint32_t(g.k), uint32_t(g.n)};
  Selection<Comp> sel = start;
  using Shared = ClusterShared<Comp>;
  uint32_t* my_copy = sh.copies + (threadIdx.x % Shared::kHistogramCopies) * Shared::kCopyStride;
  // As block_refine, with the histogram summed over the cluster.
  int round = 0;
  for (; sel.in_bucket != sel.needed && sel.resolved < kBits; ++round) {
    const int width = min(kBlockDigitBits, kBits - sel.resolved);
    const int shift = kBits - sel.resolved - width;
    for (int b = threadIdx.x; b < Shared::kHistogramCopies * Shared::kCopyStride;
         b += kBlockThreads) {
      sh.copies[b] = 0;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < Items; ++i) {
      if (i < slots) {
        const Comp c = composite(i);
        if (has_prefix<kBits>(c, sel.prefix, sel.resolved)) {
          atomicAdd(&my_copy[uint32_t(c >> shift) & ((1u << width) - 1)], 1u);
        }
      }
    }
    __syncthreads();
    uint32_t* hist = sh.hist[round & 1];
    if (threadIdx.x < kBlockBins) {
      uint32_t sum = 0;
#pragma unroll
      for (int copy = 0; copy < Shared::kHistogramCopies; ++copy) {
        sum += sh.copies[copy * Shared::kCopyStride + threadIdx.x];
      }
      hist[threadIdx.x] = sum;
    }
    cluster.sync();
    if (threadIdx.x < kBlockBins) {
      uint32_t sum = 0;
#pragma unroll
      for (int r = 0; r < kClusterBlocks; ++r) {
        sum += cluster.map_shared_rank(hist, r)[threadIdx.x];
      }
      sh.cluster_hist[threadIdx.x] = sum;
    }
    __syncthreads();
    const BucketChoice choice = choose_bucket<kBlockBins, kBlockThreads>(
        sh.cluster_hist, sel.needed, sh.block.scan, &sh.block.choice);
    sel.narrow(choice, width);
  }
  // Winners go straight into block 0's list, whose count it cleared before the first cluster
  // barrier (there is one here where no round ran).
  if (round == 0) cluster.sync();
  BlockShared<Comp>* const gathered = cluster.map_shared_rank(&sh.block, 0);
#pragma unroll
  for (int i = 0; i < Items; ++i) {
    const Comp c = composite(i);
    warp_append(i < slots && is_winner<kBits>(c, start, sel), c, gathered->winners,
                &gathered->winner_count);
  }
  cluster.sync();  // all k winners are in block 0
  if (rank == 0) sort_and_write(sh.block, int(g.k), g, input, values, indices, index64, largest, o);
}

#if defined(__CUDACC__)
template <class T, int Items>
__global__ void __launch_bounds__(kBlockThreads)
    cluster_select_kernel(RowGeometry g, const T* input, void* values, void* indices,
                          bool index64, bool largest) {
  __shared__ ClusterShared<Composite<typename KeyTraits<T>::Key>> sh;
  cluster_select_block<T, Items>(cooperative_groups::this_cluster(), sh, g, input, values,
                                 indices, index64, largest);
}
#endif

}  // namespace cuda
}  // namespace mtk
