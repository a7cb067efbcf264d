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
  uint32_t warp_first_rank[kBlockThreads / 32];  // see warp_refined_least
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

// The least composite that wins once block_refine has narrowed a whole row's selection (from
// the empty prefix) to `final_sel`: the winners are exactly the composites at or above it.
template <int Bits, class Comp>
__device__ __forceinline__ Comp least_winner(const Selection<Comp>& final_sel) {
  return final_sel.resolved == 0 ? Comp(0) : final_sel.prefix << (Bits - final_sel.resolved);
}

// The unsorted output's partition of a row: each warp takes a contiguous share in tiles of 32
// elements, and ranks and writes its winners in index order (write_winners_in_index_order).
struct WarpShare {
  int64_t begin, end;
};

__device__ __forceinline__ WarpShare warp_share(int64_t n) {
  constexpr int kWarps = kBlockThreads / 32;
  const int64_t size = (n + kWarps * 32 - 1) / (kWarps * 32) * 32;
  const int64_t begin = min(n, int64_t(threadIdx.x >> 5) * size);
  return WarpShare{begin, min(n, begin + size)};
}

// Calls visit(valid, composite) on every lane for each tile of the warp's share of `source`:
// whole warps, so visit may take a ballot.
template <class Source, class Visit>
__device__ __forceinline__ void sweep_warp_share(const Source& source, const WarpShare& share,
                                                 Visit&& visit) {
  using Comp = decltype(source.composite(0));
  constexpr int kTilesInFlight = 2;  // loads a lane has in flight; with 4 the kernels spilled
  const int lane = int(threadIdx.x & 31);
  for (int64_t first = share.begin; first < share.end; first += 32 * kTilesInFlight) {
    Comp batch[kTilesInFlight];
#pragma unroll
    for (int u = 0; u < kTilesInFlight; ++u) {
      const int64_t i = first + u * 32 + lane;
      batch[u] = i < share.end ? source.composite(i) : Comp(0);
    }
#pragma unroll
    for (int u = 0; u < kTilesInFlight; ++u) visit(first + u * 32 + lane < share.end, batch[u]);
  }
}

// The winners (composites at or above `least`) in the warp's share of `source`; every lane
// returns the count.
template <class Source, class Comp>
__device__ __forceinline__ uint32_t count_share_winners(const Source& source,
                                                        const WarpShare& share, Comp least) {
  uint32_t count = 0;
  sweep_warp_share(source, share, [&](bool valid, Comp c) {
    count += uint32_t(__popc(__ballot_sync(0xffffffffu, valid && c >= least)));
  });
  return count;
}

// The rank of the first winner of the calling warp's share in index order, from each warp's
// count of winners (`scratch`: a word a warp). Every thread calls.
__device__ __forceinline__ uint32_t first_rank_of_warp(uint32_t warp_winners, uint32_t* scratch) {
  constexpr int kWarps = kBlockThreads / 32;
  const int warp = int(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0) scratch[warp] = warp_winners;
  __syncthreads();
  uint32_t rank = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) rank += w < warp ? scratch[w] : 0u;
  return rank;
}

// Writes the winners of the warp's share of `source` (composites at or above `least`) in index
// order from `rank` on, each at `rank` plus the winners before it: the unsorted output, with no
// sort and the same order on every run (the contract leaves the order of sorted=false open but
// deterministic, which the gather's shared atomics are not). write(rank, composite) stores one.
// A block scan per chunk of 2048 elements took a quarter of the 8192-row prefill's instructions
// (ncu); ballots over warp shares do not need one.
template <class Source, class Comp, class Write>
__device__ __forceinline__ void write_winners_in_index_order(const Source& source,
                                                             const WarpShare& share, Comp least,
                                                             uint32_t rank, Write&& write) {
  const uint32_t lanes_below = (1u << (threadIdx.x & 31)) - 1u;
  sweep_warp_share(source, share, [&](bool valid, Comp c) {
    const bool win = valid && c >= least;
    const uint32_t winners = __ballot_sync(0xffffffffu, win);
    if (win) write(rank + uint32_t(__popc(winners & lanes_below)), c);
    rank += uint32_t(__popc(winners));
  });
}

