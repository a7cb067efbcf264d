// Top-k of short rows: one warp per row (n <= 1024, k <= 32). The row sits in registers; k rounds
// of a warp-wide max pick the winners already in rank order. One launch, no scratch: the MoE
// routing shapes.
//
// Two kernels share the row loaders and the selection:
//  - warp_topk_kernel reads its row straight from global memory: whole 16-byte vectors per lane
//    when the row is contiguous and aligned, one element per load otherwise;
//  - warp_topk_tile_kernel serves dim-0 inputs (consecutive rows adjacent in memory, elements far
//    apart), where a warp reading its own row would touch 32 cache lines per load: a block stages
//    kTileRows rows through shared memory with loads that each cover kTileRows adjacent rows.
#pragma once

#include <cstdint>
#include <cstring>

#include "cuda/device_utils.cuh"

namespace mtk {
namespace cuda {

constexpr int kWarpRowThreads = 128;     // 4 rows per block
constexpr int kWarpMaxK = 32;            // lane r holds rank r
constexpr int kWarpMaxItems = 32;        // per lane: rows up to 1024
constexpr int kTileRows = 32;            // dim-0 tile: rows per block, one warp each
constexpr int kTileThreads = kTileRows * 32;
// A tile's dynamic shared memory (rank table and rows) stays within what a launch gets without
// an opt-in; larger tiles take the direct kernel.
constexpr size_t kTileMaxBytes = 48 * 1024;

// A row position packed under its key so that one unsigned max picks the better element: the
// key in the high bits, the complemented position below it (n <= 1024, so 16 bits are enough
// and the packed word is never 0 for a real element; 0 marks "absent or already taken").
template <class Key> struct PackedOf { using type = uint32_t; };             // 8/16-bit keys
template <> struct PackedOf<uint32_t> { using type = uint64_t; };
template <> struct PackedOf<uint64_t> { using type = unsigned __int128; };
template <class Key> constexpr int kPackedIndexBits = sizeof(Key) <= 2 ? 16 : 32;

template <class T> using KeyOf = typename KeyTraits<T>::Key;
template <class T> using PackedFor = typename PackedOf<KeyOf<T>>::type;
template <class T>
constexpr uint32_t kComplementMask = uint32_t((uint64_t(1) << kPackedIndexBits<KeyOf<T>>) - 1);

template <class T>
__device__ __forceinline__ uint32_t position_complement(int position) {
  return ~uint32_t(position) & kComplementMask<T>;
}

template <class Packed>
__device__ __forceinline__ uint32_t packed_position(Packed p) {
  constexpr int kIndexBits = sizeof(Packed) == 4 ? 16 : 32;
  return ~uint32_t(p) & uint32_t((uint64_t(1) << kIndexBits) - 1);
}

template <class T>
__device__ __forceinline__ PackedFor<T> pack_key(KeyOf<T> key, uint32_t complement) {
  return (PackedFor<T>(key) << kPackedIndexBits<KeyOf<T>>) | PackedFor<T>(complement);
}

// Loaded in place of elements past the row's end: neither NaN nor +-0 in any float layout, so it
// never sends a row to the exact keys; its slot is cleared before selection.
constexpr int kAbsentBits = 1;

template <class T>
__device__ __forceinline__ PackedFor<T> pack_exact(Bits<T> bits, uint32_t complement,
                                                   bool largest) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  return pack_key<T>(selection_key(value, largest), complement);
}

// Float types by their bit layout. For every value but NaN and +-0 the selection key is the bits
// with the sign bit flipped, and all bits flipped for negative values (float_bits_to_key in
// core/ordered_key.hpp): a few branch-free instructions, where selection_key also has to test for
// the two special cases and compiles to branches. The loaders compute these plain keys first and
// load a row again with selection_key when it holds NaN or +-0. Other types have no special
// values: selection_key is branch-free for them already.
template <class T> struct FloatLayout { static constexpr bool kFloat = false; };
template <> struct FloatLayout<float> {
  static constexpr bool kFloat = true;
  static constexpr uint32_t kSign = 0x80000000u, kExponent = 0x7f800000u;
};
template <> struct FloatLayout<double> {
  static constexpr bool kFloat = true;
  static constexpr uint64_t kSign = 0x8000000000000000ull, kExponent = 0x7ff0000000000000ull;
};
template <> struct FloatLayout<f16_bits> {
  static constexpr bool kFloat = true;
  static constexpr uint16_t kSign = 0x8000, kExponent = 0x7c00;
};
template <> struct FloatLayout<bf16_bits> {
  static constexpr bool kFloat = true;
  static constexpr uint16_t kSign = 0x8000, kExponent = 0x7f80;
};
template <class T> constexpr bool kPlainFirst = FloatLayout<T>::kFloat;

// `flip` is all ones for largest = false (the key complemented, as in selection_key), else 0.
// `special` is set when the element is NaN or +-0: its plain key is then not its key.
template <class T>
__device__ __forceinline__ PackedFor<T> pack_plain(Bits<T> bits, uint32_t complement,
                                                   Bits<T> flip, bool& special) {
  using Layout = FloatLayout<T>;
  // 16-bit values are widened so that `magnitude - 1` wraps for +-0 instead of promoting to int.
  using Word = typename BitsOfSize<(sizeof(T) < 4 ? 4 : int(sizeof(T)))>::type;
  const Word b = bits;
  const Word magnitude = b & Word(Bits<T>(~Layout::kSign));
  special |= Word(magnitude - 1) >= Word(Layout::kExponent);
  const Word negative = (b & Layout::kSign) ? ~Word(0) : Word(0);
  const Word key = b ^ negative ^ (Word(Layout::kSign) & ~negative) ^ Word(flip);
  return pack_key<T>(KeyOf<T>(key), complement);
}

// pack_plain for the two 16-bit floats of one 32-bit word (positions p and p + 1, `complement`
// belonging to p) with 32-bit operations. Bit 15 of each half of `special_bits` collects NaN and
// +-0; the other bits are junk. No half carries into the other: magnitudes are below 0x8000.
template <class T>
__device__ __forceinline__ void pack_plain_pair(uint32_t word, uint32_t complement, uint32_t flip,
                                                uint32_t& special_bits, uint32_t& low,
                                                uint32_t& high) {
  static_assert(sizeof(T) == 2 && FloatLayout<T>::kFloat, "pairs of 16-bit floats");
  constexpr uint32_t kSigns = 0x80008000u;
  constexpr uint32_t kToNan = 0x7fffu - FloatLayout<T>::kExponent;  // bit 15 iff above exponent
  const uint32_t magnitude = word & ~kSigns;
  const uint32_t nonzero = magnitude + 0x7fff7fffu;   // bit 15 iff magnitude >= 1
  const uint32_t nan = magnitude + kToNan * 0x10001u;
  special_bits |= ~nonzero | nan;
  const uint32_t negative = ((word >> 15) & 0x00010001u) * 0xffffu;  // halves: sign ? ones : 0
  const uint32_t keys = word ^ negative ^ (kSigns & ~negative) ^ flip;
  low = (keys << 16) | complement;
  high = (keys & 0xffff0000u) | (complement - 1);
}

template <class Packed>
__device__ __forceinline__ Packed warp_max(Packed mine) {
  constexpr unsigned kAll = 0xffffffffu;
  if constexpr (sizeof(Packed) == 4) {
    return __reduce_max_sync(kAll, mine);
  } else if constexpr (sizeof(Packed) == 8) {
    const uint32_t high = __reduce_max_sync(kAll, uint32_t(mine >> 32));
    const uint32_t low = __reduce_max_sync(kAll, uint32_t(mine >> 32) == high ? uint32_t(mine) : 0u);
    return (Packed(high) << 32) | low;
  } else {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const uint64_t high = __shfl_xor_sync(kAll, uint64_t(mine >> 64), offset);
      const uint64_t low = __shfl_xor_sync(kAll, uint64_t(mine), offset);
      const Packed other = (Packed(high) << 64) | low;
      mine = other > mine ? other : mine;
    }
    return mine;
  }
}

