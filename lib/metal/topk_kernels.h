// Top-k kernels as templates over the element type (instantiated per dtype in topk.metal).
//
// Every problem is "select the k largest keys, ties to the lower index": values map to unsigned
// keys exactly as lib/core/ordered_key.hpp does (NaN above +inf, all NaNs equal, -0 == +0,
// complemented for largest = false). Keys come from the raw bits, so values are copied, never
// converted. Three shape classes (the host plan, lib/metal/metal_topk_plan.cpp, picks one):
//   short rows: one threadgroup per row, keys cached in threadgroup memory (mtk_rows_short);
//   long rows:  one threadgroup per row, keys re-read from device memory (mtk_rows_long);
//   huge rows:  many threadgroups per row, histograms through device memory
//               (mtk_radix_histogram / mtk_radix_choose, then mtk_select_count /
//               mtk_select_offsets / mtk_select_scatter).
// Selection is an MSB-first radix select over 8-bit digits, which finds the k-th largest key
// exactly; compaction then writes the winners in index order. sorted = true orders them by
// (key desc, index asc) with a bitonic network: inside the row kernel when they fit in
// threadgroup memory, else mtk_sort_rows, else the device-memory network (mtk_sort_load,
// mtk_bitonic_tile, mtk_bitonic_step, mtk_sort_store).
// Ragged rows (mtk_topk_ragged) run the same kernels: each threadgroup reads its row's window
// from the lengths and starts buffers and selects min(k, length) winners there, with indices
// relative to the window; mtk_ragged_finish then transforms those indices and pads the rest.
// Without values (indices only) nothing writes or reads the values buffer.
#pragma once

#include "mtk_dialect.h"
#include "../core/float_formats.hpp"
#include "../core/ragged_window.hpp"
#include "topk_params.h"

// ---- Element types ----------------------------------------------------------------------
// Storage is the raw element as loaded and stored; Key its order-preserving unsigned key (the
// float keys are lib/core/float_formats.hpp's, shared with the CPU and CUDA backends).

struct DtF32 {
  typedef uint Storage;
  typedef uint Key;
  enum : uint { key_bits = 32 };
  static Key key(Storage s) { return mtk::key_from_f32_bits(s); }
};
struct DtF16 {
  typedef ushort Storage;
  typedef uint Key;
  enum : uint { key_bits = 16 };
  static Key key(Storage s) { return uint(mtk::key_from_f16_bits(s)); }
};
// bfloat16 is carried as its raw 16 bits: no `bfloat` type (macOS 14) is needed.
struct DtBF16 {
  typedef ushort Storage;
  typedef uint Key;
  enum : uint { key_bits = 16 };
  static Key key(Storage s) { return uint(mtk::key_from_bf16_bits(s)); }
};
struct DtI8 {
  typedef char Storage;
  typedef uint Key;
  enum : uint { key_bits = 8 };
  static Key key(Storage s) { return uint(uchar(s)) ^ 0x80u; }
};
struct DtU8 {
  typedef uchar Storage;
  typedef uint Key;
  enum : uint { key_bits = 8 };
  static Key key(Storage s) { return uint(s); }
};
struct DtI16 {
  typedef short Storage;
  typedef uint Key;
  enum : uint { key_bits = 16 };
  static Key key(Storage s) { return uint(ushort(s)) ^ 0x8000u; }
};
struct DtI32 {
  typedef int Storage;
  typedef uint Key;
  enum : uint { key_bits = 32 };
  static Key key(Storage s) { return uint(s) ^ 0x80000000u; }
};
struct DtI64 {
  typedef long Storage;
  typedef ulong Key;
  enum : uint { key_bits = 64 };
  static Key key(Storage s) { return ulong(s) ^ 0x8000000000000000ul; }
};

// The key whose largest values are wanted: complemented (within key_bits) for largest = false.
template <typename DT>
inline typename DT::Key selection_key(typename DT::Storage s, bool largest) {
  typedef typename DT::Key Key;
  const Key key = DT::key(s);
  const Key all = Key(~Key(0)) >> (sizeof(Key) * 8 - DT::key_bits);
  return largest ? key : Key(key ^ all);
}

// ---- Row geometry and outputs ----------------------------------------------------------

struct RowOffsets {
  long input;
  long values;
  long indices;
};

