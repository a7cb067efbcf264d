// The CUDA block kernels of lib/cuda/topk_kernels.cuh on the host under fiber_cuda.hpp, so CI
// checks their logic without a GPU:
//  - block_select_row: radix select over the row (read from global memory each round, or from
//    its keys cached in shared memory), then the shared-memory sort whose short strides run in
//    registers through warp shuffles, or, unsorted, the winners in index order;
//  - the multi-block pipeline in launch_topk's order: the sampled threshold (sample, threshold
//    pass) or the plain histogram, then both filter passes (the first one the histogram pass of
//    rows whose threshold missed) and the finish; for k above the finish's sort a block per
//    row sorts (sort_row_winners), and past that a host sort stands in for CUB's and
//    write_sorted_kernel writes. Sample
//    ranks that hit, that leave too few candidates and that overflow a small candidate buffer
//    drive every branch between them.
//  - ragged rows (windows, index transforms, padding, no values) through the block kernel and
//    the plain and sampled multi-block paths, and the ragged conformance's graph replays on the
//    H200's plan: one workspace of garbage, reused call after call;
//  - sampled thresholds in the corners of the threshold test, whose candidates include keys
//    below the threshold (+inf under a NaN-only threshold, NaN when the smallest are wanted).
// Blocks run one after another, which is one of the orders a GPU may choose. Rows of every key
// width (f32, f64 with 128-bit composites, bf16, int8), ties, NaN and signed zeros, both
// directions, against a stable sort under selection_key.
//
// Usage: test_block_kernels [--quick]   (`make test` runs --quick: fewer shapes and directions).
// Exits 0 when every case matches.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "fiber_cuda.hpp"
#include "cuda/topk_warp_kernels.cuh"
// The block kernels keep their shared memory in static `__shared__` variables; as function
// statics they are one object for all the fibers of the (one at a time) emulated block.
#undef __shared__
#define __shared__ static
#include "cuda/topk_cluster_kernel.cuh"
#include "cuda/topk_kernels.cuh"

namespace mtk {
namespace cuda {
alignas(16) unsigned char tile_storage[16];  // topk_warp_kernels.cuh's tile kernel: unused here
}
}  // namespace mtk

using namespace mtk;
using namespace mtk::cuda;

static int failures = 0, cases = 0;
static std::mt19937_64 rng(2026);

enum class Data { Random, FewDistinct, Special };

template <class T>
T value_from_double(double v) {
  if constexpr (std::is_same_v<T, bf16_bits>) {
    const float f = float(v);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    return bf16_bits{uint16_t(bits >> 16)};
  } else if constexpr (std::is_integral_v<T>) {
    return T(std::max(-128.0, std::min(127.0, std::floor(v))));
  } else {
    return T(v);
  }
}

template <class T>
std::vector<T> make_row(int64_t n, Data data) {
  std::vector<T> row = std::vector<T>(size_t(n));
  std::normal_distribution<double> normal(0.0, 40.0);
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), 0.0, -0.0,
                             std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), 1.0, -1.0};
  for (int64_t i = 0; i < n; ++i) {
    double v = normal(rng);
    if (data == Data::FewDistinct) v = double(rng() % 5);
    if (data == Data::Special && rng() % 3 == 0) v = specials[rng() % 7];
    row[size_t(i)] = value_from_double<T>(v);
  }
  return row;
}

// One launch of `kernel` over `grid` blocks of `threads`, a block at a time.
template <class Kernel>
void launch(int64_t grid, int threads, Kernel&& kernel) {
  for (int64_t b = 0; b < grid; ++b) {
    emu::block_idx.x = unsigned(b);
    emu::run_block(unsigned(threads), kernel);
  }
}

// The block path as launch_topk runs it: a block per row, with or without the key cache
// (block_select_cached_kernel's dynamic shared memory, a buffer here).
template <class T>
void run_block_rows(const RowGeometry& g, const T* input, void* values, void* indices,
                    bool index64, bool largest, bool sorted, const RaggedRows& ragged,
                    bool key_cache) {
  // Whole 16-byte words, as the plan's block_key_cache_bytes (the sweeps read one a lane).
  using Key = typename KeyTraits<T>::Key;
  std::vector<uint4> cache(size_t(key_cache ? (g.n * int64_t(sizeof(Key)) + 15) / 16 : 0));
  launch(g.rows, kBlockThreads, [&] {
    block_select_row<T>(g, input, values, indices, index64, largest, sorted, ragged, blockIdx.x,
                        key_cache ? reinterpret_cast<Key*>(cache.data()) : nullptr);
  });
}

// The multi-block path as launch_topk runs it, with the plan's choices given directly.
struct MultiChoice {
  int blocks_per_row;
  int64_t capacity;
  uint32_t sample_rank;  // 0: the plain histogram pass
  CandidateHistogram histogram;
  bool wide_sample;
  bool large_stage;  // the threshold pass's stage size
  bool split_sample = false;  // the wide sample over kSplitSampleParts blocks
};