// Sorts a lane's slots into descending order in registers (a bitonic network: every index is a
// compile-time constant once unrolled, so nothing spills to local memory).
template <int N, class P>
__device__ __forceinline__ void sort_slots_descending(P (&slots)[N]) {
#pragma unroll
  for (int span = 2; span <= N; span <<= 1) {
#pragma unroll
    for (int stride = span >> 1; stride > 0; stride >>= 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int j = i ^ stride;
        if (j > i) {
          const P high = slots[i] > slots[j] ? slots[i] : slots[j];
          const P low = slots[i] > slots[j] ? slots[j] : slots[i];
          const bool descending = (i & span) == 0;
          slots[i] = descending ? high : low;
          slots[j] = descending ? low : high;
        }
      }
    }
  }
}

// The exact selection: each lane sorts its slots, so its best is always slot 0; each of k rounds
// takes the warp-wide maximum of the lanes' bests, and the lane that owned the winner shifts its
// slots down by one. Returns, in lane r < k, the position of rank r.
template <int Items, class Packed>
__device__ __forceinline__ uint32_t select_by_sorting(Packed (&slots)[Items], int k, int lane) {
  sort_slots_descending(slots);
  uint32_t my_rank_position = 0;
  for (int r = 0; r < k; ++r) {
    const Packed winner = warp_max(slots[0]);
    if (lane == r) my_rank_position = packed_position(winner);
    if (slots[0] == winner) {
#pragma unroll
      for (int j = 0; j + 1 < Items; ++j) slots[j] = slots[j + 1];
      slots[Items - 1] = Packed(0);
    }
  }
  return my_rank_position;
}

