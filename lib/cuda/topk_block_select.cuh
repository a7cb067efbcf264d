// Block-wide radix select: one block narrows a row (or a candidate buffer) over 8-bit digits of
// the composite until its bucket holds exactly the winners still needed, then gathers the
// winners and sorts them in shared memory. block_select_kernel is exactly that, a block per
// row, for many medium rows; the cluster kernel and the multi-block finish reuse the pieces.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/device_utils.cuh"
#include "cuda/topk_config.hpp"

namespace mtk {
namespace cuda {

constexpr int kBlockDigitBits = 8;
constexpr int kBlockBins = 1 << kBlockDigitBits;

// The selection so far: elements whose top `resolved` composite bits equal `prefix` are still in
// play (`in_bucket` of them); `needed` more winners must come from them.
template <class Comp>
struct Selection {
  Comp prefix;
  int resolved;
  uint32_t needed;
  uint32_t in_bucket;

  // Keeps the bucket that `choice` names among the next `width` bits' digits.
  __device__ __forceinline__ void narrow(const BucketChoice& choice, int width) {
    prefix = (prefix << width) | Comp(choice.digit);
    resolved += width;
    needed -= choice.above;
    in_bucket = choice.count;
  }
};

template <int Bits, class Comp>
__device__ __forceinline__ bool has_prefix(Comp c, Comp prefix, int resolved) {
  return resolved == 0 || (c >> (Bits - resolved)) == prefix;
}

template <class Comp>
struct BufferSource {
  const Comp* items;
  int64_t n;
  __device__ __forceinline__ Comp composite(int64_t i) const { return items[i]; }
};

template <class Comp>
struct BlockShared {
  uint32_t hist[kBlockBins];
  uint32_t scan[kBlockThreads / 32];
  BucketChoice choice;
  uint32_t winner_count;
  RowTarget target;  // see share_row_target
  Comp winners[kSortCapacity];
};

// device_row_target in shared memory, where a block's threads read it as they use it: held in
// registers through the radix rounds, its ~20 words a thread kept the block kernels at two
// blocks of 512 threads an SM (ptxas -v). All threads call.
template <class Comp>
__device__ __forceinline__ const RowTarget& share_row_target(BlockShared<Comp>& sh,
                                                             const RowGeometry& g,
                                                             const RaggedRows& ragged,
                                                             int64_t row) {
  if (threadIdx.x == 0) sh.target = device_row_target(g, ragged, row);
  __syncthreads();
  return sh.target;
}


// How many of items[begin, end) rank above c: its rank among them, composites being unique.
template <class Comp>
__device__ __forceinline__ uint32_t count_above(const Comp* items, uint32_t begin, uint32_t end,
                                                Comp c) {
  uint32_t above = 0;
#pragma unroll 4
  for (uint32_t j = begin; j < end; ++j) above += items[j] > c ? 1u : 0u;
  return above;
}

// Calls visit(c) for every composite of `source`, spread over the block's Threads threads.
// Loads are issued in batches so that each thread waits for one memory latency per batch, not
// per element: these loops run once per digit in a single block (or over a short buffer in a
// few blocks), where nothing else hides that latency.
constexpr int kCompositeBatch = 4;  // loads per thread in flight in for_each_composite

template <int Threads = kBlockThreads, class Source, class Visit>
__device__ __forceinline__ void for_each_composite(const Source& source, Visit&& visit) {
  constexpr int kBatch = kCompositeBatch;
  using Comp = decltype(source.composite(0));
  for (int64_t first = threadIdx.x; first < source.n; first += int64_t(Threads) * kBatch) {
    Comp batch[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int64_t i = first + int64_t(u) * Threads;
      batch[u] = i < source.n ? source.composite(i) : Comp(0);
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      if (first + int64_t(u) * Threads < source.n) visit(batch[u]);
    }
  }
}

// Narrows `sel` digit by digit over `source` (elements outside `sel`'s prefix are ignored) until
// its bucket holds exactly the winners still needed. Every thread returns the same selection.
template <int Bits, class Comp, class Source>
__device__ Selection<Comp> block_refine(const Source& source, Selection<Comp> sel,
                                        BlockShared<Comp>& sh) {
  // A full-width prefix names one element (composites are unique), so the loop always ends
  // there at the latest; the bound only keeps a broken invariant from spinning.
  while (sel.in_bucket != sel.needed && sel.resolved < Bits) {
    const int width = min(kBlockDigitBits, Bits - sel.resolved);
    const int shift = Bits - sel.resolved - width;
    for (int b = threadIdx.x; b < kBlockBins; b += kBlockThreads) sh.hist[b] = 0;
    __syncthreads();
    for_each_composite(source, [&](Comp c) {
      if (has_prefix<Bits>(c, sel.prefix, sel.resolved)) {
        atomicAdd(&sh.hist[uint32_t(c >> shift) & ((1u << width) - 1)], 1u);
      }
    });
    __syncthreads();
    const BucketChoice choice =
        choose_bucket<kBlockBins, kBlockThreads>(sh.hist, sel.needed, sh.scan, &sh.choice);
    sel.narrow(choice, width);
  }
  return sel;
}

// A whole row's first round histograms the top kRowFirstDigitBits of its composites, not 8:
// the top 8 bits of a float key are its sign and the top of its exponent, which most scores
// share (N(0, 1) scores fill a handful of those bins), so a warp's lanes crowd a few bins and
// the block's atomics serialise; 12 bits add 3 of the significand (~64 busy bins). The
// histogram takes the winners' room, free until the gather.
constexpr int kRowFirstDigitBits = 12;
constexpr int kRowFirstBins = 1 << kRowFirstDigitBits;

template <int Bits, class Comp, class Source>
__device__ Selection<Comp> block_refine_row(const Source& source, Selection<Comp> sel,
                                            BlockShared<Comp>& sh) {
  static_assert(sizeof(sh.winners) >= kRowFirstBins * sizeof(uint32_t), "room for the bins");
  static_assert(Bits >= kRowFirstDigitBits, "a composite holds the first digit");
  if (sel.resolved == 0 && sel.in_bucket != sel.needed) {
    uint32_t* const hist = reinterpret_cast<uint32_t*>(sh.winners);
    for (int b = threadIdx.x; b < kRowFirstBins; b += kBlockThreads) hist[b] = 0;
    __syncthreads();
    for_each_composite(source, [&](Comp c) {
      atomicAdd(&hist[uint32_t(c >> (Bits - kRowFirstDigitBits))], 1u);
    });
    __syncthreads();
    const BucketChoice choice =
        choose_bucket<kRowFirstBins, kBlockThreads>(hist, sel.needed, sh.scan, &sh.choice);
    sel.narrow(choice, kRowFirstDigitBits);
  }
  return block_refine<Bits>(source, sel, sh);
}

// Elements of `source` under `start`'s prefix that rank at or above `final`'s prefix: exactly
// start.needed of them once block_refine has produced `final`.
template <int Bits, class Comp>
__device__ __forceinline__ bool is_winner(Comp c, const Selection<Comp>& start,
                                          const Selection<Comp>& final_sel) {
  if (!has_prefix<Bits>(c, start.prefix, start.resolved)) return false;
  return final_sel.resolved == 0 || (c >> (Bits - final_sel.resolved)) >= final_sel.prefix;
}

template <class Comp>
__device__ __forceinline__ Comp shuffle_xor(Comp value, int lane_mask) {
  if constexpr (sizeof(Comp) == 8) {
    return Comp(__shfl_xor_sync(0xffffffffu, static_cast<unsigned long long>(value), lane_mask));
  } else {
    const unsigned long long low = static_cast<unsigned long long>(value);
    const unsigned long long high = static_cast<unsigned long long>(value >> 64);
    return (Comp(__shfl_xor_sync(0xffffffffu, high, lane_mask)) << 64) |
           Comp(__shfl_xor_sync(0xffffffffu, low, lane_mask));
  }
}

// A bitonic sort's compare-exchanges of one (span, stride) stage, on the two adjacent elements a
// lane holds (a at the even index `first`, b after it) when stride < kWarpSortSpan: the partner
// of each is in the same lane (stride 1) or in lane ^ stride / 2 of the same warp.
template <class Comp>
__device__ __forceinline__ void warp_bitonic_stage(Comp& a, Comp& b, int first, int span,
                                                   int stride) {
  const bool descending = (first & span) == 0;
  if (stride == 1) {
    if (descending ? a < b : a > b) {
      const Comp t = a;
      a = b;
      b = t;
    }
    return;
  }
  const Comp partner_a = shuffle_xor(a, stride >> 1), partner_b = shuffle_xor(b, stride >> 1);
  const bool keep_larger = ((first & stride) == 0) == descending;
  a = (a > partner_a) == keep_larger ? a : partner_a;
  b = (b > partner_b) == keep_larger ? b : partner_b;
}

// Elements a warp sorts in registers, two per lane: bitonic stages with a smaller stride need no
// barrier.
constexpr int kWarpSortSpan = 64;

// Runs, for every span from first_span to last_span, the stages with strides below
// kWarpSortSpan, in registers, on each warp's groups of kWarpSortSpan elements of items[0, size).
template <class Comp>
__device__ void warp_bitonic_stages(Comp* items, int size, int first_span, int last_span) {
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  for (int group = warp; group * kWarpSortSpan < size; group += kBlockThreads / 32) {
    const int first = group * kWarpSortSpan + 2 * lane;
    Comp a = items[first], b = items[first + 1];
    for (int span = first_span; span <= last_span; span <<= 1) {
      for (int stride = min(span, kWarpSortSpan) >> 1; stride > 0; stride >>= 1) {
        warp_bitonic_stage(a, b, first, span, stride);
      }
    }
    items[first] = a;
    items[first + 1] = b;
  }
}

// Sorts items[0, count) in shared memory into descending order (bitonic; zero padding up to
// the next power of two, at least kWarpSortSpan, which `items` must have room for, sinks to the
// end). Stages whose stride is below kWarpSortSpan run in registers (warp_bitonic_stages), so a
// sort of 1024 takes 14 barriers instead of 55.
template <class Comp>
__device__ void sort_shared(Comp* items, int count) {
  int size = kWarpSortSpan;
  while (size < count) size <<= 1;
  for (int i = count + threadIdx.x; i < size; i += kBlockThreads) items[i] = Comp(0);
  __syncthreads();
  warp_bitonic_stages(items, size, 2, kWarpSortSpan);
  __syncthreads();
  for (int span = 2 * kWarpSortSpan; span <= size; span <<= 1) {
    for (int stride = span >> 1; stride >= kWarpSortSpan; stride >>= 1) {
      for (int i = threadIdx.x; i < size; i += kBlockThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const Comp a = items[i], b = items[j];
          const bool descending = (i & span) == 0;
          if (descending ? a < b : a > b) {
            items[i] = b;
            items[j] = a;
          }
        }
      }
      __syncthreads();
    }
    warp_bitonic_stages(items, size, span, span);
    __syncthreads();
  }
}

// Sorts a block's `count` winners (sort_shared) and writes the row's outputs: its winners,
// then padding up to k (a short window's).
template <class T, class Comp>
__device__ void sort_and_write(BlockShared<Comp>& sh, int count, const RowGeometry& g,
                               const T* input, void* values, void* indices, bool index64,
                               bool largest, const RowTarget& o) {
  static_assert(kSortCapacity % kWarpSortSpan == 0, "whole warp groups");
  sort_shared(sh.winners, count);
  for (int r = threadIdx.x; r < count; r += kBlockThreads) {
    write_winner(g, input, values, indices, index64, largest, o, r, sh.winners[r]);
  }
  write_padding<T>(g, values, indices, index64, o, count, g.k);
}

// Writes the winners of `source` (is_winner under start and final_sel) in the order of their
// positions, each at the rank that counts the winners before it: the unsorted output, with no
// sort and the same order on every run (the contract leaves the order of sorted=false open but
// deterministic, which the gather's shared atomics are not). Each warp takes a contiguous share
// of the row in tiles of 32 elements: it counts its winners by ballots, one exchange of the
// warps' counts gives each warp its first rank, and a second sweep writes each winner at that
// rank plus the winners before it in the sweep. A block scan per chunk of 2048 elements took a
// quarter of the 8192-row prefill's instructions (ncu).
template <int Bits, class T, class Comp, class Source>
__device__ void write_winners_in_index_order(const Source& source, const Selection<Comp>& start,
                                             const Selection<Comp>& final_sel,
                                             uint32_t* warp_counts, const RowGeometry& g,
                                             const T* input, void* values, void* indices,
                                             bool index64, bool largest, const RowTarget& o) {
  constexpr int kWarps = kBlockThreads / 32;
  constexpr int kTilesInFlight = 2;  // loads a lane has in flight; with 4 the kernels spilled
  const int lane = int(threadIdx.x & 31), warp = int(threadIdx.x >> 5);
  const int64_t share = (source.n + kWarps * 32 - 1) / (kWarps * 32) * 32;
  const int64_t begin = min(source.n, warp * share), end = min(source.n, begin + share);
  // Calls visit(is_winner, composite) on every lane for each tile of [begin, end): whole warps,
  // so visit may take a ballot.
  auto sweep = [&](auto&& visit) {
    for (int64_t first = begin; first < end; first += 32 * kTilesInFlight) {
      Comp batch[kTilesInFlight];
#pragma unroll
      for (int u = 0; u < kTilesInFlight; ++u) {
        const int64_t i = first + u * 32 + lane;
        batch[u] = i < end ? source.composite(i) : Comp(0);
      }
#pragma unroll
      for (int u = 0; u < kTilesInFlight; ++u) {
        visit(first + u * 32 + lane < end && is_winner<Bits>(batch[u], start, final_sel),
              batch[u]);
      }
    }
  };
  uint32_t count = 0;
  sweep([&](bool win, Comp) { count += uint32_t(__popc(__ballot_sync(0xffffffffu, win))); });
  if (lane == 0) warp_counts[warp] = count;
  __syncthreads();
  uint32_t rank = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) rank += w < warp ? warp_counts[w] : 0u;
  const uint32_t lanes_below = (1u << lane) - 1u;
  sweep([&](bool win, Comp c) {
    const uint32_t winners = __ballot_sync(0xffffffffu, win);
    if (win) {
      write_winner(g, input, values, indices, index64, largest, o,
                   int64_t(rank + uint32_t(__popc(winners & lanes_below))), c);
    }
    rank += uint32_t(__popc(winners));
  });
}