// The sample kernel's contract (a split sample's, once the threshold pass has merged it), from
// the sample it must have drawn (runs of 32 adjacent elements centred in equal strata of the
// row): its threshold t is at most the sample's rank-th largest key, at least `rank` sample keys
// reach it, exactly `rank` do unless t is that key itself (ties) or the lowest key of a test's
// corner, t is the lowest key its test accepts (no candidate lies below it, so none falls past
// the last key bin), and the key bins span the sample's keys above t. A looser threshold would
// still give exact results, through more candidates, so only this check sees it.
template <class T, class State>
void check_sample_thresholds(const RowGeometry& g, const T* input, bool largest,
                             const MultiChoice& c, const std::vector<State>& states) {
  using Key = typename KeyTraits<T>::Key;
  const int64_t per_thread = c.wide_sample ? kWideSamplesPerThread : kNarrowSamplesPerThread;
  const int64_t runs = kSampleThreads * per_thread / 32;
  for (int64_t r = 0; r < g.rows; ++r) {
    std::vector<Key> keys;
    for (int64_t run = 0; run < runs; ++run) {
      const int64_t centre = (2 * run + 1) * g.n / (2 * runs);
      const int64_t start = std::min(std::max(centre - 16, int64_t(0)), g.n - 32);
      for (int64_t lane = 0; lane < 32; ++lane) {
        keys.push_back(selection_key(input[r * g.n + start + lane], largest));
      }
    }
    std::sort(keys.begin(), keys.end(), std::greater<>());
    const Key t = Key(states[size_t(r)].threshold >> 32);
    const Key ranked = keys[c.sample_rank - 1];
    const int64_t reaching = std::count_if(keys.begin(), keys.end(), [&](Key k) { return k >= t; });
    // The row keeps the lowest key the pass's test accepts, below the bucket's edge in the
    // test's corners: +inf's for a NaN-only threshold, 0 where every non-NaN key reaches it.
    const bool lowest = t == KeyThreshold<T>::lowest_accepted_key(t, largest);
    const Key lowest_of_ranked = KeyThreshold<T>::lowest_accepted_key(ranked, largest);
    const bool corner = (t != ranked && t == lowest_of_ranked) || (!largest && t == 0);
    if (!lowest || t > ranked || reaching < int64_t(c.sample_rank) ||
        (reaching != int64_t(c.sample_rank) && t != ranked && !corner)) {
      std::fprintf(stderr, "FAIL sample threshold: row %lld rank %u: %lld samples reach it\n",
                   (long long)r, c.sample_rank, (long long)reaching);
      ++failures;
    }
    // The key bins span the sample's keys from the threshold to its largest.
    const uint32_t shift = states[size_t(r)].threshold_shift;
    if (shift != key_bin_shift(keys.front(), t)) {
      std::fprintf(stderr, "FAIL key bin shift: row %lld: %u\n", (long long)r, shift);
      ++failures;
    }
  }
}

// The multi-block path's scratch: launch_topk's row states, winners and candidate buffers.
template <class Comp>
struct MultiScratch {
  std::vector<RowState<Comp>> states;
  std::vector<Comp> winners, buffer0, buffer1;
};

// Scratch as a call finds it after launch_topk's memset: zeroed row states. Scratch is not
// cleared on the GPU otherwise: all-ones composites would sort first, so a short row's winner
// slots that the finish leaves unset show in the results.
template <class Comp>
MultiScratch<Comp> fresh_multi_scratch(const RowGeometry& g, int64_t capacity) {
  MultiScratch<Comp> scratch;
  scratch.states.resize(size_t(g.rows));
  scratch.winners.assign(size_t(g.rows * g.k), ~Comp(0));
  scratch.buffer0.resize(size_t(g.rows * capacity));
  scratch.buffer1.resize(size_t(g.rows * capacity));
  return scratch;
}

// Whether the plan runs finish_placing_kernel for k and choice c (finish_placement_bytes): k past
// the finish's sort, up to the radix sort's, 16- and 32-bit keys and a sampled threshold's
// key-prefix bins.
template <class T>
bool finish_places(int64_t k, const MultiChoice& c) {
  constexpr size_t kKeyBytes = sizeof(typename KeyTraits<T>::Key);
  return k > kSortCapacity && k <= kRowRadixSortMaxK && (kKeyBytes == 2 || kKeyBytes == 4) &&
         c.sample_rank > 0 && c.histogram == CandidateHistogram::KeyPrefix;
}