// Returns, in lane r < k, the position of rank r among the warp's slots (unsorted; 0 = absent).
// A row's winners rarely cluster in one lane (8 of 256 random elements: three in one lane of 8
// in ~4% of rows), so the rounds first run on each lane's best two only: 2-3 min/max per slot
// instead of a sorting network, and a round moves two registers instead of shifting all slots.
// A lane that gave up both holds kUnknown (below every element, above "absent") and may hide a
// third element above the last winner; only then is the row selected again by sorting. Any input
// is exact; ties and sorted rows merely take the slower way more often.
template <int Items, class Packed>
__device__ __forceinline__ uint32_t select_ranks(Packed (&slots)[Items], int k, int lane) {
  if constexpr (Items <= 2) {
    return select_by_sorting(slots, k, lane);
  } else {
    // A real element's packed low bits are ~position, far above 1 (positions are below 1024).
    constexpr Packed kUnknown = 1;
    Packed best = 0, second = 0;
#pragma unroll
    for (int j = 0; j < Items; ++j) {
      const Packed s = slots[j];
      const Packed lower = s < best ? s : best;
      second = lower > second ? lower : second;
      best = s > best ? s : best;
    }
    uint32_t my_rank_position = 0;
    Packed winner = 0;
    for (int r = 0; r < k; ++r) {
      winner = warp_max(best);
      if (lane == r) my_rank_position = packed_position(winner);
      if (best == winner) {
        best = second;
        second = kUnknown;
      }
    }
    const bool emptied = best == kUnknown;
    if (__any_sync(0xffffffffu, emptied)) {
      int at_least_last = 0;
#pragma unroll
      for (int j = 0; j < Items; ++j) at_least_last += slots[j] >= winner ? 1 : 0;
      if (__any_sync(0xffffffffu, emptied && at_least_last > 2)) {
        my_rank_position = select_by_sorting(slots, k, lane);
      }
    }
    return my_rank_position;
  }
}