// Whether a row's outputs are int32 indices alone, contiguous, written as they are or through
// the ragged transform (offsets[r] + position): the sparse-attention indexer's calls. Their
// winners are written by a plain store; write_winner spent about 50 instructions a tile on the
// value's branch, 64-bit addressing and the transform's switch (ncu, the 8192-row prefill).
__device__ __forceinline__ bool writes_plain_indices(const RowGeometry& g, const void* values,
                                                     bool index64, const RowTarget& o) {
  return values == nullptr && !index64 && g.indices_stride == 1 &&
         o.transform.kind != MTK_INDEX_TRANSFORM_PAGE_TABLE;
}

// Calls body(write) with the row's writer of ranked winners, write(rank, composite): a plain
// store where writes_plain_indices, else write_winner.
template <class T, class Body>
__device__ __forceinline__ void with_winner_writer(const RowGeometry& g, const T* input,
                                                   void* values, void* indices, bool index64,
                                                   bool largest, const RowTarget& o, Body&& body) {
  if (writes_plain_indices(g, values, index64, o)) {
    int32_t* out = static_cast<int32_t*>(indices) + o.indices;
    // int32 outputs keep the low 32 bits of offsets[r] + position (ragged_transformed_index).
    const uint32_t offset =
        o.transform.kind == MTK_INDEX_TRANSFORM_RAGGED ? uint32_t(o.transform.offset) : 0u;
#if defined(__CUDA_ARCH__)
    // Opaque to nvcc: else it adds the row's offset and scales anew at every store (four
    // instructions a store, ncu), where one multiply-add from this register pair will do.
    asm("" : "+l"(out));
#endif
    body([=](uint32_t rank, auto c) {
      store_global(out + rank, int32_t(offset + composite_index(c)));
    });
  } else {
    body([&](uint32_t rank, auto c) {
      write_winner(g, input, values, indices, index64, largest, o, int64_t(rank), c);
    });
  }
}

// Sorted output: gathers the winners of `source` (composites at or above `least`) into
// sh.winners, sorts them and writes them, then the padding.
template <class T, class Comp, class Source>
__device__ void gather_sort_and_write(const Source& source, Comp least, BlockShared<Comp>& sh,
                                      const RowGeometry& g, const T* input, void* values,
                                      void* indices, bool index64, bool largest,
                                      const RowTarget& o) {
  if (threadIdx.x == 0) sh.winner_count = 0;
  __syncthreads();
  for_each_composite(source, [&](Comp c) {
    if (c >= least) sh.winners[atomicAdd(&sh.winner_count, 1u)] = c;
  });
  __syncthreads();
  sort_and_write(sh, int(o.count), g, input, values, indices, index64, largest, o);
}