// Runs the path on `scratch` as it stands (a stream's scratch on the GPU keeps whatever the
// calls before left there), or, without one, on fresh scratch.
template <class T>
void run_multi(const RowGeometry& g, const T* input, Bits<T>* values, void* indices,
               bool largest, const MultiChoice& c, const RaggedRows& ragged = RaggedRows{},
               bool index64 = true,
               MultiScratch<Composite<typename KeyTraits<T>::Key>>* scratch = nullptr) {
  using Comp = Composite<typename KeyTraits<T>::Key>;
  MultiScratch<Comp> fresh;
  if (scratch == nullptr) {
    fresh = fresh_multi_scratch<Comp>(g, c.capacity);
    scratch = &fresh;
  }
  std::vector<RowState<Comp>>& states = scratch->states;
  std::vector<Comp>& winners = scratch->winners;
  std::vector<Comp>& buffer0 = scratch->buffer0;
  std::vector<Comp>& buffer1 = scratch->buffer1;
  const MultiLayout layout{c.blocks_per_row, c.capacity, 0, c.split_sample ? c.sample_rank : 0};
  const int64_t grid = g.rows * c.blocks_per_row;
  if (c.sample_rank > 0) {
    launch(g.rows * (c.split_sample ? kSplitSampleParts : 1), kSampleThreads, [&] {
      if (c.split_sample) {
        multi_sample_kernel<T, kWideSamplesPerThread / kSplitSampleParts, kSplitSampleParts>(
            g, input, largest, c.sample_rank, layout, states.data(), ragged);
      } else if (c.wide_sample) {
        multi_sample_kernel<T, kWideSamplesPerThread>(g, input, largest, c.sample_rank,
                                                     layout, states.data(), ragged);
      } else {
        multi_sample_kernel<T, kNarrowSamplesPerThread>(g, input, largest, c.sample_rank,
                                                       layout, states.data(), ragged);
      }
    });
    launch(grid, kMultiThreads, [&] {
      if (c.large_stage) {
        multi_threshold_kernel<T, kLargeThresholdStageBytes>(
            g, input, largest, layout, states.data(), buffer0.data(), c.histogram, ragged);
      } else {
        multi_threshold_kernel<T, kSmallThresholdStageBytes>(
            g, input, largest, layout, states.data(), buffer0.data(), c.histogram, ragged);
      }
    });
    // A split one's is the pass's; a ragged row's rank is its own (sampled_rank).
    if (!ragged.is_ragged()) check_sample_thresholds(g, input, largest, c, states);
  } else {
    launch(grid, kMultiThreads, [&] {
      multi_histogram_kernel<T>(g, input, largest, layout, states.data(), ragged);
    });
  }
  launch(grid, kMultiThreads, [&] {
    multi_filter_kernel<T>(g, input, largest, layout, states.data(), winners.data(),
                           buffer0.data(), buffer1.data(), true, c.sample_rank > 0, ragged);
  });
  launch(grid, kMultiThreads, [&] {
    multi_filter_kernel<T>(g, input, largest, layout, states.data(), winners.data(),
                           buffer1.data(), buffer0.data(), false, false, ragged);
  });
  const bool sort_here = g.k <= kSortCapacity;
  // finish_placing_kernel where the plan takes it (finish_placement_bytes), its shared memory a
  // buffer here; the radix sort of what it leaves is CUB's, for which sort_row_winners stands in.
  const bool placing = finish_places<T>(g.k, c);
  std::vector<Comp> placement(size_t(placing ? g.k : 0));
  launch(g.rows, kBlockThreads, [&] {
    finish_row<T>(g, input, values, indices, index64, largest, layout, states.data(),
                  winners.data(), buffer0.data(), buffer1.data(), sort_here, ragged,
                  placing ? placement.data() : nullptr);
  });
  if (sort_here) return;
  const int64_t sort_bytes = row_sort_bytes(g.k, int64_t(sizeof(Comp)));
  if (sort_bytes <= kRowSortMaxBytes) {  // sort_rows_kernel, its shared memory a buffer here
    std::vector<Comp> row_sort(size_t(sort_bytes) / sizeof(Comp));
    launch(g.rows, kBlockThreads, [&] {
      if (states[size_t(blockIdx.x)].output_written) return;  // as radix_sort_rows_kernel
      sort_row_winners<T>(row_sort.data(), g, input, values, indices, index64, largest,
                          winners.data(), ragged, blockIdx.x);
    });
    return;
  }
  // launch_topk's segmented sort, then its write kernel
  for (int64_t r = 0; r < g.rows; ++r) {
    std::sort(winners.begin() + r * g.k, winners.begin() + (r + 1) * g.k, std::greater<>());
  }
  launch(1, 256, [&] {
    write_sorted_kernel<T>(g, input, values, indices, index64, largest, winners.data(), ragged);
  });
}

// The cluster path as launch_topk runs it: a cluster of kClusterBlocks blocks per row.
template <class T, int Items>
void run_cluster_rows(const RowGeometry& g, const T* input, Bits<T>* values, int64_t* indices,
                      bool largest, bool sorted) {
  using Shared = ClusterShared<Composite<typename KeyTraits<T>::Key>>;
  for (int64_t row = 0; row < g.rows; ++row) {
    std::vector<Shared> shared(kClusterBlocks);
    const emu::Cluster<Shared> cluster{shared.data()};
    emu::run_cluster(kClusterBlocks, kBlockThreads, unsigned(row * kClusterBlocks), [&] {
      cluster_select_block<T, Items>(cluster, shared[emu::cluster_rank], g, input, values,
                                     indices, true, largest, sorted);
    });
  }
}