// Loads one element per slot: slot j of lane `lane` is element j*32 + lane. Every load is issued
// before any key is computed, so a lane has Items loads in flight rather than one at a time.
// Returns whether a plain key missed (see FloatLayout).
template <class T, int Items, bool Plain>
__device__ __forceinline__ bool load_row_elements(const T* row, int64_t stride, int n, int lane,
                                                  bool largest, PackedFor<T> (&slots)[Items]) {
  const Bits<T>* first = reinterpret_cast<const Bits<T>*>(row) + int64_t(lane) * stride;
  const int64_t step = stride * 32;
  Bits<T> raw[Items];
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    raw[j] = j * 32 + lane < n ? first[j * step] : Bits<T>(kAbsentBits);
  }
  const Bits<T> flip = largest ? Bits<T>(0) : Bits<T>(~Bits<T>(0));
  bool special = false;
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    const int position = j * 32 + lane;
    const uint32_t complement = position_complement<T>(position);
    PackedFor<T> packed;
    if constexpr (Plain) {
      packed = pack_plain<T>(raw[j], complement, flip, special);
    } else {
      packed = pack_exact<T>(raw[j], complement, largest);
    }
    slots[j] = position < n ? packed : 0;
  }
  return special;
}

template <int Bytes> struct VectorOfSize;
template <> struct VectorOfSize<1> { using type = uint8_t; };
template <> struct VectorOfSize<2> { using type = uint16_t; };
template <> struct VectorOfSize<4> { using type = uint32_t; };
template <> struct VectorOfSize<8> { using type = uint2; };
template <> struct VectorOfSize<16> { using type = uint4; };

// Loads a contiguous row (global or shared memory) whose start is aligned to VectorBytes: vector
// c of lane `lane` is vector c*32 + lane of the row, so a warp's load covers consecutive bytes.
// The vector that straddles the row's end is read element by element; none reads past it.
// Returns whether a plain key missed (see FloatLayout).
template <class T, int Items, bool Plain, int VectorBytes>
__device__ __forceinline__ bool load_row_vectors(const T* row, int n, int lane, bool largest,
                                                 PackedFor<T> (&slots)[Items]) {
  constexpr int kPer = VectorBytes / int(sizeof(T));
  constexpr int kVectors = Items / kPer;
  static_assert(kPer >= 1 && kVectors * kPer == Items, "a lane's slots are whole vectors");
  using Vector = typename VectorOfSize<VectorBytes>::type;
  const Vector* vectors = reinterpret_cast<const Vector*>(row);
  const Bits<T>* elements = reinterpret_cast<const Bits<T>*>(row);
  Vector raw[kVectors];
#pragma unroll
  for (int c = 0; c < kVectors; ++c) {
    const int first = (c * 32 + lane) * kPer;
    if (first + kPer <= n) {
      raw[c] = vectors[c * 32 + lane];
    } else {
      Bits<T> part[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        part[e] = first + e < n ? elements[first + e] : Bits<T>(kAbsentBits);
      }
      memcpy(&raw[c], part, VectorBytes);
    }
  }
  const Bits<T> flip = largest ? Bits<T>(0) : Bits<T>(~Bits<T>(0));
  bool special = false;
  uint32_t special_pairs = 0;
#pragma unroll
  for (int c = 0; c < kVectors; ++c) {
    const int first = (c * 32 + lane) * kPer;
    const uint32_t complement = position_complement<T>(first);
    PackedFor<T>* out = slots + c * kPer;
    if constexpr (Plain && sizeof(T) == 2 && VectorBytes >= 4) {
      uint32_t words[VectorBytes / 4];
      memcpy(words, &raw[c], VectorBytes);
#pragma unroll
      for (int w = 0; w < VectorBytes / 4; ++w) {
        pack_plain_pair<T>(words[w], complement - 2 * w, largest ? 0u : ~0u, special_pairs,
                           out[2 * w], out[2 * w + 1]);
      }
    } else {
      Bits<T> part[kPer];
      memcpy(part, &raw[c], VectorBytes);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        if constexpr (Plain) {
          out[e] = pack_plain<T>(part[e], complement - e, flip, special);
        } else {
          out[e] = pack_exact<T>(part[e], complement - e, largest);
        }
      }
    }
    if (first + kPer > n) {  // the row ends inside or before this vector
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        if (first + e >= n) out[e] = 0;
      }
    }
  }
  return special || (special_pairs & 0x80008000u) != 0;
}