// Element offsets of row `row` (lib/core/problem.hpp row_offsets, same numbering).
inline RowOffsets row_offsets(constant MtkTopkParams& p, uint row) {
  RowOffsets o = {p.input_base, p.values_base, p.indices_base};
  long rest = long(row);
  for (int d = int(p.batch_ndim) - 1; d >= 0; --d) {
    const long i = rest % p.batch_sizes[d];
    rest /= p.batch_sizes[d];
    o.input += i * p.input_batch_strides[d];
    o.values += i * p.values_batch_strides[d];
    o.indices += i * p.indices_batch_strides[d];
  }
  return o;
}

// int32 indices keep the low 32 bits (unsigned conversion: defined for every value).
inline void store_index(device uchar* indices, constant MtkTopkParams& p, long element, long index) {
  if (p.index_is_64 != 0u) {
    ((device long*)indices)[element] = index;
  } else {
    ((device uint*)indices)[element] = uint(ulong(index));
  }
}

inline uint load_index(device const uchar* indices, constant MtkTopkParams& p, long element) {
  return p.index_is_64 != 0u ? uint(((device const long*)indices)[element])
                             : uint(((device const int*)indices)[element]);
}

// Sort padding: ranks after every real (key, index) because real indices are below 2^32 - 1.
enum : uint { kPaddingIndex = 0xffffffffu };

// ---- Ragged rows ------------------------------------------------------------------------

inline long load_row_entry(device const uchar* data, constant MtkRowVector& v, uint row) {
  const long at = v.base + long(row) * v.stride;
  return v.is_64 != 0u ? ((device const long*)data)[at] : long(((device const int*)data)[at]);
}

// The page table's batch of a row (b = row_to_batch[r], or r).
inline long page_table_batch(constant MtkTopkParams& p, device const uchar* row_to_batch, uint row) {
  return p.row_to_batch.present != 0u ? load_row_entry(row_to_batch, p.row_to_batch, row) : long(row);
}

// One row's candidates and winners: its window (the whole row unless ragged) of n candidates
// from position `start`, and k = min(k, n) winners. It holds no RowOffsets: with the row's
// offsets copied out of this struct, mtk_rows_long's in-kernel sort read out of bounds on PoCL
// (not understood; the kernels take the offsets from row_offsets directly instead).
struct RowWindow {
  long start;
  uint n;
  uint k;
};

// lib/core/ragged_rows.hpp ragged_window, with the clipping of lib/core/ragged_window.hpp.
inline RowWindow row_window(constant MtkTopkParams& p, device const uchar* lengths,
                            device const uchar* starts, device const uchar* row_to_batch, uint row) {
  long start = 0;
  long length = p.n;
  if (p.ragged != 0u) {
    if (p.starts.present != 0u) start = mtk::clipped_window_start(load_row_entry(starts, p.starts, row), p.n);
    length = mtk::clipped_window_length(load_row_entry(lengths, p.lengths, row), start, p.n);
    if (p.transform == MTK_METAL_TRANSFORM_PAGE_TABLE &&
        !mtk::page_table_has_batch(page_table_batch(p, row_to_batch, row), p.page_table_batches)) {
      length = 0;
    }
  }
  RowWindow w;
  w.start = start;
  w.n = uint(length);
  w.k = uint(min(long(p.k), length));
  return w;
}

// The index written for a winner at window position `index` of row `row`.
inline long transformed_index(constant MtkTopkParams& p, device const uchar* offsets, device const uchar* page_table,
                              device const uchar* row_to_batch, uint row, long index) {
  if (p.transform == MTK_METAL_TRANSFORM_RAGGED) {
    return mtk::ragged_transformed_index(load_row_entry(offsets, p.offsets, row), index);
  }
  if (p.transform == MTK_METAL_TRANSFORM_PAGE_TABLE) {
    const long at = p.page_table_base + page_table_batch(p, row_to_batch, row) * p.page_table_batch_stride +
                    (index / p.page_size) * p.page_table_page_stride;
    const long page = p.page_table_is_64 != 0u ? ((device const long*)page_table)[at]
                                               : long(((device const int*)page_table)[at]);
    return mtk::paged_transformed_index(page, p.page_size, index % p.page_size);
  }
  return index;
}

// ---- Radix select building blocks -------------------------------------------------------

// Layout of the `words` threadgroup buffer of the selection kernels.
enum : uint {
  kChosenDigit = MTK_RADIX_BINS,      // digit whose bin holds the k-th largest key
  kChosenRemaining = MTK_RADIX_BINS + 1,  // how many of that bin are still to be taken
  kChosenBinCount = MTK_RADIX_BINS + 2,   // the bin's size
  kSelectionWords = MTK_RADIX_BINS + 4
};

