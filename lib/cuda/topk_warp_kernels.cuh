// Top-k of short rows: one warp per row (n <= 1024, k <= 32). The row sits in registers; k rounds
// of a warp-wide max pick the winners already in rank order. One launch, no scratch: the MoE
// routing shapes.
//
// Two kernels share the row loaders and the selection:
//  - warp_topk_kernel reads its row straight from global memory: whole 16-byte vectors per lane
//    when every row is contiguous, aligned and made of whole vectors, one element per load
//    otherwise;
//  - warp_topk_tile_kernel serves dim-0 inputs (consecutive rows adjacent in memory, elements far
//    apart), where a warp reading its own row would touch 32 cache lines per load: a block stages
//    kTileRows rows through shared memory with loads that each cover kTileRows adjacent rows.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

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
using PositionPacking = KeyIndexPacking<PackedFor<T>, kPackedIndexBits<KeyOf<T>>>;

template <class T>
__device__ __forceinline__ uint32_t position_complement(int position) {
  return PositionPacking<T>::field(uint32_t(position));
}

// Rows of 32- and 64-bit keys are first selected on truncated slots: one key-sized word, the
// key's bits above the lowest 10 over 10 bits of complemented position (positions are below
// 1024). A round of 32-bit keys is then one REDUX instead of two, and the per-lane work halves.
// Elements whose keys agree above those 10 bits (a "group") may come out of order;
// select_ranks reports any round whose outcome could have depended on that, and the row is
// then selected again on exact slots.
constexpr int kTruncatedIndexBits = 10;
template <class T> constexpr bool kTruncatedFirst = sizeof(KeyOf<T>) >= 4;
template <class T, bool Truncated>
using SlotFor = typename std::conditional<Truncated, KeyOf<T>, PackedFor<T>>::type;

template <bool Truncated, class Slot>
__device__ __forceinline__ uint32_t slot_position(Slot s) {
  constexpr int kIndexBits = Truncated ? kTruncatedIndexBits : sizeof(Slot) == 4 ? 16 : 32;
  return KeyIndexPacking<Slot, kIndexBits>::index(s);
}

template <class T, bool Truncated>
__device__ __forceinline__ SlotFor<T, Truncated> pack_key(KeyOf<T> key, uint32_t complement) {
  if constexpr (Truncated) {
    static_assert(sizeof(KeyOf<T>) >= 4, "narrow keys are packed exactly in 32 bits");
    constexpr KeyOf<T> kIndexMask = (KeyOf<T>(1) << kTruncatedIndexBits) - 1;
    return (key & ~kIndexMask) | (KeyOf<T>(complement) & kIndexMask);
  } else {
    return PositionPacking<T>::pack_field(key, complement);
  }
}

// Loaded in place of elements past the row's end: neither NaN nor +-0 in any float layout, so it
// never sends a row to the exact keys; its slot is cleared before selection.
constexpr int kAbsentBits = 1;

template <class T, bool Truncated>
__device__ __forceinline__ SlotFor<T, Truncated> pack_exact(Bits<T> bits, uint32_t complement,
                                                            bool largest) {
  T value;
  memcpy(&value, &bits, sizeof(T));
  return pack_key<T, Truncated>(selection_key(value, largest), complement);
}

// Float types by their bit layout. For every value but NaN and +-0 the selection key is the bits
// with the sign bit flipped, and all bits flipped for negative values (float_bits_to_key in
// core/ordered_key.hpp): a few instructions, where selection_key also has to test for the two
// special cases. The loaders compute these plain keys first and
// load a row again with selection_key when it holds NaN or +-0. Other types have no special
// values: selection_key is branch-free for them already.
template <class T, class = void> struct FloatLayout { static constexpr bool kFloat = false; };
template <class T>
struct FloatLayout<T, decltype(void(FloatFormat<T>::kSign))> : FloatFormat<T> {
  static constexpr bool kFloat = true;
};
template <class T> constexpr bool kPlainFirst = FloatLayout<T>::kFloat;

