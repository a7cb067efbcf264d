// What the CUDA top-k plan (host C++, topk_plan.cpp) and the kernels (nvcc) must agree on: the
// kernels' sizes and limits the plan chooses by, and the layouts of what the plan carves out of
// scratch. Plain C++17 that both compilers read; nothing here is device code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mtk {
namespace cuda {

// ---- Composites ------------------------------------------------------------------------------
// A composite ranks one element: its selection key in the high bits and the bitwise complement
// of its index (within the row) in the low 32. Composites are unique within a row, and "larger
// composite" is exactly the contract's "better": higher key first, then lower index. So every
// selection is "the k largest composites", with no tie handling left anywhere.
// Real elements have index <= 2^32 - 2, so their low word is never 0 and a zero composite sorts
// below every element (used as padding). make_composite (device_utils.cuh) builds them.
template <class Key> struct CompositeOf { using type = uint64_t; };
template <> struct CompositeOf<uint64_t> { using type = unsigned __int128; };

template <class Key> using Composite = typename CompositeOf<Key>::type;
template <class Key> constexpr int kCompositeBits = int(sizeof(Key)) * 8 + 32;

// The host sizes RowState<Composite<uint64_t>> for the device: both must lay a 128-bit composite
// out alike.
static_assert(sizeof(Composite<uint64_t>) == 16 && alignof(Composite<uint64_t>) == 16,
              "host and device lay out 128-bit composites alike");

// ---- Block kernels (block_select_kernel, finish_kernel, cluster_select_kernel) -------------
constexpr int kBlockThreads = 512;
constexpr int kSortCapacity = 2048;  // winners sorted in shared memory up to this k
// Past kSortCapacity, a block per row sorts its winners in dynamic shared memory (a power of
// two of composites, at least kRowSortMinItems) up to this size; CUB's segmented sort beyond.
constexpr int64_t kRowSortMaxBytes = int64_t(128) << 10;
constexpr int64_t kRowSortMinItems = 64;
// ... but first, for keys of up to 32 bits, a block per row radix-sorts this many a thread.
constexpr int kRowRadixSortItems = 8;
constexpr int64_t kRowRadixSortMaxK = int64_t(kBlockThreads) * kRowRadixSortItems;

// The block kernel caches a row's keys in dynamic shared memory when they fit this: 36 KB for
// 9216 float keys beside BlockShared's 17 KB still lets four blocks of 512 threads share an SM.
constexpr int64_t kBlockKeyCacheMaxBytes = int64_t(40) << 10;

constexpr int64_t row_sort_bytes(int64_t k, int64_t composite_bytes) {
  int64_t items = kRowSortMinItems;
  while (items < k) items *= 2;
  return items * composite_bytes;
}

// ---- Warp per row (topk_warp_kernels.cuh) ----------------------------------------------------
// What the plan sends to the warp kernels; topk_launch.cuh checks that they serve it.
constexpr int kWarpPathMaxK = 32;
constexpr int64_t kWarpPathMaxRowLength = 1024;
constexpr int kWarpPathRowsPerBlock = 4;  // the direct kernel's grid: rows / this, rounded up

// ---- Cluster per row (topk_cluster_kernel.cuh) -----------------------------------------------
// Blocks per cluster: 16, the non-portable size sm_90 allows (portable is 8), so a row of 150k
// is read by 16 SMs and each holds ~9.5k of it.
constexpr int kClusterBlocks = 16;
// Key slots a thread: rows up to 64k take the small kernel, up to 256k the large one.
constexpr int kClusterSmallItems = 8;
constexpr int kClusterMaxItems = 32;

// ---- Multi-block pipeline (topk_multi_*.cuh) -------------------------------------------------
constexpr int kMultiThreads = 256;  // the multi-block passes
constexpr int kMultiDigitBits = 11;
constexpr int kMultiBins = 1 << kMultiDigitBits;

// The sample kernel (topk_multi_sample.cuh): a block of kSampleThreads per row, each thread
// taking kNarrowSamplesPerThread (2048 samples: rows up to a few million) or
// kWideSamplesPerThread (16384 samples: huge rows) keys.
constexpr int kSampleThreads = 512;
constexpr int kNarrowSamplesPerThread = 4;
constexpr int kWideSamplesPerThread = 32;
// A split sample: the wide sample's 16384 keys over this many blocks per row, each leaving its
// `rank` largest for the threshold pass's blocks to merge.
constexpr int kSplitSampleParts = 16;
constexpr uint32_t kSplitSampleMaxRank = 16;

// Candidates a threshold thread stages in its own slots of shared memory before spilling to
// global appends (multi_threshold_kernel). Own slots need no atomic: a candidate costs one
// shared store, where a block-wide counter cost each an atomic whose result the next store
// waited for (the k = 1024 pass ran 61 us against 42 for k = 50). The stage's size is the plan's
// choice: the shared memory of four resident blocks slows the streaming itself (a 32 KB stage
// cost the pass over 2^28 16%, 24 KB 3%), so only plans expecting more than two candidates a
// thread take the large one. A sampling row of 150k with k = 1024 leaves ~5.4 a thread: with 12
// slots one thread in 260 spills there.
constexpr int kSmallThresholdStageBytes = 8192;
constexpr int kLargeThresholdStageBytes = 24576;
// A variable, not a function: device code may read a host constant, not call a host function.
template <int StageBytes, int EntryBytes>
constexpr int kThresholdSlotsPerThread = StageBytes / (kMultiThreads * EntryBytes);

// Up to this many candidates the finish kernel ranks them all itself: two more multi-block
// passes cost more in launches and row-state round trips than they save it. Past it, one block
// reads the buffer too slowly (~30 GB/s from L2: bf16 2^26's 28.6k candidates took the finish
// 15 us), so a row whose key-prefix bins leave the k-th's bucket within a block has its winners
// placed in their bins' ranges by the first filter launch's blocks instead (start_bin_ranges).
constexpr uint32_t kDirectFinishCandidates = 16384;

// Resident threshold blocks per SM that the register budget must allow: the plan sizes the
// grid to one wave of them. Sixteen 1-byte elements per vector need more registers than four
// blocks leave (ptxas spilled over a kilobyte per thread), so those get two.
constexpr int threshold_blocks_per_sm(int element_bytes) { return element_bytes == 1 ? 2 : 4; }

// What the threshold pass of a sampled plan histograms of its candidates (topk_plan.cpp says
// when which).
enum class CandidateHistogram : uint32_t {
  None,       // few expected: the finish kernel ranks them all from the empty prefix
  TopDigit,   // the composite's top 11 bits, where the filter passes start
  KeyPrefix,  // key prefixes (threshold_key_bin): the k-th's bucket, for the finish too
};

// A row's progress through the multi-block pipeline, in scratch (one per row).
template <class Comp>
struct RowState {
  Comp prefix;
  uint32_t resolved;
  uint32_t needed;
  uint32_t in_bucket;
  uint32_t winners;           // written to the row's winner list so far
  uint32_t source_is_buffer;  // the bucket's elements are all in the current candidate buffer
  uint32_t source_count;      // how many, when they are
  uint32_t next_count;        // candidates written by the pass running now
  uint32_t blocks_done;       // pass-completion ticket: the last block finalises the pass
  uint32_t complete;          // all k winners are written
  uint32_t fallback;          // the sampled threshold missed: run the exact passes on the input
  uint32_t finish_direct;     // few candidates: the finish kernel selects from all of them
  uint32_t winners_placed;    // ... placed in their key-prefix bins' ranges by a filter launch
  uint32_t digit_bits;        // width of the digit the last choice appended to the prefix
  uint32_t filters_done;      // the finish kernel takes the bucket as it is
  uint32_t in_first_output;   // ... from the first filter pass's output buffer
  uint32_t output_written;    // k past kSortCapacity: the finish ranked and wrote the row
  Comp threshold;             // sampled plans: candidates are the composites at or above it
  uint32_t threshold_shift;   // sampled plans: the threshold pass's key bins are 2^shift wide
  uint32_t hist[kMultiBins];  // winners_placed: each bin's end in the row's output ranks
  // Split samples: each part's largest keys (as composites' low bits), `rank` per part. The
  // sample kernel clears the fields above only.
  Comp sample_tops[kSplitSampleParts * kSplitSampleMaxRank];
};

// How the multi-block kernels split a row and its scratch: a kernel argument.
struct MultiLayout {
  int blocks_per_row;
  int64_t capacity;  // candidate slots per row and buffer
  uint32_t l2_prefetch_bytes = 0;  // sampled plans: see prefetch_segment_head
  uint32_t split_sample_rank = 0;  // split samples: the rank, whose parts' tops the pass merges
};

}  // namespace cuda
}  // namespace mtk