template <class T>
void run_case(int64_t rows, int64_t n, int64_t k, Data data, bool largest, const char* name,
              const MultiChoice* multi, bool cluster = false, bool sorted = true,
              bool key_cache = false) {
  std::vector<std::vector<T>> input_rows;
  std::vector<T> input;
  for (int64_t r = 0; r < rows; ++r) {
    input_rows.push_back(make_row<T>(n, data));
    input.insert(input.end(), input_rows.back().begin(), input_rows.back().end());
  }
  RowGeometry g;
  g.n = n;
  g.k = k;
  g.rows = rows;
  g.batch_ndim = 1;
  g.batch_sizes[0] = rows;
  g.input_batch_strides[0] = n;
  g.values_batch_strides[0] = g.indices_batch_strides[0] = k;
  std::vector<Bits<T>> values(size_t(rows * k));
  std::vector<int64_t> indices(size_t(rows * k), -1);
  using Comp = Composite<typename KeyTraits<T>::Key>;
  MultiScratch<Comp> scratch;
  if (multi != nullptr) {
    scratch = fresh_multi_scratch<Comp>(g, multi->capacity);
    run_multi<T>(g, input.data(), values.data(), indices.data(), largest, *multi, RaggedRows{},
                 true, &scratch);
  } else if (cluster) {
    if constexpr (sizeof(typename KeyTraits<T>::Key) <= 4) {
      if (n <= int64_t(kClusterBlocks) * kBlockThreads * kClusterSmallItems) {
        run_cluster_rows<T, kClusterSmallItems>(g, input.data(), values.data(), indices.data(),
                                                largest, sorted);
      } else {
        run_cluster_rows<T, kClusterMaxItems>(g, input.data(), values.data(), indices.data(),
                                              largest, sorted);
      }
    }
  } else {
    run_block_rows<T>(g, input.data(), values.data(), indices.data(), true, largest, sorted,
                      RaggedRows{}, key_cache);
  }
  ++cases;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<T>& row = input_rows[size_t(r)];
    std::vector<int64_t> order = std::vector<int64_t>(size_t(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return selection_key(row[size_t(a)], largest) > selection_key(row[size_t(b)], largest);
    });
    if (!sorted) {
      // Any order: put the row's results in the reference's order first (an index that is not
      // among the winners sorts last and fails below).
      std::vector<int64_t> rank_of(size_t(n), n);
      for (int64_t j = 0; j < n; ++j) rank_of[size_t(order[size_t(j)])] = j;
      std::vector<std::pair<int64_t, Bits<T>>> got(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) {
        got[size_t(j)] = {indices[size_t(r * k + j)], values[size_t(r * k + j)]};
      }
      std::sort(got.begin(), got.end(), [&](const auto& a, const auto& b) {
        const auto rank = [&](int64_t i) { return i < 0 || i >= n ? n : rank_of[size_t(i)]; };
        return rank(a.first) < rank(b.first);
      });
      for (int64_t j = 0; j < k; ++j) {
        indices[size_t(r * k + j)] = got[size_t(j)].first;
        values[size_t(r * k + j)] = got[size_t(j)].second;
      }
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t got = indices[size_t(r * k + j)];
      Bits<T> expected_bits;
      std::memcpy(&expected_bits, &row[size_t(order[size_t(j)])], sizeof(T));
      if (got != order[size_t(j)] || values[size_t(r * k + j)] != expected_bits) {
        std::fprintf(stderr,
                     "FAIL %s %s rows=%lld n=%lld k=%lld data=%d largest=%d sorted=%d: row %lld "
                     "rank %lld index %lld, expected %lld\n",
                     multi != nullptr ? "multi" : cluster ? "cluster" : "block", name, (long long)rows, (long long)n,
                     (long long)k, int(data), int(largest), int(sorted), (long long)r, (long long)j,
                     (long long)got, (long long)order[size_t(j)]);
        ++failures;
        return;
      }
    }
  }
  // k past the finish's sort, from key prefixes: on random floats the finish ranks each row
  // within its bins and writes it, leaving the sort kernel nothing; bf16 rows too, whose ties
  // crowd whole keys (tens of elements a key here) and are split by index (TiedKeyBins).
  if (multi != nullptr && finish_places<T>(k, *multi) &&
      (std::is_same_v<T, float> || std::is_same_v<T, bf16_bits>) && data == Data::Random) {
    for (int64_t r = 0; r < rows; ++r) {
      if (scratch.states[size_t(r)].output_written == 0) {
        std::fprintf(stderr, "FAIL multi %s rows=%lld n=%lld k=%lld largest=%d: row %lld was "
                     "left to the sort kernel\n", name, (long long)rows, (long long)n,
                     (long long)k, int(largest), (long long)r);
        ++failures;
        return;
      }
    }
  }
}

// Ragged rows (mtk_topk_ragged) through the block kernel or the plain multi-block path: windows
// from lengths and starts of every kind (negative, zero, below k, past the row, starts past
// it), each transform, int32 indices and no values, against a stable sort of each window cut
// out of its row, clipped here independently of RaggedRows.
enum class Transform { None, Ragged, PageTable };

struct RaggedCase {
  int64_t rows, n, k;
  const MultiChoice* multi;  // null: the block kernel
  bool with_starts;
  Transform transform;
  int64_t page_size;
  bool with_row_to_batch, index64, with_values;
};

