// The cluster select kernel (see topk_kernels.cuh for the other shape classes). Its work is a
// template over the cluster's operations (cluster_select_block), so that the host emulation
// (tests/cuda/emulation), which has no cooperative_groups, runs it with blocks of its own.
#pragma once

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

#include "cuda/topk_block_select.cuh"
#include "cuda/topk_config.hpp"

namespace mtk {
namespace cuda {

// ---------------------------------------------------------------------------------------------
// Cluster select: one launch for a few rows that the multi-block pipeline would split into a
// memset and four dependent launches (the chain, not the reading, is their cost).

// kClusterBlocks blocks per cluster, kClusterSmallItems or kClusterMaxItems key slots a thread:
// topk_config.hpp.

// Each block owns kClusterBlocks-th of the bins: every block adds its counts of those bins into
// the owner's shared memory, and reads the cluster's counts back from the owners: per round a
// block sends and receives one word a bin. Every block reading every other block's whole
// histogram took ~1.1 us a round on the H200, this ~0.6 (bench/gpu/launch_floor's skeleton).
constexpr int kBinsPerOwner = kBlockBins / kClusterBlocks;
static_assert(kBinsPerOwner * kClusterBlocks == kBlockBins, "whole bins per block");
// Radix rounds of a composite of a key of at most 32 bits and its 32-bit index, at most.
constexpr int kClusterMaxRounds = (32 + 32 + kBlockDigitBits - 1) / kBlockDigitBits;

template <class Comp>
struct ClusterShared {
  // Block 0's winners list is where every block puts its winners when the output is sorted.
  BlockShared<Comp> block;
  // The round's counts in kHistogramCopies copies, a lane adding to copy lane % copies: the top
  // digit of real data falls in a few bins (a float's sign and exponent), and lanes of one
  // atomic that hit one address are serialised. Rows are padded by a word so that one bin's
  // copies lie in different banks.
  static constexpr int kHistogramCopies = 8;
  static constexpr int kCopyStride = kBlockBins + 1;
  uint32_t copies[kHistogramCopies * kCopyStride];
  // The cluster's counts of the bins this block owns, a set per round, so that no set is
  // cleared while another block may still add to or read it: all are cleared before the first
  // cluster barrier.
  uint32_t owned[kClusterMaxRounds][kBinsPerOwner];
  uint32_t cluster_hist[kBlockBins];
  // This block's winners: how many, and where they start (in block 0's list, or in the output
  // when it is unsorted).
  uint32_t winners_here, winners_base;
};

// A slice's keys, a slot each (slot i of a thread holds element first + i * kBlockThreads). All
// loads go out before any conversion: interleaved with a conversion that branched, they went
// out one at a time, a latency each.
template <class T, int Items>
__device__ __forceinline__ void load_slice_keys(const T* base, int64_t first, int64_t stride,
                                                int slots, bool largest,
                                                uint32_t (&keys)[Items]) {
  T raw[Items];
  int64_t slot_offset = first * stride;
  const int64_t slot_step = int64_t(kBlockThreads) * stride;
#pragma unroll
  for (int i = 0; i < Items; ++i, slot_offset += slot_step) {
    if (i < slots) raw[i] = base[slot_offset];
  }
#pragma unroll
  for (int i = 0; i < Items; ++i) {
    keys[i] = i < slots ? uint32_t(selection_key(raw[i], largest)) : 0u;
  }
}

// Counts the next `width`-bit digit (at `shift` in the composite) of this thread's slots under
// the selection's prefix, into the thread's copy of the round's histogram.
template <class Key, int Items, class CompositeOfSlot>
__device__ __forceinline__ void count_slot_digits(const uint32_t (&keys)[Items], int slots,
                                                  const Selection<Composite<Key>>& sel,
                                                  int width, int shift, uint32_t* my_copy,
                                                  CompositeOfSlot composite) {
  constexpr int kBits = kCompositeBits<Key>;
  constexpr int kKeyBits = int(sizeof(Key)) * 8;
  constexpr uint64_t kKeyMask = (uint64_t{1} << kKeyBits) - 1;
  if (sel.resolved + width <= kKeyBits) {
    // The digit and the prefix lie in the key: 32-bit work, a few instructions a slot.
    const int low = kKeyBits - sel.resolved;  // bits of the key below the prefix
    const uint32_t prefix_mask = sel.resolved == 0 ? 0u : uint32_t(kKeyMask >> low << low);
    const uint32_t prefix = uint32_t(uint64_t(sel.prefix) << low);
    const int digit_shift = low - width;
#pragma unroll
    for (int i = 0; i < Items; ++i) {
      if (i < slots && (keys[i] & prefix_mask) == prefix) {
        atomicAdd(&my_copy[(keys[i] >> digit_shift) & ((1u << width) - 1)], 1u);
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < Items; ++i) {
      if (i < slots) {
        const Composite<Key> c = composite(i);
        if (has_prefix<kBits>(c, sel.prefix, sel.resolved)) {
          atomicAdd(&my_copy[uint32_t(c >> shift) & ((1u << width) - 1)], 1u);
        }
      }
    }
  }
}

// Adds this block's copies of the round's histogram into the owners' shared memory, then reads
// the cluster's counts of every bin into sh.cluster_hist. Every block of the cluster calls it;
// bin threadIdx.x is `owned_bin` of block `owner`'s.
template <class Comp, class Cluster>
__device__ __forceinline__ void sum_over_cluster(const Cluster& cluster, ClusterShared<Comp>& sh,
                                                 int round, unsigned owner, int owned_bin) {
  using Shared = ClusterShared<Comp>;
  if (threadIdx.x < kBlockBins) {
    uint32_t sum = 0;
#pragma unroll
    for (int copy = 0; copy < Shared::kHistogramCopies; ++copy) {
      sum += sh.copies[copy * Shared::kCopyStride + threadIdx.x];
    }
    if (sum != 0) atomicAdd(cluster.map_shared_rank(&sh.owned[round][owned_bin], owner), sum);
  }
  cluster.sync();
  if (threadIdx.x < kBlockBins) {
    sh.cluster_hist[threadIdx.x] = *cluster.map_shared_rank(&sh.owned[round][owned_bin], owner);
  }
  __syncthreads();
}

// A bit a winning slot of this thread. Rounds rarely reach the index bits (ties): the keys
// decide.
template <class Key, int Items, class CompositeOfSlot>
__device__ __forceinline__ uint32_t winning_slots(const uint32_t (&keys)[Items], int slots,
                                                  const Selection<Composite<Key>>& start,
                                                  const Selection<Composite<Key>>& sel,
                                                  CompositeOfSlot composite) {
  constexpr int kBits = kCompositeBits<Key>;
  constexpr int kKeyBits = int(sizeof(Key)) * 8;
  uint32_t won = 0;
  if (sel.resolved <= kKeyBits) {
    const int low = kKeyBits - sel.resolved;
    const uint32_t floor = uint32_t(uint64_t(sel.prefix) << low);  // the lowest winning key
#pragma unroll
    for (int i = 0; i < Items; ++i) won |= uint32_t(i < slots && keys[i] >= floor) << i;
  } else {
#pragma unroll
    for (int i = 0; i < Items; ++i) {
      won |= uint32_t(i < slots && is_winner<kBits>(composite(i), start, sel)) << i;
    }
  }
  return won;
}

// Unsorted output: each block writes its own winners where those of the lower ranks end, in
// thread and then slot order: the same places on every call, and no gathering.
// for_each_winner(visit) calls visit(c) for this thread's `mine` winners.
template <class T, class Comp, class Cluster, class ForEachWinner>
__device__ __forceinline__ void write_block_winners(const Cluster& cluster,
                                                    ClusterShared<Comp>& sh, unsigned rank,
                                                    uint32_t mine, ForEachWinner for_each_winner,
                                                    const RowGeometry& g, const T* input,
                                                    void* values, void* indices, bool index64,
                                                    bool largest, const RowTarget& o) {
  uint32_t block_total;
  const uint32_t higher = block_suffix_sum<kBlockThreads>(mine, sh.block.scan, block_total);
  if (threadIdx.x == 0) sh.winners_here = block_total;
  cluster.sync();  // every block's count is in its shared memory
  if (threadIdx.x == 0) {
    // Every count is read, so that the loads go out together (a load behind a branch waited
    // for the one before: 15 remote latencies for the last block).
    uint32_t lower_ranks = 0;
#pragma unroll
    for (unsigned r = 0; r < unsigned(kClusterBlocks); ++r) {
      const uint32_t count = *cluster.map_shared_rank(&sh.winners_here, r);
      lower_ranks += r < rank ? count : 0u;
    }
    sh.winners_base = lower_ranks;
  }
  cluster.barrier_arrive();  // this block has read the others' counts
  __syncthreads();
  int64_t place = int64_t(sh.winners_base) + (block_total - higher - mine);
  for_each_winner([&](Comp c) {
    write_winner(g, input, values, indices, index64, largest, o, place++, c);
  });
  cluster.barrier_wait();  // no block leaves while another may still read its count
}

// Sorted output: every block's winners go to block 0's list. Each block reserves its range there
// with one atomic; each thread's winners take consecutive places of it.
template <class Comp, class Cluster, class ForEachWinner>
__device__ __forceinline__ void gather_winners_in_block0(const Cluster& cluster,
                                                         ClusterShared<Comp>& sh, uint32_t mine,
                                                         ForEachWinner for_each_winner) {
  const uint32_t offset = mine != 0 ? atomicAdd(&sh.winners_here, mine) : 0u;
  __syncthreads();
  BlockShared<Comp>* const gathered = cluster.map_shared_rank(&sh.block, 0);
  if (threadIdx.x == 0 && sh.winners_here != 0) {
    sh.winners_base = atomicAdd(&gathered->winner_count, sh.winners_here);
  }
  __syncthreads();
  Comp* out = gathered->winners + sh.winners_base + offset;
  for_each_winner([&](Comp c) { *out++ = c; });
}

// Rows of n <= kClusterBlocks * kBlockThreads * Items elements whose keys are at most 32 bits
// wide (a key a slot: wider keys would take twice the registers) and k <= kSortCapacity. Block
// `rank` of a row's cluster holds a contiguous slice of it, one key per slot of each thread,
// where element i of the slice is slot i / kBlockThreads of thread i % kBlockThreads (coalesced
// loads); composites are rebuilt from slot and thread. Every block computes the same selection
// from the same summed histograms, so all take the same number of cluster barriers. The
// winners (exactly k in all: composites are unique) are written by their own blocks when the
// output is unsorted; sorted, they are gathered in block 0, which sorts and writes them.
//
// `Cluster` gives what cooperative_groups' cluster_group gives on the GPU: block_rank(),
// sync(), barrier_arrive() and barrier_wait() (its two halves), and map_shared_rank(address in
// this block's shared memory, rank); `sh` is this block's shared memory.
template <class T, int Items, class Cluster>
__device__ void cluster_select_block(const Cluster& cluster,
                                     ClusterShared<Composite<typename KeyTraits<T>::Key>>& sh,
                                     const RowGeometry& g, const T* input, void* values,
                                     void* indices, bool index64, bool largest, bool sorted) {
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  static_assert(sizeof(Key) <= 4, "one 32-bit register a slot");
  static_assert(Items <= 32, "a bit a slot in a word");
  constexpr int kBits = kCompositeBits<Key>;
  static_assert((kBits + kBlockDigitBits - 1) / kBlockDigitBits <= kClusterMaxRounds,
                "a set of owned counts a round");
  const unsigned rank = cluster.block_rank();
  const int64_t row = blockIdx.x / kClusterBlocks;
  const RowTarget o = device_row_target(g, row);
  // Slices are whole multiples of 32 elements, so warps' loads start on the same alignment.
  const int64_t slice = (g.n + kClusterBlocks * 32 - 1) / (kClusterBlocks * 32) * 32;
  const int64_t begin = min(g.n, int64_t(rank) * slice);
  const int64_t end = min(g.n, begin + slice);
  const int64_t first = begin + threadIdx.x;
  const int slots = end > first ? int((end - first + kBlockThreads - 1) / kBlockThreads) : 0;
  for (int i = threadIdx.x; i < kClusterMaxRounds * kBinsPerOwner; i += kBlockThreads) {
    sh.owned[i / kBinsPerOwner][i % kBinsPerOwner] = 0;
  }
  if (threadIdx.x == 0) {
    sh.block.winner_count = 0;
    sh.winners_here = sh.winners_base = 0;
  }
  // Waited for before the first count leaves the block: the loads run under the barrier.
  cluster.barrier_arrive();
  wait_for_previous_kernel();
  allow_next_kernel();
  uint32_t keys[Items];
  load_slice_keys(input + o.input, first, g.input_stride, slots, largest, keys);
  auto composite = [&](int i) {
    return make_composite(Key(keys[i]), uint32_t(first + int64_t(i) * kBlockThreads));
  };

  const Selection<Comp> start{Comp(0), 0, uint32_t(g.k), uint32_t(g.n)};
  Selection<Comp> sel = start;
  using Shared = ClusterShared<Comp>;
  uint32_t* my_copy = sh.copies + (threadIdx.x % Shared::kHistogramCopies) * Shared::kCopyStride;
  // The owner of bin threadIdx.x, and where in its shared memory the bin is.
  const unsigned owner = threadIdx.x / kBinsPerOwner;
  const int owned_bin = int(threadIdx.x % kBinsPerOwner);
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
    count_slot_digits<Key>(keys, slots, sel, width, shift, my_copy, composite);
    __syncthreads();
    if (round == 0) cluster.barrier_wait();  // every block's owned counts are cleared
    sum_over_cluster(cluster, sh, round, owner, owned_bin);
    const BucketChoice choice = choose_bucket<kBlockBins, kBlockThreads>(
        sh.cluster_hist, sel.needed, sh.block.scan, &sh.block.choice);
    sel.narrow(choice, width);
  }
  if (round == 0) cluster.barrier_wait();  // block 0's count is cleared
  const uint32_t won = winning_slots<Key>(keys, slots, start, sel, composite);
  // The winning slots' composites, one at a time; rolled, the slot picked by comparison: code
  // unrolled over slots is run once by each warp, and such a copy of this loop (a warp vote a
  // slot) made instruction fetch the kernel's largest stall on the H200 (30% of its samples).
  auto for_each_winner = [&](auto&& visit) {
    for (uint32_t rest = won; rest != 0; rest &= rest - 1) {
      const int slot = __ffs(int(rest)) - 1;
      uint32_t key = 0;
#pragma unroll
      for (int i = 0; i < Items; ++i) key = i == slot ? keys[i] : key;
      visit(make_composite(Key(key), uint32_t(first + int64_t(slot) * kBlockThreads)));
    }
  };
  const uint32_t mine = uint32_t(__popc(won));
  if (!sorted) {
    write_block_winners(cluster, sh, rank, mine, for_each_winner, g, input, values, indices,
                        index64, largest, o);
    return;
  }
  gather_winners_in_block0(cluster, sh, mine, for_each_winner);
  cluster.sync();  // all k winners are in block 0
  if (rank == 0) sort_and_write(sh.block, int(g.k), g, input, values, indices, index64, largest, o);
}

#if defined(__CUDACC__)
template <class T, int Items>
__global__ void __launch_bounds__(kBlockThreads)
    cluster_select_kernel(RowGeometry g, const T* input, void* values, void* indices,
                          bool index64, bool largest, bool sorted) {
  __shared__ ClusterShared<Composite<typename KeyTraits<T>::Key>> sh;
  cluster_select_block<T, Items>(cooperative_groups::this_cluster(), sh, g, input, values,
                                 indices, index64, largest, sorted);
}
#endif

}  // namespace cuda
}  // namespace mtk