// Given the histogram words[0..256) of the keys that match the digits chosen so far, finds the
// bin holding the `remaining`-th largest of them. Needs threads >= 256. Results land in
// words[kChosen*] for every thread to read after the closing barrier.
inline void choose_radix_digit(threadgroup uint* words, uint remaining, uint tid, uint threads,
                               threadgroup uint* scan) {
  const uint bin = MTK_RADIX_BINS - 1 - tid;  // thread 0 holds the highest bin
  const uint count = tid < MTK_RADIX_BINS ? words[bin] : 0u;
  uint total;
  const uint above = threadgroup_exclusive_sum(count, tid, threads, scan, total);
  if (tid < MTK_RADIX_BINS && above < remaining && remaining <= above + count) {
    words[kChosenDigit] = bin;
    words[kChosenRemaining] = remaining - above;
    words[kChosenBinCount] = count;
  }
  tg_barrier();
}

// One tile of compaction: each thread says whether its element's key is above the threshold
// or equal to it; returns whether the element is selected and its output position. Winners are
// numbered in index order: all keys above the threshold, plus the first `remaining` equal ones.
// The running counts (uniform across the threadgroup) advance by the tile's totals.
inline bool select_position(bool above, bool equal, uint remaining, uint tid, uint threads,
                            threadgroup uint* scan, thread uint& above_before,
                            thread uint& equal_before, thread uint& position) {
  // Both counts in one scan: a tile has at most 1024 elements, so 16 bits each suffice.
  const uint packed = (above ? 1u : 0u) | (equal ? 0x10000u : 0u);
  uint total;
  const uint prefix = threadgroup_exclusive_sum(packed, tid, threads, scan, total);
  const uint above_rank = above_before + (prefix & 0xffffu);
  const uint equal_rank = equal_before + (prefix >> 16);
  above_before += total & 0xffffu;
  equal_before += total >> 16;
  position = above_rank + min(equal_rank, remaining);
  return above || (equal && equal_rank < remaining);
}

// ---- Bitonic network --------------------------------------------------------------------

template <typename Key>
inline bool precedes(Key key_a, uint index_a, Key key_b, uint index_b) {
  return key_a > key_b || (key_a == key_b && index_a < index_b);
}

// Runs the merge stages size_lo..size_hi of a bitonic sort on `width` (a power of two) entries
// in threadgroup memory that sit at position `base` of the whole sequence. Strides at or above
// `width` are done by mtk_bitonic_step beforehand. The final order is "precedes" first.
template <typename Key>
inline void bitonic_threadgroup(threadgroup Key* keys, threadgroup uint* idx, uint width,
                                uint size_lo, uint size_hi, uint base, uint tid, uint threads) {
  for (uint size = size_lo;; size <<= 1) {
    for (uint stride = min(size, width) >> 1; stride > 0; stride >>= 1) {
      for (uint t = tid; t < width / 2; t += threads) {
        const uint i = 2 * t - (t & (stride - 1));
        const uint j = i + stride;
        const bool forward = ((base + i) & size) == 0u;
        const Key key_i = keys[i];
        const Key key_j = keys[j];
        const uint idx_i = idx[i];
        const uint idx_j = idx[j];
        if (forward ? precedes(key_j, idx_j, key_i, idx_i) : precedes(key_i, idx_i, key_j, idx_j)) {
          keys[i] = key_j;
          keys[j] = key_i;
          idx[i] = idx_j;
          idx[j] = idx_i;
        }
      }
      tg_barrier();
    }
    if (size >= size_hi) break;
  }
}

// ---- Kernels ----------------------------------------------------------------------------
// One parameter list for all, so the host binds every dispatch the same way. Threadgroup
// buffers: 0 selection words, 1 scan scratch, 2 sort keys, 3 sort indices, 4 key cache; each is
// sized by the plan (16 bytes when a kernel does not use it).