// `flip` is all ones for largest = false (the key complemented, as in selection_key), else 0.
// `special` is set when the element is NaN or +-0: its plain key is then not its key.
template <class T, bool Truncated>
__device__ __forceinline__ SlotFor<T, Truncated> pack_plain(Bits<T> bits, uint32_t complement,
                                                            Bits<T> flip, bool& special) {
  using Layout = FloatLayout<T>;
  // 16-bit values are widened so that `magnitude - 1` wraps for +-0 instead of promoting to int.
  using Word = typename BitsOfSize<(sizeof(T) < 4 ? 4 : int(sizeof(T)))>::type;
  const Word b = bits;
  const Word magnitude = b & Word(Bits<T>(~Layout::kSign));
  special |= Word(magnitude - 1) >= Word(Layout::kExponent);
  const Word negative = (b & Layout::kSign) ? ~Word(0) : Word(0);
  const Word key = b ^ negative ^ (Word(Layout::kSign) & ~negative) ^ Word(flip);
  return pack_key<T, Truncated>(KeyOf<T>(key), complement);
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

// After a round on truncated slots (see kTruncatedIndexBits) has moved on the lane that won it:
// whether this lane's next candidate shares the winner's group. If no lane notes that after any
// round, every winner was the exact maximum of what remained: an element that would have won
// before it, or in its place, only by its low key bits is in its group, and so is the candidate
// in front of that element. This covers group 0 too, where real elements and the markers 0 and
// kUnknown can coincide: every candidate is then in group 0.
template <bool Truncated, class Slot>
__device__ __forceinline__ void note_unclear(Slot candidate, Slot winner, bool& unclear) {
  if constexpr (Truncated) {
    constexpr Slot kGroup = ~((Slot(1) << kTruncatedIndexBits) - 1);
    unclear = unclear || ((candidate ^ winner) & kGroup) == 0;
  }
}

// The sorting selection: each lane sorts its slots, so its best is always slot 0; each of k
// rounds takes the warp-wide maximum of the lanes' bests, and the lane that owned the winner
// shifts its slots down by one. Returns, in lane r < k, the position of rank r; `unclear` as in
// note_unclear (truncated slots only).
template <bool Truncated, int Items, class Slot>
__device__ __forceinline__ uint32_t select_by_sorting(Slot (&slots)[Items], int k, int lane,
                                                      bool& unclear) {
  sort_slots_descending(slots);
  uint32_t my_rank_position = 0;
  unclear = false;
  for (int r = 0; r < k; ++r) {
    const Slot winner = warp_max(slots[0]);
    if (lane == r) my_rank_position = slot_position<Truncated>(winner);
    if (slots[0] == winner) {
#pragma unroll
      for (int j = 0; j + 1 < Items; ++j) slots[j] = slots[j + 1];
      slots[Items - 1] = Slot(0);
    }
    note_unclear<Truncated>(slots[0], winner, unclear);
  }
  return my_rank_position;
}

// Returns, in lane r < k, the position of rank r among the warp's slots (unsorted; 0 = absent),
// exact for exact slots; for truncated ones, `unclear` (the same in every lane) says whether the
// result may differ from the exact one (see note_unclear).
// A row's winners rarely cluster in one lane (8 of 256 random elements: three in one lane of 8
// in ~4% of rows), so the rounds first run on each lane's best two only: 2-3 min/max per slot
// instead of a sorting network, and a round moves two registers instead of shifting all slots.
// A lane that gave up both holds kUnknown (below every element, above "absent") and may hide a
// third element above the last winner; only then is the row selected again by sorting. Any input
// comes out in the exact order of its slots; ties and sorted rows merely take the slower way
// more often.
template <bool Truncated, int Items, class Slot>
__device__ __forceinline__ uint32_t select_ranks(Slot (&slots)[Items], int k, int lane,
                                                 bool& unclear) {
  bool lane_unclear = false;
  uint32_t my_rank_position;
  if constexpr (Items <= 2) {
    my_rank_position = select_by_sorting<Truncated>(slots, k, lane, lane_unclear);
  } else {
    // A real element's packed low bits are ~position, far above 1 (positions are below 1024);
    // in truncated slots of group 0 they may be 1 (see note_unclear).
    constexpr Slot kUnknown = 1;
    Slot best = 0, second = 0;
#pragma unroll
    for (int j = 0; j < Items; ++j) {
      const Slot s = slots[j];
      const Slot lower = s < best ? s : best;
      second = lower > second ? lower : second;
      best = s > best ? s : best;
    }
    my_rank_position = 0;
    Slot winner = 0;
    for (int r = 0; r < k; ++r) {
      winner = warp_max(best);
      if (lane == r) my_rank_position = slot_position<Truncated>(winner);
      if (best == winner) {
        best = second;
        second = kUnknown;
      }
      note_unclear<Truncated>(best, winner, lane_unclear);
    }
    const bool emptied = best == kUnknown;
    if (__any_sync(0xffffffffu, emptied)) {
      // Truncated slots count whole groups: at least every element at or above the winner.
      constexpr Slot kCompared =
          Truncated ? ~((Slot(1) << kTruncatedIndexBits) - 1) : ~Slot(0);
      int at_least_last = 0;
#pragma unroll
      for (int j = 0; j < Items; ++j) {
        at_least_last += (slots[j] & kCompared) >= (winner & kCompared) ? 1 : 0;
      }
      if (__any_sync(0xffffffffu, emptied && at_least_last > 2)) {
        my_rank_position = select_by_sorting<Truncated>(slots, k, lane, lane_unclear);
      }
    }
  }
  unclear = Truncated && __any_sync(0xffffffffu, lane_unclear);
  return my_rank_position;
}

template <int Bytes> struct VectorOfSize;
template <> struct VectorOfSize<1> { using type = uint8_t; };
template <> struct VectorOfSize<2> { using type = uint16_t; };
template <> struct VectorOfSize<4> { using type = uint32_t; };
template <> struct VectorOfSize<8> { using type = uint2; };
template <> struct VectorOfSize<16> { using type = uint4; };

// A lane's slots of one row as its loads left them. select_row computes keys from them, and
// loads the row into them again when its first keys could not decide (key_row, select_row).
//  - LaneVectors: vector c of lane `lane` is vector c*32 + lane of the row, so a warp's load
//    covers consecutive bytes;
//  - LaneElements: slot j of lane `lane` is element j*32 + lane (any stride).
template <class T, int Items, int VectorBytes>
struct LaneVectors {
  static constexpr int kPer = VectorBytes / int(sizeof(T));
  static constexpr int kCount = Items / kPer;
  static_assert(kPer >= 1 && kCount * kPer == Items, "a lane's slots are whole vectors");
  using Vector = typename VectorOfSize<VectorBytes>::type;
  Vector vectors[kCount];
};

template <class T, int Items>
struct LaneElements {
  Bits<T> elements[Items];
};

template <class Vector, class T>
__device__ __forceinline__ Vector absent_vector() {
  constexpr int kPer = int(sizeof(Vector) / sizeof(T));
  Bits<T> part[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) part[e] = Bits<T>(kAbsentBits);
  Vector v;
  memcpy(&v, part, sizeof(Vector));
  return v;
}

// A row of whole vectors whose start is aligned to one: each vector is in the row or past its
// end. `stride` is 1.
template <class T, int Items, int VectorBytes>
__device__ __forceinline__ void load_lane(const T* row, int64_t, int n, int lane,
                                          LaneVectors<T, Items, VectorBytes>& raw) {
  using Lane = LaneVectors<T, Items, VectorBytes>;
  using Vector = typename Lane::Vector;
  const Vector* vectors = reinterpret_cast<const Vector*>(row);
  const Vector absent = absent_vector<Vector, T>();
#pragma unroll
  for (int c = 0; c < Lane::kCount; ++c) {
    raw.vectors[c] = (c * 32 + lane) * Lane::kPer < n ? vectors[c * 32 + lane] : absent;
  }
}

template <class T, int Items>
__device__ __forceinline__ void load_lane(const T* row, int64_t stride, int n, int lane,
                                          LaneElements<T, Items>& raw) {
  const Bits<T>* first = reinterpret_cast<const Bits<T>*>(row) + int64_t(lane) * stride;
  const int64_t step = stride * 32;
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    raw.elements[j] = j * 32 + lane < n ? first[j * step] : Bits<T>(kAbsentBits);
  }
}