template <class T>
void run_ragged_case(const RaggedCase& c, Data data, bool largest, bool sorted, bool key_cache,
                     const char* name) {
  const int64_t rows = c.rows, n = c.n, k = c.k;
  std::vector<T> input;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<T> row = make_row<T>(n, data);
    input.insert(input.end(), row.begin(), row.end());
  }
  // Lengths and starts of every kind, in turn by row.
  const int64_t length_kinds[] = {-5, 0, 1, k - 1, k, k + 1, n, n + 7, n / 2, n / 3 + 1};
  const int64_t start_kinds[] = {0, -3, 1, n / 4, n - 1, n, n + 5, 17};
  std::vector<int64_t> lengths(static_cast<size_t>(rows)), starts(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    lengths[size_t(r)] = length_kinds[(r + int64_t(rng() % 3)) % 10];
    starts[size_t(r)] = c.with_starts ? start_kinds[(r * 3 + int64_t(rng() % 2)) % 8] : 0;
  }
  // Transforms: offsets near the top of int64 (wrapping), a page table of a few batches with
  // pages in a shuffled order, rows mapped to batches (one of them outside the table).
  const int64_t batches = c.with_row_to_batch ? 3 : rows;
  const int64_t pages = (n + c.page_size - 1) / c.page_size + 1;
  std::vector<int64_t> offsets(static_cast<size_t>(rows)),
      page_table(static_cast<size_t>(batches * pages)), row_to_batch(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    offsets[size_t(r)] = r % 2 == 0 ? int64_t(rng() % 100000) : INT64_MAX - int64_t(rng() % 50);
    row_to_batch[size_t(r)] = r % 5 == 4 ? batches : int64_t(rng() % uint64_t(batches));
  }
  for (int64_t& p : page_table) p = int64_t(rng() % 1000);

  RaggedRows ragged;
  ragged.lengths = RowVector{lengths.data(), MTK_INT64, 1};
  if (c.with_starts) ragged.starts = RowVector{starts.data(), MTK_INT64, 1};
  if (c.transform == Transform::Ragged) {
    ragged.transform = MTK_INDEX_TRANSFORM_RAGGED;
    ragged.offsets = RowVector{offsets.data(), MTK_INT64, 1};
  } else if (c.transform == Transform::PageTable) {
    ragged.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
    ragged.page_table = page_table.data();
    ragged.page_table_batch = batches;
    ragged.page_table_batch_stride = pages;
    ragged.page_table_page_stride = 1;
    ragged.page_size = c.page_size;
    if (c.with_row_to_batch) ragged.row_to_batch = RowVector{row_to_batch.data(), MTK_INT64, 1};
  }

  RowGeometry g;
  g.n = n;
  g.k = k;
  g.rows = rows;
  g.batch_ndim = 1;
  g.batch_sizes[0] = rows;
  g.input_batch_strides[0] = n;
  g.values_batch_strides[0] = g.indices_batch_strides[0] = k;
  // Outputs start as garbage: every position must be written.
  std::vector<Bits<T>> values(size_t(rows * k), Bits<T>(0x5a));
  std::vector<int64_t> indices64(size_t(rows * k), 77);
  std::vector<int32_t> indices32(size_t(rows * k), 77);
  Bits<T>* values_out = c.with_values ? values.data() : nullptr;
  void* indices_out = c.index64 ? static_cast<void*>(indices64.data()) : indices32.data();
  MultiScratch<Composite<typename KeyTraits<T>::Key>> scratch;
  if (c.multi != nullptr) {
    scratch = fresh_multi_scratch<Composite<typename KeyTraits<T>::Key>>(g, c.multi->capacity);
    run_multi<T>(g, input.data(), values_out, indices_out, largest, *c.multi, ragged, c.index64,
                 &scratch);
  } else {
    run_block_rows<T>(g, input.data(), values_out, indices_out, c.index64, largest, sorted,
                      ragged, key_cache);
  }
  ++cases;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = std::min(std::max(starts[size_t(r)], int64_t(0)), n);
    int64_t length = std::min(std::max(lengths[size_t(r)], int64_t(0)), n - start);
    const int64_t batch = c.with_row_to_batch ? row_to_batch[size_t(r)] : r;
    if (c.transform == Transform::PageTable && (batch < 0 || batch >= batches)) length = 0;
    const T* row = input.data() + r * n + start;
    std::vector<int64_t> order(static_cast<size_t>(length));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return selection_key(row[a], largest) > selection_key(row[b], largest);
    });
    // Unsorted, the block kernel writes a window's winners in index order.
    if (!sorted) std::sort(order.begin(), order.begin() + std::min(k, length));
    for (int64_t j = 0; j < k; ++j) {
      int64_t expected = -1;
      Bits<T> expected_bits = 0;
      if (j < length) {
        const int64_t i = order[size_t(j)];
        std::memcpy(&expected_bits, &row[i], sizeof(T));
        expected = i;
        if (c.transform == Transform::Ragged) {
          expected = int64_t(uint64_t(offsets[size_t(r)]) + uint64_t(i));
        } else if (c.transform == Transform::PageTable) {
          expected = page_table[size_t(batch * pages + i / c.page_size)] * c.page_size +
                     i % c.page_size;
        }
      }
      const size_t at = size_t(r * k + j);
      const int64_t got = c.index64 ? indices64[at] : int64_t(indices32[at]);
      if (!c.index64) expected = int64_t(int32_t(expected));
      const bool value_ok = c.with_values ? values[at] == expected_bits : values[at] == 0x5a;
      if (got != expected || !value_ok) {
        std::fprintf(stderr,
                     "FAIL ragged %s %s rows=%lld n=%lld k=%lld data=%d largest=%d sorted=%d "
                     "transform=%d page_size=%lld: row %lld (start %lld length %lld) rank %lld "
                     "index %lld, expected %lld\n",
                     c.multi != nullptr ? "multi" : "block", name, (long long)rows, (long long)n,
                     (long long)k, int(data), int(largest), int(sorted), int(c.transform),
                     (long long)c.page_size, (long long)r, (long long)start, (long long)length,
                     (long long)j, (long long)got, (long long)expected);
        ++failures;
        return;
      }
    }
  }
  // Every window a sampled plan's buffer holds is thresholded (window_threshold): on random data
  // no row may hold the batch back with the exact passes.
  if (c.multi != nullptr && c.multi->sample_rank > 0 && data == Data::Random) {
    for (int64_t r = 0; r < rows; ++r) {
      if (scratch.states[size_t(r)].fallback != 0) {
        std::fprintf(stderr,
                     "FAIL ragged multi %s rows=%lld n=%lld k=%lld largest=%d: row %lld (length "
                     "%lld) took the exact passes\n",
                     name, (long long)rows, (long long)n, (long long)k, int(largest),
                     (long long)r, (long long)lengths[size_t(r)]);
        ++failures;
        return;
      }
    }
  }
}