// MTK_KERNEL_PARAMS carries the binding attributes (kernels only); MTK_FUNCTION_PARAMS is the
// same list without them, for the device functions the kernels forward to.
#define MTK_BIND(attribute) [[attribute]]
#define MTK_NO_BIND(attribute)
#define MTK_PARAMS(DT, BIND)                                                       \
  device const typename DT::Storage* input BIND(buffer(0)),                        \
  device typename DT::Storage* values BIND(buffer(1)),                             \
  device uchar* indices BIND(buffer(2)),                                           \
  constant MtkTopkParams& p BIND(buffer(3)),                                       \
  constant MtkPassParams& pass BIND(buffer(4)),                                    \
  device uchar* workspace BIND(buffer(5)),                                         \
  threadgroup uint* tg_words BIND(threadgroup(0)),                                 \
  threadgroup uint* tg_scan BIND(threadgroup(1)),                                  \
  threadgroup typename DT::Key* tg_keys BIND(threadgroup(2)),                      \
  threadgroup uint* tg_idx BIND(threadgroup(3)),                                   \
  threadgroup typename DT::Key* tg_cache BIND(threadgroup(4)),                     \
  device const uchar* lengths BIND(buffer(6)),                                     \
  device const uchar* starts BIND(buffer(7)),                                      \
  device const uchar* offsets BIND(buffer(8)),                                     \
  device const uchar* page_table BIND(buffer(9)),                                  \
  device const uchar* row_to_batch BIND(buffer(10)),                               \
  uint2 group BIND(threadgroup_position_in_grid),                                  \
  uint2 local_id BIND(thread_position_in_threadgroup),                             \
  uint2 tg_size BIND(threads_per_threadgroup)
#define MTK_KERNEL_PARAMS(DT) MTK_PARAMS(DT, MTK_BIND)
#define MTK_FUNCTION_PARAMS(DT) MTK_PARAMS(DT, MTK_NO_BIND)

#define MTK_UNUSED_KERNEL_PARAMS() \
  (void)input; (void)values; (void)indices; (void)p; (void)pass; (void)workspace; (void)tg_words; \
  (void)tg_scan; (void)tg_keys; (void)tg_idx; (void)tg_cache; (void)lengths; (void)starts; (void)offsets; \
  (void)page_table; (void)row_to_batch; (void)group; (void)local_id; (void)tg_size

// The arguments a kernel forwards to a device function taking MTK_FUNCTION_PARAMS.
#define MTK_FORWARD_PARAMS                                                                      \
  input, values, indices, p, pass, workspace, tg_words, tg_scan, tg_keys, tg_idx, tg_cache, lengths, \
      starts, offsets, page_table, row_to_batch, group, local_id, tg_size

// The window of this threadgroup's row (grid: ... x rows).
#define MTK_ROW_WINDOW() row_window(p, lengths, starts, row_to_batch, group.y)

// The first candidate of the window `w` of row `o`.
#define MTK_WINDOW_INPUT(o, w) (input + (o).input + (w).start * p.input_stride)

template <typename DT, bool kCacheKeys>
inline typename DT::Key row_key(device const typename DT::Storage* row, long stride, uint i,
                                bool largest, threadgroup typename DT::Key* cache) {
  return kCacheKeys ? cache[i] : selection_key<DT>(row[long(i) * stride], largest);
}