// A contiguous row (global or shared memory) whose start is aligned to VectorBytes and whose
// end may fall inside a vector: that vector is read element by element, none past the end.
template <class T, int Items, int VectorBytes>
__device__ __forceinline__ void load_lane_to_end(const T* row, int n, int lane,
                                                 LaneVectors<T, Items, VectorBytes>& raw) {
  using Lane = LaneVectors<T, Items, VectorBytes>;
  constexpr int kPer = Lane::kPer;
  const auto* vectors = reinterpret_cast<const typename Lane::Vector*>(row);
  const Bits<T>* elements = reinterpret_cast<const Bits<T>*>(row);
#pragma unroll
  for (int c = 0; c < Lane::kCount; ++c) {
    const int first = (c * 32 + lane) * kPer;
    if (first + kPer <= n) {
      raw.vectors[c] = vectors[c * 32 + lane];
    } else {
      Bits<T> part[kPer];
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        part[e] = first + e < n ? elements[first + e] : Bits<T>(kAbsentBits);
      }
      memcpy(&raw.vectors[c], part, VectorBytes);
    }
  }
}

// Keys a lane's slots: plain keys (returns whether one missed, see FloatLayout) or exact ones,
// into exact or truncated slots. Slots past the row's end become 0.
template <bool Plain, bool Truncated, class T, int Items, int VectorBytes>
__device__ __forceinline__ bool key_lane(const LaneVectors<T, Items, VectorBytes>& raw, int n,
                                         int lane, bool largest,
                                         SlotFor<T, Truncated> (&slots)[Items]) {
  using Lane = LaneVectors<T, Items, VectorBytes>;
  constexpr int kPer = Lane::kPer;
  const Bits<T> flip = largest ? Bits<T>(0) : Bits<T>(~Bits<T>(0));
  bool special = false;
  uint32_t special_pairs = 0;
#pragma unroll
  for (int c = 0; c < Lane::kCount; ++c) {
    const int first = (c * 32 + lane) * kPer;
    const uint32_t complement = position_complement<T>(first);
    SlotFor<T, Truncated>* out = slots + c * kPer;
    if constexpr (Plain && sizeof(T) == 2 && VectorBytes >= 4) {
      uint32_t words[VectorBytes / 4];
      memcpy(words, &raw.vectors[c], VectorBytes);
#pragma unroll
      for (int w = 0; w < VectorBytes / 4; ++w) {
        pack_plain_pair<T>(words[w], complement - 2 * w, largest ? 0u : ~0u, special_pairs,
                           out[2 * w], out[2 * w + 1]);
      }
    } else {
      Bits<T> part[kPer];
      memcpy(part, &raw.vectors[c], VectorBytes);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        if constexpr (Plain) {
          out[e] = pack_plain<T, Truncated>(part[e], complement - e, flip, special);
        } else {
          out[e] = pack_exact<T, Truncated>(part[e], complement - e, largest);
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

template <bool Plain, bool Truncated, class T, int Items>
__device__ __forceinline__ bool key_lane(const LaneElements<T, Items>& raw, int n, int lane,
                                         bool largest, SlotFor<T, Truncated> (&slots)[Items]) {
  const Bits<T> flip = largest ? Bits<T>(0) : Bits<T>(~Bits<T>(0));
  bool special = false;
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    const int position = j * 32 + lane;
    const uint32_t complement = position_complement<T>(position);
    SlotFor<T, Truncated> packed;
    if constexpr (Plain) {
      packed = pack_plain<T, Truncated>(raw.elements[j], complement, flip, special);
    } else {
      packed = pack_exact<T, Truncated>(raw.elements[j], complement, largest);
    }
    slots[j] = position < n ? packed : 0;
  }
  return special;
}

// Widest load a lane makes for Items slots of T from global memory: 16 bytes, or all its slots
// when they are fewer.
template <class T, int Items>
constexpr int kRowVectorBytes = Items * int(sizeof(T)) < 16 ? Items * int(sizeof(T)) : 16;

// What a lane of warp_topk_kernel holds of a row: whole vectors when every row of the launch
// is made of them (rows_are_whole_vectors), else single elements.
template <class T, int Items, bool VectorRows>
using LaneRow =
    typename std::conditional<VectorRows, LaneVectors<T, Items, kRowVectorBytes<T, Items>>,
                              LaneElements<T, Items>>::type;

// Whether every row of a launch is contiguous, starts aligned to a vector of kRowVectorBytes and
// is a whole number of them long.
template <class T, int Items>
bool rows_are_whole_vectors(const RowGeometry& g, const T* input) {
  constexpr int64_t kVectorBytes = kRowVectorBytes<T, Items>;
  constexpr int64_t kVectorElements = kVectorBytes / int64_t(sizeof(T));
  bool whole = g.input_stride == 1 && g.n % kVectorElements == 0 &&
               reinterpret_cast<uintptr_t>(input) % kVectorBytes == 0;
  for (int d = 0; d < g.batch_ndim; ++d) {
    whole = whole && (g.batch_sizes[d] == 1 || g.input_batch_strides[d] % kVectorElements == 0);
  }
  return whole;
}

// Resident blocks per SM the register budget is set for, by the bytes of a lane's packed slots:
// 8 registers of slots fit the 32 registers per thread that keep 64 warps resident (the many-row
// MoE shapes); larger rows get the most blocks whose budget they still fit without spilling
// (ptxas -v), a row in flight included.
constexpr int warp_row_min_blocks(int slot_bytes) {
  return slot_bytes <= 32 ? 16 : slot_bytes <= 64 ? 10 : slot_bytes <= 128 ? 6 : 3;
}
template <class T, int Items>
constexpr int kWarpRowMinBlocks = warp_row_min_blocks(Items * int(sizeof(PackedFor<T>)));

constexpr int kWarpRowsPerBlock = kWarpRowThreads / 32;

// Keys a row whose lane slots `raw` has loaded: plain keys first where they exist, exact ones
// (the row loaded again) if any of them missed.
template <bool Truncated, class T, int Items, bool VectorRows>
__device__ __forceinline__ void key_row(const RowGeometry& g, const T* row, bool largest,
                                        int lane, LaneRow<T, Items, VectorRows>& raw,
                                        SlotFor<T, Truncated> (&slots)[Items]) {
  const int n = int(g.n);
  const bool special = key_lane<kPlainFirst<T>, Truncated>(raw, n, lane, largest, slots);
  if (kPlainFirst<T> && __any_sync(0xffffffffu, special)) {
    load_lane(row, g.input_stride, n, lane, raw);
    key_lane<false, Truncated>(raw, n, lane, largest, slots);
  }
}

// Whether truncating the keys of these exact slots loses nothing: in each half of the key range
// (top bit set or clear) the bits truncation drops are the same in every element, so elements of
// one group have equal keys and the truncated order is the exact order. Rows of values of a
// narrower type, or of few distinct values, are that way, and their ties within groups are what
// makes the truncated rounds unclear.
template <class T, int Items>
__device__ __forceinline__ bool truncation_is_exact(const PackedFor<T> (&slots)[Items]) {
  using Key = KeyOf<T>;
  constexpr Key kDropped = (Key(1) << kTruncatedIndexBits) - 1;
  constexpr Key kTop = Key(1) << (8 * sizeof(Key) - 1);
  // Both halves side by side in one word: the dropped bits of keys with the top bit set above
  // those of the others.
  uint32_t any = 0, all = ~0u;
#pragma unroll
  for (int j = 0; j < Items; ++j) {
    const Key key = Key(slots[j] >> kPackedIndexBits<Key>);
    const uint32_t dropped = uint32_t(key & kDropped) << ((key & kTop) ? kTruncatedIndexBits : 0);
    const uint32_t half = uint32_t(kDropped) << ((key & kTop) ? kTruncatedIndexBits : 0);
    if (slots[j] != 0) {
      any |= dropped;
      all &= dropped | ~half;
    }
  }
  any = __reduce_or_sync(0xffffffffu, any);
  all = __reduce_and_sync(0xffffffffu, all);
  return (any & ~all) == 0;
}

// Selects one row whose lane slots `raw` has loaded, and writes its result. Rows of 32- and
// 64-bit keys go through truncated slots first (see kTruncatedIndexBits).
template <class T, int Items, bool VectorRows>
__device__ __forceinline__ void select_row(const RowGeometry& g, const T* input, void* values,
                                           void* indices, bool index64, bool largest,
                                           const RowTarget& o, int lane,
                                           LaneRow<T, Items, VectorRows>& raw) {
  const T* row = input + o.input;
  const int k = int(g.k);
  uint32_t my_rank_position = 0;
  bool unclear = true;  // until a truncated selection says its result is the exact one
  if constexpr (kTruncatedFirst<T>) {
    SlotFor<T, true> slots[Items];
    key_row<true, T, Items, VectorRows>(g, row, largest, lane, raw, slots);
    my_rank_position = select_ranks<true>(slots, k, lane, unclear);
    if (unclear) load_lane(row, g.input_stride, int(g.n), lane, raw);
  }
  if (unclear) {
    PackedFor<T> slots[Items];
    key_row<false, T, Items, VectorRows>(g, row, largest, lane, raw, slots);
    bool exact = false;
    if constexpr (kTruncatedFirst<T>) exact = truncation_is_exact<T>(slots);
    if (!exact) my_rank_position = select_ranks<false>(slots, k, lane, unclear);
  }
  // The winner's value is read again from the input, which this warp has just read (L1/L2).
  if (lane < k) write_result(g, input, values, indices, index64, o, lane, my_rank_position);
}

// A warp per row.
template <class T, int Items, bool VectorRows>
__global__ void __launch_bounds__(kWarpRowThreads, (kWarpRowMinBlocks<T, Items>))
    warp_topk_kernel(RowGeometry g, const T* input, void* values, void* indices, bool index64,
                     bool largest) {
  wait_for_previous_kernel();
  // Rows of more than 256 elements let their successor launch only as they exit: with the early
  // trigger 4096x512 k=10 took 5.5 us in graph replay and 5.6 in the C loop, without it 4.8-5.0
  // and 5.0, while shorter rows gain from it (CUDA_NOTES v15).
  if constexpr (Items < 16) allow_next_kernel();
  const int lane = threadIdx.x & 31;
  const int64_t row = int64_t(blockIdx.x) * kWarpRowsPerBlock + (threadIdx.x >> 5);
  if (row >= g.rows) return;
  const RowTarget o = device_row_target(g, row);
  LaneRow<T, Items, VectorRows> raw;
  load_lane(input + o.input, g.input_stride, int(g.n), lane, raw);
  select_row<T, Items, VectorRows>(g, input, values, indices, index64, largest, o, lane, raw);
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
  wait_for_previous_kernel();
  allow_next_kernel();
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
    LaneVectors<T, Items, kTileVectorBytes<T, Items>> raw;
    load_lane_to_end(row, n, lane, raw);
    PackedFor<T> slots[Items];
    const bool special = key_lane<kPlainFirst<T>, false>(raw, n, lane, largest, slots);
    if (kPlainFirst<T> && __any_sync(0xffffffffu, special)) {
      load_lane_to_end(row, n, lane, raw);
      key_lane<false, false>(raw, n, lane, largest, slots);
    }
    bool unclear = false;
    const uint32_t my_rank_position = select_ranks<false>(slots, k, lane, unclear);
    if (lane < k) ranked[warp][lane] = uint16_t(my_rank_position);
  }
  __syncthreads();

  for (int e = threadIdx.x; e < kTileRows * k; e += kTileThreads) {
    const int r = e % kTileRows, rank = e / kTileRows;
    if (r < tile_rows) {
      const RowOffsets o = device_row_offsets(g, first_row + r);
      const uint32_t position = ranked[r][rank];
      if (values != nullptr) {
        reinterpret_cast<Bits<T>*>(values)[o.values + rank * g.values_stride] =
            tile[r * pitch + position];
      }
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