template <class T>
void run_ragged_cases(const char* name, bool quick) {
  const MultiChoice plain{3, 3000, 0, CandidateHistogram::None, false, false};
  const MultiChoice small_buffer{4, 600, 0, CandidateHistogram::None, false, false};
  // Sampled: each window is thresholded at a rank of its own, wholly where it is shorter than
  // the sample or has too few elements to rank k (window_threshold).
  const MultiChoice sampled{3, 20000, 1, CandidateHistogram::None, false, false};
  const MultiChoice sampled_bins{4, 40000, 1, CandidateHistogram::KeyPrefix, false, true};
  const MultiChoice sampled_wide{3, 70000, 1, CandidateHistogram::TopDigit, true, false};
  // k above the narrow sample: windows of 2048..k-1 elements are taken whole (threshold key 0).
  const MultiChoice sampled_large_k{3, 30000, 1, CandidateHistogram::KeyPrefix, false, true};
  // Windows shorter than the wide sample are sampled whole, leaving the k-th's key-prefix bucket
  // more than a block, and windows of ~1.2 k-2.5 k put winners of both signs into few bins:
  // the finish bins those rows again, finer (finish_by_finer_key_bins).
  const MultiChoice sampled_wide_bins{4, 20000, 1, CandidateHistogram::KeyPrefix, true, true};
  const RaggedCase ragged_cases[] = {
      {12, 100, 1, nullptr, false, Transform::None, 1, false, true, true},
      {12, 700, 37, nullptr, true, Transform::None, 1, false, false, true},
      {10, 1500, 512, nullptr, true, Transform::Ragged, 1, false, true, false},
      {10, 300, 2048, nullptr, true, Transform::PageTable, 1, false, true, true},
      {10, 3000, 64, nullptr, true, Transform::PageTable, 64, true, false, true},
      // The indexer's calls (int32 indices alone, as they are or offset), which the block kernel
      // writes by plain stores: windows shorter than k written without a read; and rows of 12000,
      // where few distinct values leave the chosen first-digit bucket too big to gather.
      {12, 1200, 700, nullptr, false, Transform::None, 1, false, false, false},
      {10, 2500, 300, nullptr, true, Transform::Ragged, 1, false, false, false},
      {10, 12000, 1000, nullptr, true, Transform::Ragged, 1, false, false, false},
      {10, 9000, 100, &plain, true, Transform::None, 1, false, true, true},
      {10, 9000, 1000, &plain, false, Transform::Ragged, 1, false, false, true},
      {10, 9000, 2048, &small_buffer, true, Transform::PageTable, 64, true, true, false},
      {10, 5000, 4096, &plain, true, Transform::PageTable, 1, true, true, true},
      {10, 9000, 3000, &plain, true, Transform::None, 1, false, false, false},
      {10, 20000, 50, &sampled, true, Transform::Ragged, 1, false, true, true},
      {10, 40000, 700, &sampled_bins, true, Transform::PageTable, 64, true, false, true},
      {10, 40000, 2048, &sampled_bins, false, Transform::None, 1, false, true, false},
      {10, 5000, 2048, &sampled_bins, true, Transform::PageTable, 1, false, false, false},
      {10, 20000, 2048, &sampled_wide_bins, false, Transform::None, 1, false, true, true},
      {6, 70000, 100, &sampled_wide, true, Transform::None, 1, false, true, true},
      {10, 30000, 3000, &sampled_large_k, true, Transform::Ragged, 1, false, true, true},
  };
  for (const RaggedCase& c : ragged_cases) {
    for (Data data : {Data::Random, Data::FewDistinct, Data::Special}) {
      if (std::is_integral_v<T> && data == Data::Special) continue;
      for (bool largest : {true, false}) {
        if (quick && largest != (data == Data::Random)) continue;
        run_ragged_case<T>(c, data, largest, true, false, name);
        // The multi-block path sorts whatever `sorted` says; the block kernel does not, and
        // caches the keys of rows that fit.
        if (c.multi == nullptr) {
          run_ragged_case<T>(c, data, largest, false, false, name);
          run_ragged_case<T>(c, data, largest, true, true, name);
          run_ragged_case<T>(c, data, largest, false, true, name);
        }
      }
    }
  }
}

// Whether row r's k outputs (f32 values, int64 indices) are a stable sort under selection_key
// of `window`'s `length` elements, then padding; reports the first difference as `what`.
bool window_results_match(const char* what, int64_t r, const float* window, int64_t length,
                          int64_t k, bool largest, const uint32_t* values,
                          const int64_t* indices) {
  std::vector<int64_t> order(static_cast<size_t>(length));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return selection_key(window[a], largest) > selection_key(window[b], largest);
  });
  for (int64_t j = 0; j < k; ++j) {
    const int64_t expected = j < length ? order[size_t(j)] : -1;
    uint32_t expected_bits = 0;
    if (j < length) std::memcpy(&expected_bits, &window[expected], 4);
    const size_t at = size_t(r * k + j);
    if (indices[at] != expected || values[at] != expected_bits) {
      std::fprintf(stderr,
                   "FAIL %s: row %lld (length %lld) rank %lld: index %lld value %08x, expected "
                   "%lld %08x\n",
                   what, (long long)r, (long long)length, (long long)j, (long long)indices[at],
                   values[at], (long long)expected, expected_bits);
      ++failures;
      return false;
    }
  }
  return true;
}

RowGeometry dense_geometry(int64_t rows, int64_t n, int64_t k) {
  RowGeometry g;
  g.n = n;
  g.k = k;
  g.rows = rows;
  g.batch_ndim = 1;
  g.batch_sizes[0] = rows;
  g.input_batch_strides[0] = n;
  g.values_batch_strides[0] = g.indices_batch_strides[0] = k;
  return g;
}