// One threadgroup selects the top k of one row (grid: 1 x rows).
template <typename DT, bool kCacheKeys>
inline void select_row(MTK_FUNCTION_PARAMS(DT)) {
  typedef typename DT::Key Key;
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const RowWindow w = MTK_ROW_WINDOW();
  if (w.k == 0u) return;  // an empty window: uniform across the threadgroup, before any barrier
  const RowOffsets o = row_offsets(p, group.y);
  device const typename DT::Storage* row = MTK_WINDOW_INPUT(o, w);
  const long stride = p.input_stride;
  const uint n = w.n;
  const uint k = w.k;
  const bool largest = p.largest != 0u;
  const bool has_values = p.has_values != 0u;

  if (kCacheKeys) {
    for (uint i = tid; i < n; i += threads) tg_cache[i] = selection_key<DT>(row[long(i) * stride], largest);
    tg_barrier();
  }

  // MSB-first: narrow down to the k-th largest key one digit at a time. Once every key matching
  // the chosen digits is a winner, the remaining digits need not be resolved.
  Key prefix = 0;
  Key mask = 0;
  uint remaining = k;
  for (int shift = int(DT::key_bits) - MTK_RADIX_BITS; shift >= 0; shift -= MTK_RADIX_BITS) {
    for (uint b = tid; b < MTK_RADIX_BINS; b += threads) tg_words[b] = 0u;
    tg_barrier();
    for (uint i = tid; i < n; i += threads) {
      const Key key = row_key<DT, kCacheKeys>(row, stride, i, largest, tg_cache);
      if ((key & mask) == prefix) tg_atomic_add(&tg_words[uint(key >> shift) & 0xffu], 1u);
    }
    tg_barrier();
    choose_radix_digit(tg_words, remaining, tid, threads, tg_scan);
    const uint digit = tg_words[kChosenDigit];
    const uint bin_count = tg_words[kChosenBinCount];
    remaining = tg_words[kChosenRemaining];
    prefix |= Key(digit) << shift;
    mask |= Key(0xffu) << shift;
    tg_barrier();
    if (bin_count == remaining) break;
  }

  const bool stage = p.sort_in_threadgroup != 0u;
  uint above_before = 0;
  uint equal_before = 0;
  for (uint base = 0; base < n; base += threads) {
    const uint i = base + tid;
    Key key = 0;
    bool above = false;
    bool equal = false;
    if (i < n) {
      key = row_key<DT, kCacheKeys>(row, stride, i, largest, tg_cache);
      above = (key & mask) > prefix;
      equal = (key & mask) == prefix;
    }
    uint position;
    if (select_position(above, equal, remaining, tid, threads, tg_scan, above_before, equal_before, position)) {
      if (stage) {
        tg_keys[position] = key;
        tg_idx[position] = i;
      } else {
        if (has_values) values[o.values + long(position) * p.values_stride] = row[long(i) * stride];
        store_index(indices, p, o.indices + long(position) * p.indices_stride, i);
      }
    }
    if (above_before + min(equal_before, remaining) >= k) break;
  }
  if (!stage) return;

  const uint width = p.sort_size;
  for (uint j = k + tid; j < width; j += threads) {
    tg_keys[j] = 0;
    tg_idx[j] = kPaddingIndex;
  }
  tg_barrier();
  bitonic_threadgroup(tg_keys, tg_idx, width, 2u, width, 0u, tid, threads);
  for (uint j = tid; j < k; j += threads) {
    const uint i = tg_idx[j];
    if (has_values) values[o.values + long(j) * p.values_stride] = row[long(i) * stride];
    store_index(indices, p, o.indices + long(j) * p.indices_stride, i);
  }
}

template <typename DT>
[[kernel]] void mtk_rows_short(MTK_KERNEL_PARAMS(DT)) {
  select_row<DT, true>(MTK_FORWARD_PARAMS);
}

template <typename DT>
[[kernel]] void mtk_rows_long(MTK_KERNEL_PARAMS(DT)) {
  select_row<DT, false>(MTK_FORWARD_PARAMS);
}

// The element range [begin, end) of threadgroup `block` of a row of n candidates in the
// multi-pass kernels.
inline void block_range(constant MtkTopkParams& p, uint n, uint block, thread uint& begin, thread uint& end) {
  const ulong first = ulong(block) * p.block_elems;
  begin = uint(min(first, ulong(n)));
  end = uint(min(first + p.block_elems, ulong(n)));
}

inline device MtkRowState* row_state(device uchar* workspace, constant MtkTopkParams& p, uint row) {
  return (device MtkRowState*)(workspace + p.ws_row_state) + row;
}

inline device uint* block_counts(device uchar* workspace, constant MtkTopkParams& p, uint row) {
  return (device uint*)(workspace + p.ws_block_counts) + 2ul * ulong(row) * p.blocks_per_row;
}

// Multi-pass selection, pass 1 of 2 per digit: each threadgroup histograms the digit at
// `pass.shift` of its block's keys that match the digits chosen so far (grid: blocks x rows).
template <typename DT>
[[kernel]] void mtk_radix_histogram(MTK_KERNEL_PARAMS(DT)) {
  typedef typename DT::Key Key;
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const uint row_index = group.y;
  const RowWindow w = MTK_ROW_WINDOW();
  if (w.k == 0u) return;  // no row state is chosen, read or written for an empty window
  device const typename DT::Storage* row = MTK_WINDOW_INPUT(row_offsets(p, row_index), w);
  device const MtkRowState* state = row_state(workspace, p, row_index);
  const Key prefix = pass.first != 0u ? Key(0) : Key(state->prefix);
  const Key mask = pass.first != 0u ? Key(0) : Key(state->mask);
  const bool largest = p.largest != 0u;
  uint begin, end;
  block_range(p, w.n, group.x, begin, end);

  for (uint b = tid; b < MTK_RADIX_BINS; b += threads) tg_words[b] = 0u;
  tg_barrier();
  for (uint i = begin + tid; i < end; i += threads) {
    const Key key = selection_key<DT>(row[long(i) * p.input_stride], largest);
    if ((key & mask) == prefix) tg_atomic_add(&tg_words[uint(key >> pass.shift) & 0xffu], 1u);
  }
  tg_barrier();
  device uint* out = (device uint*)(workspace + p.ws_block_hist) +
                     (ulong(row_index) * p.blocks_per_row + group.x) * MTK_RADIX_BINS;
  for (uint b = tid; b < MTK_RADIX_BINS; b += threads) out[b] = tg_words[b];
}