// Selects a row's winners from `source` and writes them: sorted, gathered and sorted in shared
// memory; unsorted, in index order (write_winners_in_index_order).
template <class T, class Comp, class Source>
__device__ void select_and_write_row(const Source& source, BlockShared<Comp>& sh,
                                     const RowGeometry& g, const T* input, void* values,
                                     void* indices, bool index64, bool largest, bool sorted,
                                     const RowTarget& o) {
  constexpr int kBits = kCompositeBits<typename KeyTraits<T>::Key>;
  const Selection<Comp> start{Comp(0), 0, uint32_t(o.count), uint32_t(o.length)};
  const Comp least = least_winner<kBits>(block_refine_row<kBits>(source, start, sh));
  if (sorted) {
    gather_sort_and_write(source, least, sh, g, input, values, indices, index64, largest, o);
    return;
  }
  const WarpShare share = warp_share(source.n);
  const uint32_t rank = first_rank_of_warp(count_share_winners(source, share, least), sh.scan);
  with_winner_writer(g, input, values, indices, index64, largest, o, [&](auto&& write) {
    write_winners_in_index_order(source, share, least, rank, write);
  });
  write_padding<T>(g, values, indices, index64, o, o.count, g.k);
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

template <int Bits, class Comp>
__device__ __forceinline__ uint32_t first_digit(Comp c) {
  return uint32_t(c >> (Bits - kRowFirstDigitBits));
}

// Fills key_cache with the window's selection keys and, with `first_digits`, counts their first
// digits into it (a kRowFirstBins histogram: block_refine_row's first round, taken as the keys
// arrive instead of in a pass of its own). A contiguous window is read in 16-byte loads.
template <int Bits, class T, class Key>
__device__ __forceinline__ void cache_row_keys(const InputRow<T>& source, Key* key_cache,
                                               uint32_t* first_digits) {
  const uint32_t n = uint32_t(source.n);
  auto keep = [&](uint32_t i, T v) {
    const Key key = selection_key(v, source.largest);
    key_cache[i] = key;
    if (first_digits != nullptr) {
      atomicAdd(&first_digits[first_digit<Bits>(make_composite(key, i))], 1u);
    }
  };
  if (source.stride != 1) {
#pragma unroll 4
    for (uint32_t i = threadIdx.x; i < n; i += kBlockThreads) {
      keep(i, source.base[int64_t(i) * source.stride]);
    }
    return;
  }
  constexpr uint32_t kPerVector = 16 / sizeof(T);
  constexpr int kVectorsInFlight = 2;
  const uint32_t misaligned = uint32_t(reinterpret_cast<uintptr_t>(source.base) % 16) / sizeof(T);
  const uint32_t head = min(n, misaligned == 0 ? 0u : kPerVector - misaligned);
  const uint32_t vectors = (n - head) / kPerVector;
  const uint4* const vector_base = reinterpret_cast<const uint4*>(source.base + head);
  if (threadIdx.x < head) keep(threadIdx.x, source.base[threadIdx.x]);
  for (uint32_t first = threadIdx.x; first < vectors; first += kBlockThreads * kVectorsInFlight) {
    uint4 batch[kVectorsInFlight];
#pragma unroll
    for (int u = 0; u < kVectorsInFlight; ++u) {
      const uint32_t v = first + u * kBlockThreads;
      batch[u] = v < vectors ? load_streaming(vector_base + v) : uint4{0, 0, 0, 0};
    }
#pragma unroll
    for (int u = 0; u < kVectorsInFlight; ++u) {
      const uint32_t v = first + u * kBlockThreads;
      if (v >= vectors) break;
      T items[kPerVector];
      memcpy(items, &batch[u], sizeof(items));
#pragma unroll
      for (uint32_t e = 0; e < kPerVector; ++e) keep(head + v * kPerVector + e, items[e]);
    }
  }
  for (uint32_t i = head + vectors * kPerVector + threadIdx.x; i < n; i += kBlockThreads) {
    keep(i, source.base[i]);
  }
}

// The cached row's partition for the unsorted output, as WarpShare's but in tiles of 32 lanes
// by kKeysPerLane consecutive keys, each lane's read in one 16-byte load: the sweeps over the
// cache then spend their instructions on the keys, not on a loop and a ballot per 32 of them.
template <class Key>
constexpr uint32_t kKeysPerLane = 16 / sizeof(Key);

struct CachedShare {
  uint32_t begin, end;  // positions in the window
};

template <class Key>
__device__ __forceinline__ uint32_t cached_share_size(uint32_t n) {
  constexpr uint32_t kWarps = kBlockThreads / 32, kTile = 32 * kKeysPerLane<Key>;
  return (n + kWarps * kTile - 1) / (kWarps * kTile) * kTile;
}

template <class Key>
__device__ __forceinline__ CachedShare cached_warp_share(uint32_t n) {
  const uint32_t size = cached_share_size<Key>(n);
  const uint32_t begin = min(n, (threadIdx.x >> 5) * size);
  return CachedShare{begin, min(n, begin + size)};
}

// Calls visit(first, keys) for each of the calling warp's tiles of `share`, on every lane: the
// lane's kKeysPerLane keys at positions first, first + 1, ... (those at share.end or past it are
// not the row's). The cache holds whole 16-byte words (block_key_cache_bytes is rounded up).
template <class Key, class Visit>
__device__ __forceinline__ void sweep_cached_share(const Key* keys, const CachedShare& share,
                                                   Visit&& visit) {
  constexpr uint32_t kPerLane = kKeysPerLane<Key>;
  for (uint32_t tile = share.begin; tile < share.end; tile += 32 * kPerLane) {
    const uint32_t first = tile + (threadIdx.x & 31) * kPerLane;
    uint4 word{0, 0, 0, 0};
    if (first < share.end) word = *reinterpret_cast<const uint4*>(keys + first);
    Key lane_keys[kPerLane];
    memcpy(lane_keys, &word, sizeof(lane_keys));
    visit(first, lane_keys);
  }
}

// The winners of the calling warp's share among the bucket's elements gathered in `gathered`.
template <class Comp>
__device__ __forceinline__ uint32_t count_gathered_share_winners(const Comp* gathered,
                                                                 uint32_t count,
                                                                 const CachedShare& share,
                                                                 Comp least) {
  uint32_t winners = 0;
  for (uint32_t j = threadIdx.x & 31; j < count; j += 32) {
    const Comp c = gathered[j];
    const uint32_t index = composite_index(c);
    winners += c >= least && index >= share.begin && index < share.end ? 1u : 0u;
  }
  return warp_sum(winners);
}

// The winners (composites at or above `least`) among the calling warp's share of the cache.
template <class Key, class Comp>
__device__ __forceinline__ uint32_t count_cached_share_winners(const Key* keys,
                                                               const CachedShare& share,
                                                               Comp least) {
  uint32_t winners = 0;
  sweep_cached_share(keys, share, [&](uint32_t first, const Key(&lane_keys)[kKeysPerLane<Key>]) {
#pragma unroll
    for (uint32_t e = 0; e < kKeysPerLane<Key>; ++e) {
      winners += first + e < share.end && make_composite(lane_keys[e], first + e) >= least;
    }
  });
  return warp_sum(winners);
}

// write_winners_in_index_order over the calling warp's share of the cache: a lane's winners
// within a tile are ranked by a warp scan of the lanes' counts.
template <class Key, class Comp, class Write>
__device__ __forceinline__ void write_cached_winners_in_index_order(const Key* keys,
                                                                    const CachedShare& share,
                                                                    Comp least, uint32_t rank,
                                                                    Write&& write) {
  constexpr uint32_t kPerLane = kKeysPerLane<Key>;
  sweep_cached_share(keys, share, [&](uint32_t first, const Key(&lane_keys)[kPerLane]) {
    uint32_t wins = 0;
#pragma unroll
    for (uint32_t e = 0; e < kPerLane; ++e) {
      const bool win = first + e < share.end && make_composite(lane_keys[e], first + e) >= least;
      wins |= uint32_t(win) << e;
    }
    const uint32_t count = uint32_t(__popc(wins));
    const uint32_t inclusive = warp_inclusive_sum(count);
    uint32_t at = rank + inclusive - count;
#pragma unroll
    for (uint32_t e = 0; e < kPerLane; ++e) {
      if ((wins >> e) & 1u) write(at++, make_composite(lane_keys[e], first + e));
    }
    rank += __shfl_sync(0xffffffffu, inclusive, 31);
  });
}

// Zeroes the first digits' histogram of select_and_write_cached_row (in sh.winners) and the
// gathered bucket's count before the row's target is shared: the barrier of share_row_target
// then orders them too, and they are done while thread 0 waits for the row's length and offsets
// (the wait at that barrier was a tenth of the prefill's warp samples).
template <class Comp>
__device__ __forceinline__ void clear_first_digits(BlockShared<Comp>& sh) {
  uint32_t* const first_digits = reinterpret_cast<uint32_t*>(sh.winners);
  for (int b = threadIdx.x; b < kRowFirstBins; b += kBlockThreads) first_digits[b] = 0;
  if (threadIdx.x == 0) sh.winner_count = 0;
}

// choose_bucket over kBlockBins bins by one warp: lane l holds the 8 bins from the top's
// 8l-th down, so the bins above a lane's are the lower lanes' (one scan up the warp); the lane
// whose bins reach `needed` is found by a vote, and its 8 bins are then scanned by 8 lanes, one
// each, where a search through them on every lane was a quarter of warp 0's path in the
// prefill's refinement (ncu), which 15 warps wait out.
__device__ __forceinline__ BucketChoice warp_choose_bucket(const uint32_t* hist, uint32_t needed) {
  constexpr int kPerLane = kBlockBins / 32;
  const uint32_t lane = threadIdx.x & 31;
  const int top = kBlockBins - 1 - int(lane) * kPerLane;
  uint32_t mine = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) mine += hist[top - j];
  const uint32_t inclusive = warp_inclusive_sum(mine);
  const bool holds = inclusive - mine < needed && needed <= inclusive;
  const int owner = __ffs(__ballot_sync(0xffffffffu, holds)) - 1;
  const uint32_t above_owner = __shfl_sync(0xffffffffu, inclusive - mine, owner);
  const int owner_top = kBlockBins - 1 - owner * kPerLane;
  const uint32_t count = lane < uint32_t(kPerLane) ? hist[owner_top - int(lane)] : 0u;
  const uint32_t through = above_owner + warp_inclusive_sum(count);
  const bool reaches = lane < uint32_t(kPerLane) && through >= needed;
  const int first = __ffs(__ballot_sync(0xffffffffu, reaches)) - 1;
  return BucketChoice{uint32_t(owner_top - first),
                      __shfl_sync(0xffffffffu, through - count, first),
                      __shfl_sync(0xffffffffu, count, first)};
}