// A row's selection keys cached in shared memory (see block_select_row): the radix rounds and
// the gather read them there.
template <class Key>
struct CachedKeys {
  const Key* keys;
  int64_t n;
  __device__ __forceinline__ Composite<Key> composite(int64_t i) const {
    return make_composite(keys[i], uint32_t(i));
  }
};

// Selects a row's winners from `source` and writes them: sorted, gathered and sorted in shared
// memory; unsorted, in index order (write_winners_in_index_order), so a window of at most k
// elements, all winners, costs one read of it and no radix round.
template <class T, class Comp, class Source>
__device__ void select_and_write_row(const Source& source, BlockShared<Comp>& sh,
                                     const RowGeometry& g, const T* input, void* values,
                                     void* indices, bool index64, bool largest, bool sorted,
                                     const RowTarget& o) {
  constexpr int kBits = kCompositeBits<typename KeyTraits<T>::Key>;
  const Selection<Comp> start{Comp(0), 0, uint32_t(o.count), uint32_t(o.length)};
  const Selection<Comp> final_sel = block_refine_row<kBits>(source, start, sh);
  if (!sorted) {
    write_winners_in_index_order<kBits>(source, start, final_sel, sh.scan, g, input, values,
                                        indices, index64, largest, o);
    write_padding<T>(g, values, indices, index64, o, o.count, g.k);
    return;
  }
  if (threadIdx.x == 0) sh.winner_count = 0;
  __syncthreads();
  for_each_composite(source, [&](Comp c) {
    if (is_winner<kBits>(c, start, final_sel)) sh.winners[atomicAdd(&sh.winner_count, 1u)] = c;
  });
  __syncthreads();
  sort_and_write(sh, int(o.count), g, input, values, indices, index64, largest, o);
}