// Multi-pass selection, pass 2 of 2 per digit: one threadgroup per row sums the block
// histograms and records the chosen digit in the row state (grid: 1 x rows).
template <typename DT>
[[kernel]] void mtk_radix_choose(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const uint row_index = group.y;
  const RowWindow w = MTK_ROW_WINDOW();
  if (w.k == 0u) return;
  device const uint* hist = (device const uint*)(workspace + p.ws_block_hist) +
                            ulong(row_index) * p.blocks_per_row * MTK_RADIX_BINS;
  for (uint b = tid; b < MTK_RADIX_BINS; b += threads) {
    uint sum = 0;
    for (uint block = 0; block < p.blocks_per_row; ++block) sum += hist[block * MTK_RADIX_BINS + b];
    tg_words[b] = sum;
  }
  tg_barrier();
  device MtkRowState* state = row_state(workspace, p, row_index);
  const bool first = pass.first != 0u;
  const uint remaining = first ? w.k : uint(state->remaining);
  const ulong prefix = first ? 0ul : state->prefix;
  const ulong mask = first ? 0ul : state->mask;
  choose_radix_digit(tg_words, remaining, tid, threads, tg_scan);
  if (tid == 0) {
    state->prefix = prefix | (ulong(tg_words[kChosenDigit]) << pass.shift);
    state->mask = mask | (0xfful << pass.shift);
    state->remaining = tg_words[kChosenRemaining];
  }
}

// Compaction, pass 1 of 3: each block counts its keys above and equal to the threshold.
template <typename DT>
[[kernel]] void mtk_select_count(MTK_KERNEL_PARAMS(DT)) {
  typedef typename DT::Key Key;
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const uint row_index = group.y;
  const RowWindow w = MTK_ROW_WINDOW();
  if (w.k == 0u) return;
  device const typename DT::Storage* row = MTK_WINDOW_INPUT(row_offsets(p, row_index), w);
  device const MtkRowState* state = row_state(workspace, p, row_index);
  const Key threshold = Key(state->prefix);
  const Key mask = Key(state->mask);
  const bool largest = p.largest != 0u;
  uint begin, end;
  block_range(p, w.n, group.x, begin, end);
  uint above = 0;
  uint equal = 0;
  for (uint i = begin + tid; i < end; i += threads) {
    const Key key = selection_key<DT>(row[long(i) * p.input_stride], largest) & mask;
    above += key > threshold ? 1u : 0u;
    equal += key == threshold ? 1u : 0u;
  }
  uint above_total, equal_total;
  threadgroup_exclusive_sum(above, tid, threads, tg_scan, above_total);
  threadgroup_exclusive_sum(equal, tid, threads, tg_scan, equal_total);
  if (tid == 0) {
    device uint* counts = block_counts(workspace, p, row_index);
    counts[2 * group.x] = above_total;
    counts[2 * group.x + 1] = equal_total;
  }
}

// Compaction, pass 2 of 3: per row, turns the block counts into each block's starting ranks
// (exclusive prefix sums over blocks, in place).
template <typename DT>
[[kernel]] void mtk_select_offsets(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  if (MTK_ROW_WINDOW().k == 0u) return;
  device uint* counts = block_counts(workspace, p, group.y);
  uint above_base = 0;
  uint equal_base = 0;
  for (uint base = 0; base < p.blocks_per_row; base += threads) {
    const uint block = base + tid;
    const bool valid = block < p.blocks_per_row;
    const uint above = valid ? counts[2 * block] : 0u;
    const uint equal = valid ? counts[2 * block + 1] : 0u;
    uint above_total, equal_total;
    const uint above_rank = threadgroup_exclusive_sum(above, tid, threads, tg_scan, above_total);
    const uint equal_rank = threadgroup_exclusive_sum(equal, tid, threads, tg_scan, equal_total);
    if (valid) {
      counts[2 * block] = above_base + above_rank;
      counts[2 * block + 1] = equal_base + equal_rank;
    }
    above_base += above_total;
    equal_base += equal_total;
  }
}