// The ragged conformance's CUDA-graph case (tests/cuda/cuda_ragged_conformance.cpp) on the plan
// the H200 takes for it (64 rows of 100000 f32, k = 2048: sampled, rank 76, eight blocks a
// row, key-prefix bins, 16384 candidate slots): one workspace, filled with zeros, all ones or
// random bytes once, then a call with every length 0 and calls with random windows, nothing
// cleared in between, as a stream's scratch is between a graph's replays. The rows are the
// conformance's: an eighth special (NaN of both signs, infinities, signed zeros), so a window's
// sample often ranks NaN at its rank, and the window holds fewer +inf than k.
void run_ragged_replays(bool quick) {
  using Comp = Composite<uint32_t>;
  const int64_t rows = 64, n = 100000, k = 2048;
  const MultiChoice plan{8, 16384, 76, CandidateHistogram::KeyPrefix, false, false};
  std::vector<float> input(size_t(rows * n));
  const uint32_t specials[] = {0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u, 0x80000000u,
                               0u};
  for (float& x : input) {
    const uint64_t raw = rng();
    x = float(int(raw % 2001) - 1000) / 8;
    if ((raw >> 20) % 8 == 0) std::memcpy(&x, &specials[(raw >> 24) % 6], 4);
  }
  const RowGeometry g = dense_geometry(rows, n, k);
  for (int fill = 0; fill < (quick ? 1 : 3); ++fill) {
    MultiScratch<Comp> scratch;
    scratch.states.resize(size_t(rows));
    scratch.winners.resize(size_t(rows * k));
    scratch.buffer0.resize(size_t(rows * plan.capacity));
    scratch.buffer1.resize(size_t(rows * plan.capacity));
    auto garbage = [&](auto& v) {
      auto* bytes = reinterpret_cast<unsigned char*>(v.data());
      for (size_t i = 0; i < v.size() * sizeof(v[0]); ++i) {
        bytes[i] = fill == 0 ? 0xFF : fill == 1 ? 0 : (unsigned char)(rng());
      }
    };
    garbage(scratch.states);
    garbage(scratch.winners);
    garbage(scratch.buffer0);
    garbage(scratch.buffer1);
    for (int call = 0; call < (quick ? 2 : 4); ++call) {
      std::vector<int32_t> lengths(size_t(rows), 0);
      std::vector<int64_t> starts(size_t(rows), 0);
      if (call > 0) {
        for (int64_t r = 0; r < rows; ++r) {
          lengths[size_t(r)] = int32_t(int64_t(rng() % uint64_t(n + 100)) - 50);
          starts[size_t(r)] = int64_t(rng() % uint64_t(n / 2));
        }
      }
      RaggedRows ragged;
      ragged.lengths = RowVector{lengths.data(), MTK_INT32, 1};
      ragged.starts = RowVector{starts.data(), MTK_INT64, 1};
      std::vector<uint32_t> values(size_t(rows * k), 0xA5A5A5A5u);
      std::vector<int64_t> indices(size_t(rows * k), 77);
      run_multi<float>(g, input.data(), values.data(), indices.data(), true, plan, ragged, true,
                       &scratch);
      ++cases;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t start = std::min(std::max(starts[size_t(r)], int64_t(0)), n);
        const int64_t length =
            std::min(std::max(int64_t(lengths[size_t(r)]), int64_t(0)), n - start);
        if (!window_results_match("ragged replay", r, input.data() + r * n + start, length, k,
                                  true, values.data(), indices.data())) {
          std::fprintf(stderr, "  fill %d call %d start %lld\n", fill, call, (long long)start);
          break;
        }
      }
    }
  }
}

// Dense rows whose sampled threshold falls in a corner of the threshold test (key_threshold.hpp),
// where the test also takes keys below the threshold: largest, NaN in a tenth of the row and
// +inf in a hundredth (the sample ranks NaN at its rank, the row holds fewer +inf than k); and
// smallest, +inf almost everywhere (every non-NaN key reaches the threshold, so the test takes
// NaN too, and the whole row fits the buffer). Measured from the threshold, those keys fell past
// the last key-prefix bin and ranked above the row's best.
void run_threshold_corner_rows() {
  struct Corner {
    int64_t rows, n, k;
    MultiChoice plan;
    bool largest;
    double nan_share, infinity_share;
    float finite_scale;  // the other values: multiples of it in [-125, 125], or [1, 3] if huge
  };
  const Corner corners[] = {
      {4, 100000, 2048, {8, 16384, 76, CandidateHistogram::KeyPrefix, false, false}, true, 0.1,
       0.01, 1.0f},
      // Finite values near the top of the range keep the bins narrow enough that NaN's key
      // (0) lies a whole bin below the threshold.
      {4, 16000, 500, {4, 16384, 104, CandidateHistogram::KeyPrefix, false, false}, false, 0.01,
       0.97, 1e38f},
  };
  std::uniform_real_distribution<double> share(0.0, 1.0);
  for (const Corner& c : corners) {
    std::vector<float> input(size_t(c.rows * c.n));
    for (float& x : input) {
      const double u = share(rng);
      const float finite = c.finite_scale > 1 ? c.finite_scale * float(1 + share(rng) * 2)
                                              : float(int(rng() % 2001) - 1000) / 8;
      x = u < c.nan_share ? (rng() % 2 ? NAN : -NAN)
          : u < c.nan_share + c.infinity_share ? INFINITY : finite;
    }
    std::vector<uint32_t> values(size_t(c.rows * c.k), 0xA5A5A5A5u);
    std::vector<int64_t> indices(size_t(c.rows * c.k), 77);
    run_multi<float>(dense_geometry(c.rows, c.n, c.k), input.data(), values.data(),
                     indices.data(), c.largest, c.plan);
    ++cases;
    for (int64_t r = 0; r < c.rows; ++r) {
      if (!window_results_match(c.largest ? "threshold corner, largest"
                                           : "threshold corner, smallest",
                                r, input.data() + r * c.n, c.n, c.k, c.largest, values.data(),
                                indices.data())) {
        break;
      }
    }
  }
}