// Row `row` of the block path. With `key_cache` (shared memory for the row's n keys, which the
// plan gives rows short enough: block_key_cache_bytes), the row is read from global memory
// once, into the cache, instead of once per radix round and again for the gather: rounds over
// shared memory wait for no L2 round trip (8192 prefill rows of up to 9216 keys took 1040 us
// reading the input every round).
template <class T>
__device__ void block_select_row(const RowGeometry& g, const T* input, void* values,
                                 void* indices, bool index64, bool largest, bool sorted,
                                 const RaggedRows& ragged, int64_t row,
                                 typename KeyTraits<T>::Key* key_cache) {
  using Key = typename KeyTraits<T>::Key;
  using Comp = Composite<Key>;
  __shared__ BlockShared<Comp> sh;
  const RowTarget& o = share_row_target(sh, g, ragged, row);
  const InputRow<T> source = input_row(g, input, o, largest);
  if (key_cache == nullptr) {
    select_and_write_row(source, sh, g, input, values, indices, index64, largest, sorted, o);
    return;
  }
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < o.length; i += kBlockThreads) {
    key_cache[i] = selection_key(source.base[i * source.stride], largest);
  }
  __syncthreads();
  select_and_write_row(CachedKeys<Key>{key_cache, o.length}, sh, g, input, values, indices,
                       index64, largest, sorted, o);
}

// Blocks of the block path an SM holds at once. Left to itself, ptxas gave the kernels 64
// registers a thread (two blocks of 512 an SM) where the cached keys' shared memory has room for
// four; with keys of up to 32 bits three compile in 40 registers with at most 20 bytes of
// spills (ptxas -v; four spilled 60-100 bytes), wider keys spill more.
template <class T>
constexpr int kBlockPathMinBlocksPerSm = sizeof(typename KeyTraits<T>::Key) <= 4 ? 3 : 1;

template <class T>
__global__ void __launch_bounds__(kBlockThreads, kBlockPathMinBlocksPerSm<T>)
    block_select_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                        bool largest, bool sorted, RaggedRows ragged) {
  wait_for_previous_kernel();
  allow_next_kernel();
  block_select_row<T>(g, input, values, indices, index64, largest, sorted, ragged, blockIdx.x,
                      nullptr);
}

}  // namespace cuda
}  // namespace mtk