// Compaction, pass 3 of 3: each block writes its winners at their global ranks, in index order.
template <typename DT>
[[kernel]] void mtk_select_scatter(MTK_KERNEL_PARAMS(DT)) {
  typedef typename DT::Key Key;
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const uint row_index = group.y;
  const RowWindow w = MTK_ROW_WINDOW();
  if (w.k == 0u) return;
  const RowOffsets o = row_offsets(p, row_index);
  device const typename DT::Storage* row = MTK_WINDOW_INPUT(o, w);
  device const MtkRowState* state = row_state(workspace, p, row_index);
  device const uint* counts = block_counts(workspace, p, row_index);
  const Key threshold = Key(state->prefix);
  const Key mask = Key(state->mask);
  const uint remaining = uint(state->remaining);
  const uint k = w.k;
  const bool largest = p.largest != 0u;
  uint above_before = counts[2 * group.x];
  uint equal_before = counts[2 * group.x + 1];
  uint begin, end;
  block_range(p, w.n, group.x, begin, end);
  for (uint base = begin; base < end; base += threads) {
    if (above_before + min(equal_before, remaining) >= k) break;
    const uint i = base + tid;
    bool above = false;
    bool equal = false;
    if (i < end) {
      const Key key = selection_key<DT>(row[long(i) * p.input_stride], largest) & mask;
      above = key > threshold;
      equal = key == threshold;
    }
    uint position;
    if (select_position(above, equal, remaining, tid, threads, tg_scan, above_before, equal_before, position)) {
      if (p.has_values != 0u) values[o.values + long(position) * p.values_stride] = row[long(i) * p.input_stride];
      store_index(indices, p, o.indices + long(position) * p.indices_stride, i);
    }
  }
}

// The value of a row's winner at output position j whose window index is i: the output holds
// it, or (indices only) the input.
template <typename DT>
inline typename DT::Storage winner_value(device typename DT::Storage* values, constant MtkTopkParams& p, RowOffsets o,
                                         uint j, device const typename DT::Storage* row, uint i) {
  return p.has_values != 0u ? values[o.values + long(j) * p.values_stride] : row[long(i) * p.input_stride];
}

// Sorts one row's k winners (already in the outputs) in threadgroup memory (grid: 1 x rows).
template <typename DT>
[[kernel]] void mtk_sort_rows(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const RowWindow w = MTK_ROW_WINDOW();
  if (w.k == 0u) return;
  const RowOffsets o = row_offsets(p, group.y);
  const uint k = w.k;
  const uint width = p.sort_size;
  const bool largest = p.largest != 0u;
  device const typename DT::Storage* row = MTK_WINDOW_INPUT(o, w);
  for (uint j = tid; j < width; j += threads) {
    if (j < k) {
      tg_idx[j] = load_index(indices, p, o.indices + long(j) * p.indices_stride);
      tg_keys[j] = selection_key<DT>(winner_value<DT>(values, p, o, j, row, tg_idx[j]), largest);
    } else {
      tg_keys[j] = 0;
      tg_idx[j] = kPaddingIndex;
    }
  }
  tg_barrier();
  bitonic_threadgroup(tg_keys, tg_idx, width, 2u, width, 0u, tid, threads);
  for (uint j = tid; j < k; j += threads) {
    const uint i = tg_idx[j];
    if (p.has_values != 0u) values[o.values + long(j) * p.values_stride] = row[long(i) * p.input_stride];
    store_index(indices, p, o.indices + long(j) * p.indices_stride, i);
  }
}

template <typename DT>
inline device typename DT::Key* sort_keys(device uchar* workspace, constant MtkTopkParams& p, uint row) {
  return (device typename DT::Key*)(workspace + p.ws_sort_keys) + ulong(row) * p.sort_size;
}

inline device uint* sort_indices(device uchar* workspace, constant MtkTopkParams& p, uint row) {
  return (device uint*)(workspace + p.ws_sort_indices) + ulong(row) * p.sort_size;
}

// Device-memory sort, step 1: copies the winners' (key, index) into the workspace, padded to
// sort_size (grid: sort_size / threads x rows).
template <typename DT>
[[kernel]] void mtk_sort_load(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const uint j = group.x * tg_size.x + local_id.x;
  if (j >= p.sort_size) return;
  const RowWindow w = MTK_ROW_WINDOW();
  const RowOffsets o = row_offsets(p, group.y);
  device typename DT::Key* keys = sort_keys<DT>(workspace, p, group.y);
  device uint* idx = sort_indices(workspace, p, group.y);
  if (j < w.k) {
    const uint i = load_index(indices, p, o.indices + long(j) * p.indices_stride);
    keys[j] = selection_key<DT>(winner_value<DT>(values, p, o, j, MTK_WINDOW_INPUT(o, w), i), p.largest != 0u);
    idx[j] = i;
  } else {
    keys[j] = 0;
    idx[j] = kPaddingIndex;
  }
}