template <class T>
void run_type(const char* name, bool quick) {
  run_ragged_cases<T>(name, quick);
  struct Shape { int64_t n, k; };
  const Shape shapes[] = {{1, 1}, {100, 1}, {100, 37}, {700, 64}, {1500, 1000},
                          {3000, 2048}, {5000, 129}, {2049, 2048}};
  for (const Shape& s : shapes) {
    for (Data data : {Data::Random, Data::FewDistinct, Data::Special}) {
      if (std::is_integral_v<T> && data == Data::Special) continue;
      for (bool largest : {true, false}) {
        if (quick && !largest && data != Data::FewDistinct) continue;
        for (bool sorted : {true, false}) {
          for (bool key_cache : {false, true}) {
            run_case<T>(2, s.n, s.k, data, largest, name, nullptr, false, sorted, key_cache);
          }
        }
      }
    }
  }
  // The cluster path, sorted (gathered in block 0) and unsorted (written by each block): rows
  // shorter than a cluster (most blocks, or all but the first thread of a block, hold nothing),
  // each block's slice full (2^16 with 8 slots a thread), the large kernel, k = n and the
  // sort's limit.
  struct ClusterShape { int64_t rows, n, k; };
  const ClusterShape cluster_shapes[] = {{1, 1, 1}, {2, 700, 64}, {1, 1500, 1500},
                                         {1, 20000, 2048}, {1, 65536, 300}, {1, 70000, 50}};
  if constexpr (sizeof(typename KeyTraits<T>::Key) <= 4) {  // the plan's limit
    for (const ClusterShape& c : cluster_shapes) {
      for (Data data : {Data::Random, Data::FewDistinct, Data::Special}) {
        if (std::is_integral_v<T> && data == Data::Special) continue;
        for (bool largest : {true, false}) {
          if (quick && largest != (data != Data::Random)) continue;
          for (bool sorted : {true, false}) {
            run_case<T>(c.rows, c.n, c.k, data, largest, name, nullptr, true, sorted);
          }
        }
      }
    }
  }
  // The multi-block path. The plan's sample rank (topk_plan.cpp) hits; rank 1 leaves fewer than
  // k candidates, the whole narrow sample (2048) more than a small buffer holds: both fall back
  // to the passes over the input.
  auto plan_rank = [](int64_t n, int64_t k, bool wide) {
    const double m = double(k) * kSampleThreads *
                     (wide ? kWideSamplesPerThread : kNarrowSamplesPerThread) / double(n);
    return uint32_t(std::ceil(m + 4 * std::sqrt(m) + 8));
  };
  constexpr CandidateHistogram kNone = CandidateHistogram::None;
  constexpr CandidateHistogram kTop = CandidateHistogram::TopDigit;
  constexpr CandidateHistogram kKey = CandidateHistogram::KeyPrefix;
  struct MultiCase {
    int64_t rows, n, k;
    int blocks_per_row;
    int64_t capacity;
    int rank;  // -1: the plan's
    CandidateHistogram histogram;
    bool wide, large_stage;
    bool split = false;
  };
  const MultiCase multi_cases[] = {
      {2, 20000, 50, 3, 20000, -1, kNone, false, false},    // sampled, direct finish by counting
      {1, 20000, 700, 4, 20000, -1, kNone, false, true},    // sampled, direct finish by rounds
      {1, 20000, 700, 4, 20000, -1, kKey, false, false},    // the same from the k-th's bucket
      {1, 40000, 50, 3, 40000, -1, kNone, true, false},     // the wide sample
      {1, 40000, 3, 3, 40000, -1, kNone, true, false, true},      // split over blocks
      {2, 60000, 6, 4, 60000, 16, kKey, true, true, true},        // two split rows, top rank
      {2, 40000, 300, 3, 40000, 1, kKey, true, false, true},      // split, too few: fallback
      {1, 60000, 4000, 5, 60000, -1, kTop, false, true},    // k above the finish's sort: a
                                                            // block sorts the row's winners
      {1, 40000, 17000, 3, 40000, 0, kNone, false, false},  // past that: segmented sort
      {1, 60000, 4000, 5, 60000, -1, kKey, false, false},   // the same from key prefixes
      {1, 60000, 100, 4, 60000, 1400, kTop, false, false},  // ~41k candidates: filter passes
      {1, 60000, 100, 4, 60000, 1400, kKey, false, true},   // the same from key prefixes
      {1, 60000, 2000, 4, 60000, 700, kKey, false, false},  // ~20k, winners placed in key bins
      {2, 60000, 1000, 5, 60000, 800, kKey, false, true},   // ~23k a row, two rows placed
      {2, 20000, 300, 3, 20000, 1, kKey, false, false},     // too few candidates: fallback
      {1, 30000, 20, 4, 3000, 2048, kTop, false, true},     // overflowing buffer: fallback
      {1, 9000, 100, 3, 3000, 0, kNone, false, false},
      {1, 30000, 200, 4, 30000, 0, kNone, false, false},    // the plain histogram pass
      {1, 101, 100, 3, 3000, 0, kNone, false, false},       // a tail after the vectors
      {1, 30000, 2048, 2, 2000, 0, kNone, false, false},    // plain, bucket past the buffer
  };
  for (const MultiCase& m : multi_cases) {
    for (Data data : {Data::Random, Data::FewDistinct, Data::Special}) {
      if (std::is_integral_v<T> && data == Data::Special) continue;
      if (quick && data == Data::Special) continue;
      for (bool largest : {true, false}) {
        if (quick && largest != (data == Data::Random)) continue;
        const MultiChoice choice{m.blocks_per_row, m.capacity,
                                 m.rank < 0 ? plan_rank(m.n, m.k, m.wide) : uint32_t(m.rank),
                                 m.histogram, m.wide, m.large_stage, m.split};
        run_case<T>(m.rows, m.n, m.k, data, largest, name, &choice);
      }
    }
  }
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  run_threshold_corner_rows();
  run_ragged_replays(quick);
  run_type<float>("f32", quick);
  run_type<double>("f64", quick);
  run_type<bf16_bits>("bf16", quick);
  run_type<int8_t>("i8", quick);
  std::printf("block, cluster and multi-block kernel emulation: %d cases, %d failures\n", cases,
              failures);
  return failures == 0 ? 0 : 1;
}