// Widest load a lane makes for Items slots of T from global memory: 16 bytes, or all its slots
// when they are fewer.
template <class T, int Items>
constexpr int kRowVectorBytes = Items * int(sizeof(T)) < 16 ? Items * int(sizeof(T)) : 16;

template <class T, int Items, bool Plain>
__device__ __forceinline__ bool load_global_row(const T* row, int64_t stride, bool vectors, int n,
                                                int lane, bool largest,
                                                PackedFor<T> (&slots)[Items]) {
  return vectors ? load_row_vectors<T, Items, Plain, kRowVectorBytes<T, Items>>(row, n, lane,
                                                                               largest, slots)
                 : load_row_elements<T, Items, Plain>(row, stride, n, lane, largest, slots);
}

// Rows whose packed slots fit 8 registers fit the 32 registers per thread that keep 64 warps
// resident (the many-row MoE shapes: 16384 rows are two such waves); larger rows would spill.
template <class T, int Items>
constexpr int kWarpRowMinBlocks = Items * sizeof(PackedFor<T>) <= 32 ? 16 : 1;

template <class T, int Items>
__global__ void __launch_bounds__(kWarpRowThreads, (kWarpRowMinBlocks<T, Items>))
    warp_topk_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                     bool largest) {
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * (kWarpRowThreads / 32) + (threadIdx.x >> 5);
  if (row >= g.rows) return;
  const RowOffsets o = device_row_offsets(g, row);
  const T* in = input + o.input;
  const int n = int(g.n), k = int(g.k);
  constexpr uintptr_t kVectorAlignment = kRowVectorBytes<T, Items>;
  const bool vectors =
      g.input_stride == 1 && reinterpret_cast<uintptr_t>(in) % kVectorAlignment == 0;

  PackedFor<T> slots[Items];
  const bool special = load_global_row<T, Items, kPlainFirst<T>>(in, g.input_stride, vectors, n,
                                                                  lane, largest, slots);
  if (kPlainFirst<T> && __any_sync(0xffffffffu, special)) {
    load_global_row<T, Items, false>(in, g.input_stride, vectors, n, lane, largest, slots);
  }
  const uint32_t my_rank_position = select_ranks(slots, k, lane);
  // The winner's value is read again from the input, which this warp has just read (L1/L2).
  if (lane < k) write_result(g, input, values, indices, index64, o, lane, my_rank_position);
}

// Elements per row of a tile in shared memory: at least n, and an odd number of 4-byte words
// (8-byte for 8-byte types), so the 32 rows a staging store spans fall in distinct banks. Rows
// then start 4-byte aligned (8 for 8-byte types).
template <class T>
__host__ __device__ constexpr int tile_pitch(int64_t n) {
  constexpr int kUnit = sizeof(T) < 4 ? 4 : int(sizeof(T));
  constexpr int kPerUnit = kUnit / int(sizeof(T));
  const int units = int((n + kPerUnit - 1) / kPerUnit);
  return (units | 1) * kPerUnit;
}

// The ranked positions of the tile's rows, then the rows.
constexpr size_t kTileRankBytes = size_t(kTileRows) * kWarpMaxK * sizeof(uint16_t);

template <class T>
constexpr size_t tile_bytes(int64_t n) {
  return kTileRankBytes + size_t(kTileRows) * size_t(tile_pitch<T>(n)) * sizeof(T);
}

// The tile kernel runs 1024 threads, so at most 64 registers each: rows whose packed slots take
// more than 16 registers would spill, and take the direct kernel instead.
template <class T, int Items>
constexpr bool kTileKernelFits = Items * sizeof(PackedFor<T>) <= 64;