// Gathered buckets of at most this many keys are refined by one warp (warp_refined_least).
constexpr uint32_t kWarpRefineMaxItems = 512;

// least_winner of block_refine over `count` gathered composites (all under `sel`'s prefix),
// refined by warp 0 alone while the other warps wait at one barrier: the block's rounds over a
// few hundred keys took each of 16 warps ~130 instructions and five barriers a round (ncu, the
// prefill). All threads call and return the same composite.
//
// With `share_size` (not 0), warp 0 then also ranks the warps' shares of the unsorted output:
// sh.warp_first_rank holds each warp's winners above the bucket on entry, and the rank of its
// first winner on return, the bucket's winners counted in by the one warp that holds them, so
// that each of 16 warps no longer reads the whole bucket to count its own and scans the block.
template <int Bits, class Comp>
__device__ Comp warp_refined_least(const Comp* items, uint32_t count, Selection<Comp> sel,
                                   BlockShared<Comp>& sh, uint32_t share_size) {
  static_assert(sizeof(sh.hist) >= sizeof(Comp), "room for the result");
  constexpr int kWarps = kBlockThreads / 32;
  static_assert(kWarps <= 32, "a lane a warp");
  // The loops over the items run the same trips on every lane: where each lane stopped at its
  // own last item, the warp left them diverged, and the warp collectives after them took
  // their divergent fallback in 97% of rounds (ncu: ~115-215 instructions a row on the path
  // the other 15 warps wait out).
  if (threadIdx.x < 32) {
    while (sel.in_bucket != sel.needed && sel.resolved < Bits) {
      const int width = min(kBlockDigitBits, Bits - sel.resolved);
      const int shift = Bits - sel.resolved - width;
      for (int b = int(threadIdx.x); b < kBlockBins; b += 32) sh.hist[b] = 0;
      __syncwarp();
      for (uint32_t first = 0; first < count; first += 32) {
        const uint32_t j = first + threadIdx.x;
        if (j < count && has_prefix<Bits>(items[j], sel.prefix, sel.resolved)) {
          atomicAdd(&sh.hist[uint32_t(items[j] >> shift) & ((1u << width) - 1)], 1u);
        }
      }
      __syncwarp();
      sel.narrow(warp_choose_bucket(sh.hist, sel.needed), width);
      __syncwarp();
    }
    const Comp least = least_winner<Bits>(sel);
    if (share_size != 0) {
      // index / share_size as a multiply-high by the rounded-up reciprocal: exact for indices
      // below 16 shares of under 2^14 positions (a cached row's), and one instruction where a
      // division is about twenty on warp 0's path, which the other warps wait out.
      const uint32_t reciprocal = 0xffffffffu / share_size + 1u;
      for (uint32_t first = 0; first < count; first += 32) {
        const uint32_t j = first + threadIdx.x;
        const Comp c = j < count ? items[j] : Comp(0);
        const uint32_t warp = uint32_t((uint64_t(composite_index(c)) * reciprocal) >> 32);
        if (j < count && c >= least) atomicAdd(&sh.warp_first_rank[warp], 1u);
      }
      __syncwarp();
      const uint32_t lane = threadIdx.x;
      const uint32_t winners = lane < uint32_t(kWarps) ? sh.warp_first_rank[lane] : 0u;
      const uint32_t inclusive = warp_inclusive_sum(winners);
      if (lane < uint32_t(kWarps)) sh.warp_first_rank[lane] = inclusive - winners;
    }
    if (threadIdx.x == 0) memcpy(sh.hist, &least, sizeof(least));
  }
  __syncthreads();
  Comp least;
  memcpy(&least, sh.hist, sizeof(least));
  return least;
}