// Device-memory sort: the merge stages pass.size_lo..size_hi restricted to strides below
// sort_tile, one tile per threadgroup (grid: sort_size / sort_tile x rows).
template <typename DT>
[[kernel]] void mtk_bitonic_tile(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const uint tid = local_id.x;
  const uint threads = tg_size.x;
  const uint width = p.sort_tile;
  const uint base = group.x * width;
  device typename DT::Key* keys = sort_keys<DT>(workspace, p, group.y) + base;
  device uint* idx = sort_indices(workspace, p, group.y) + base;
  for (uint j = tid; j < width; j += threads) {
    tg_keys[j] = keys[j];
    tg_idx[j] = idx[j];
  }
  tg_barrier();
  bitonic_threadgroup(tg_keys, tg_idx, width, pass.size_lo, pass.size_hi, base, tid, threads);
  for (uint j = tid; j < width; j += threads) {
    keys[j] = tg_keys[j];
    idx[j] = tg_idx[j];
  }
}

// Device-memory sort: one compare-exchange step of merge size pass.size_lo at distance
// pass.stride >= sort_tile (grid: sort_size / 2 / threads x rows).
template <typename DT>
[[kernel]] void mtk_bitonic_step(MTK_KERNEL_PARAMS(DT)) {
  typedef typename DT::Key Key;
  MTK_UNUSED_KERNEL_PARAMS();
  const uint t = group.x * tg_size.x + local_id.x;
  if (t >= p.sort_size / 2) return;
  device Key* keys = sort_keys<DT>(workspace, p, group.y);
  device uint* idx = sort_indices(workspace, p, group.y);
  const uint stride = pass.stride;
  const uint i = 2 * t - (t & (stride - 1));
  const uint j = i + stride;
  const bool forward = (i & pass.size_lo) == 0u;
  const Key key_i = keys[i];
  const Key key_j = keys[j];
  const uint idx_i = idx[i];
  const uint idx_j = idx[j];
  if (forward ? precedes(key_j, idx_j, key_i, idx_i) : precedes(key_i, idx_i, key_j, idx_j)) {
    keys[i] = key_j;
    keys[j] = key_i;
    idx[i] = idx_j;
    idx[j] = idx_i;
  }
}

// Device-memory sort, last step: writes the sorted winners to the outputs (grid:
// ceil(k / threads) x rows).
template <typename DT>
[[kernel]] void mtk_sort_store(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const uint j = group.x * tg_size.x + local_id.x;
  const RowWindow w = MTK_ROW_WINDOW();
  if (j >= w.k) return;
  const RowOffsets o = row_offsets(p, group.y);
  const uint i = sort_indices(workspace, p, group.y)[j];
  if (p.has_values != 0u) values[o.values + long(j) * p.values_stride] = MTK_WINDOW_INPUT(o, w)[long(i) * p.input_stride];
  store_index(indices, p, o.indices + long(j) * p.indices_stride, i);
}

// Ragged rows, last step: transforms each row's winners' indices and pads positions
// [min(k, length), k) with index -1 and all-zero value bits (grid: ceil(k / threads) x rows).
template <typename DT>
[[kernel]] void mtk_ragged_finish(MTK_KERNEL_PARAMS(DT)) {
  MTK_UNUSED_KERNEL_PARAMS();
  const ulong j = ulong(group.x) * tg_size.x + local_id.x;
  if (j >= ulong(p.k)) return;
  const RowWindow w = MTK_ROW_WINDOW();
  const RowOffsets o = row_offsets(p, group.y);
  const long at = o.indices + long(j) * p.indices_stride;
  if (j < ulong(w.k)) {
    if (p.transform == MTK_METAL_TRANSFORM_NONE) return;
    const long index = long(load_index(indices, p, at));
    store_index(indices, p, at, transformed_index(p, offsets, page_table, row_to_batch, group.y, index));
    return;
  }
  store_index(indices, p, at, long(-1));
  if (p.has_values != 0u) values[o.values + long(j) * p.values_stride] = typename DT::Storage(0);
}