// A lane's loads from a tile row in shared memory: whole 4-byte words of narrow types.
template <class T, int Items>
constexpr int kTileVectorBytes =
    sizeof(T) >= 4 ? int(sizeof(T)) : (Items * int(sizeof(T)) < 4 ? Items * int(sizeof(T)) : 4);

// dim-0 rows: row r of the tile starts at input + first_row + r (batch stride 1) and its
// elements are g.input_stride apart. Staging: warp w loads elements w, w+32, ... of the tile's
// rows, lane r taking row r, so each load covers kTileRows adjacent elements; then warp r selects
// row r from shared memory. The ranked positions go through shared memory as well, so the
// outputs are written rank by rank across the tile's rows: contiguous when the outputs are
// dim-0 too.
template <class T, int Items>
__global__ void __launch_bounds__(kTileThreads)
    warp_topk_tile_kernel(RowGeometry g, const T* input, void* values, void* indices,
                          bool index64, bool largest) {
  extern __shared__ __align__(16) unsigned char tile_storage[];
  auto* ranked = reinterpret_cast<uint16_t(*)[kWarpMaxK]>(tile_storage);
  Bits<T>* tile = reinterpret_cast<Bits<T>*>(tile_storage + kTileRankBytes);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = int(g.n), k = int(g.k);
  const int pitch = tile_pitch<T>(n);
  const int64_t first_row = int64_t(blockIdx.x) * kTileRows;
  const int tile_rows = int(g.rows - first_row < kTileRows ? g.rows - first_row : kTileRows);

  {
    const Bits<T>* element = reinterpret_cast<const Bits<T>*>(input) + first_row + lane +
                             int64_t(warp) * g.input_stride;
    const int64_t step = g.input_stride * 32;
    const bool in_tile = lane < tile_rows;
    Bits<T> raw[Items];
#pragma unroll
    for (int j = 0; j < Items; ++j, element += step) {
      if (in_tile && j * 32 + warp < n) raw[j] = *element;
    }
    // Keeps the compiler from storing the first elements before the later loads are issued:
    // all of a lane's loads are in flight together.
    __syncwarp();
#pragma unroll
    for (int j = 0; j < Items; ++j) {
      if (in_tile && j * 32 + warp < n) tile[lane * pitch + j * 32 + warp] = raw[j];
    }
  }
  __syncthreads();

  if (warp < tile_rows) {
    const T* row = reinterpret_cast<const T*>(tile + warp * pitch);
    constexpr int kBytes = kTileVectorBytes<T, Items>;
    PackedFor<T> slots[Items];
    const bool special =
        load_row_vectors<T, Items, kPlainFirst<T>, kBytes>(row, n, lane, largest, slots);
    if (kPlainFirst<T> && __any_sync(0xffffffffu, special)) {
      load_row_vectors<T, Items, false, kBytes>(row, n, lane, largest, slots);
    }
    const uint32_t my_rank_position = select_ranks(slots, k, lane);
    if (lane < k) ranked[warp][lane] = uint16_t(my_rank_position);
  }
  __syncthreads();

  for (int e = threadIdx.x; e < kTileRows * k; e += kTileThreads) {
    const int r = e % kTileRows, rank = e / kTileRows;
    if (r < tile_rows) {
      const RowOffsets o = device_row_offsets(g, first_row + r);
      const uint32_t position = ranked[r][rank];
      reinterpret_cast<Bits<T>*>(values)[o.values + rank * g.values_stride] =
          tile[r * pitch + position];
      const int64_t at = o.indices + rank * g.indices_stride;
      if (index64) {
        static_cast<int64_t*>(indices)[at] = int64_t(position);
      } else {
        static_cast<int32_t*>(indices)[at] = int32_t(position);
      }
    }
  }
}

}  // namespace cuda
}  // namespace mtk