// select_and_write_row for a row whose keys fit the cache (its first digits' histogram cleared
// by clear_first_digits). The first round's histogram is
// counted while the keys are cached; then one sweep over the warps' shares counts the elements
// in buckets above the chosen one (all winners) and gathers the bucket's own elements (a few
// hundred on most rows) into sh.winners, so the further rounds histogram those alone instead of
// the whole row each (the prefill's rounds were a third of its instructions). A bucket too big
// to gather (ties, few distinct values) takes the rounds over the whole row. A window of at most
// k elements whose indices alone are wanted is written without reading it.
template <class T, class Key, class Comp>
__device__ void select_and_write_cached_row(const InputRow<T>& source, Key* key_cache,
                                            BlockShared<Comp>& sh, const RowGeometry& g,
                                            const T* input, void* values, void* indices,
                                            bool index64, bool largest, bool sorted,
                                            const RowTarget& o) {
  constexpr int kBits = kCompositeBits<Key>;
  static_assert(sizeof(sh.winners) >= kRowFirstBins * sizeof(uint32_t), "room for the bins");
  const uint32_t n = uint32_t(o.length);
  if (!sorted && n <= o.count && writes_plain_indices(g, values, index64, o)) {
    with_winner_writer(g, input, values, indices, index64, largest, o, [&](auto&& write) {
      for (uint32_t i = threadIdx.x; i < n; i += kBlockThreads) write(i, make_composite(Key(0), i));
    });
    write_padding<T>(g, values, indices, index64, o, o.count, g.k);
    return;
  }
  const bool narrows = n > o.count;
  uint32_t* const first_digits = reinterpret_cast<uint32_t*>(sh.winners);
  cache_row_keys<kBits>(source, key_cache, narrows ? first_digits : nullptr);
  __syncthreads();
  Selection<Comp> sel{Comp(0), 0, uint32_t(o.count), n};
  if (narrows) {
    sel.narrow(choose_bucket<kRowFirstBins, kBlockThreads>(first_digits, sel.needed, sh.scan,
                                                           &sh.choice),
               kRowFirstDigitBits);
  }
  const CachedShare share = cached_warp_share<Key>(n);
  const bool gathers_bucket = narrows && sel.in_bucket <= uint32_t(kSortCapacity);
  const uint32_t gathered = sel.in_bucket;
  // Warp 0 refines the gathered bucket and ranks the warps' shares (warp_refined_least).
  const bool warp_ranks = gathers_bucket && gathered <= kWarpRefineMaxItems;
  uint32_t lane_above = 0;  // the lane's elements in buckets above the chosen one (all winners)
  uint32_t warp_above = 0;
  Comp least;
  if (gathers_bucket) {
    const uint32_t bucket = uint32_t(sel.prefix);
    sweep_cached_share(key_cache, share, [&](uint32_t first, const Key(&lane_keys)[kKeysPerLane<Key>]) {
      uint32_t lane_bucket = 0;  // bit e: the lane's key e is in the chosen bucket
#pragma unroll
      for (uint32_t e = 0; e < kKeysPerLane<Key>; ++e) {
        const uint32_t digit = first_digit<kBits>(make_composite(lane_keys[e], first + e));
        const bool valid = first + e < share.end;
        lane_above += valid && digit > bucket;
        lane_bucket |= uint32_t(valid && digit == bucket) << e;
      }
      // One claim a lane and tile: claimed a key at a time, each claim was a warp's vote and
      // shuffle (nvcc aggregates atomics on one address), four times a tile.
      if (lane_bucket != 0) {
        uint32_t at = atomicAdd(&sh.winner_count, uint32_t(__popc(lane_bucket)));
#pragma unroll
        for (uint32_t e = 0; e < kKeysPerLane<Key>; ++e) {
          if ((lane_bucket >> e) & 1u) sh.winners[at++] = make_composite(lane_keys[e], first + e);
        }
      }
    });
    warp_above = warp_sum(lane_above);
    if ((threadIdx.x & 31) == 0) sh.warp_first_rank[threadIdx.x >> 5] = warp_above;
    __syncthreads();
    if (warp_ranks) {
      least = warp_refined_least<kBits>(sh.winners, gathered, sel, sh,
                                        sorted ? 0u : cached_share_size<Key>(n));
    } else {
      least = least_winner<kBits>(
          block_refine<kBits>(BufferSource<Comp>{sh.winners, int64_t(gathered)}, sel, sh));
    }
  } else {
    least = least_winner<kBits>(block_refine<kBits>(CachedKeys<Key>{key_cache, n}, sel, sh));
  }
  if (sorted) {
    gather_sort_and_write(CachedKeys<Key>{key_cache, n}, least, sh, g, input, values, indices,
                          index64, largest, o);
    return;
  }
  uint32_t rank;
  if (warp_ranks) {
    rank = sh.warp_first_rank[threadIdx.x >> 5];
  } else {
    const uint32_t share_winners =
        gathers_bucket
            ? warp_above + count_gathered_share_winners(sh.winners, gathered, share, least)
            : count_cached_share_winners(key_cache, share, least);
    rank = first_rank_of_warp(share_winners, sh.scan);
  }
  with_winner_writer(g, input, values, indices, index64, largest, o, [&](auto&& write) {
    write_cached_winners_in_index_order(key_cache, share, least, rank, write);
  });
  write_padding<T>(g, values, indices, index64, o, o.count, g.k);
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
  if (key_cache != nullptr) clear_first_digits(sh);
  const RowTarget& o = share_row_target(sh, g, ragged, row);
  const InputRow<T> source = input_row(g, input, o, largest);
  if (key_cache == nullptr) {
    select_and_write_row(source, sh, g, input, values, indices, index64, largest, sorted, o);
  } else {
    select_and_write_cached_row(source, key_cache, sh, g, input, values, indices, index64,
                                largest, sorted, o);
  }
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
