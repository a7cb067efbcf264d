#include "cpu/topk_plan.hpp"

#include <algorithm>

#include "core/dtype.hpp"

namespace mtk::cpu {
namespace {

size_t round_up(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// A tile of strided rows is transposed into at most this much scratch (about half of L2), so the
// scan that follows reads it from cache.
constexpr size_t kMaxTileBytes = size_t{512} << 10;
// Reading this many bytes per row at each position of a tile covers whole cache lines.
constexpr size_t kTileReadBytes = 128;
// Segments of a split row are at least this long, so a task's fixed costs stay negligible.
constexpr int64_t kMinSegment = int64_t{1} << 16;
// Up to this k, a split row gets several segments per thread (see make_topk_plan).
constexpr int64_t kSmallSegmentK = 1024;

}  // namespace

TopkPlan make_topk_plan(const TopkProblem& problem, int threads) {
  const RowGeometry& g = problem.geometry;
  const size_t elem = dtype_info(problem.dtype)->size;  // keys are as wide as elements
  TopkPlan plan;
  plan.workers = std::max(1, threads);
  plan.wide_words = elem == 8 || g.n >= (int64_t{1} << 32);
  plan.word_bytes = plan.wide_words ? 16 : 8;

  if (g.k <= kInsertionMaxK) {
    plan.selector = g.n <= kShortRowMax ? RowSelector::ShortRow : RowSelector::Insertion;
  } else {
    // Pruning a buffer of 4k keeps k: each prune costs O(4k) and makes room for 3k candidates.
    // Never larger than the row, which then fits whole and is pruned once, at the end.
    plan.candidate_capacity = std::min<int64_t>(std::max<int64_t>(4 * g.k, 1024), g.n);
  }

  if (g.input_stride != 1) {
    plan.layout = RowLayout::Gathered;
    const int last = g.batch_ndim - 1;
    if (last >= 0 && g.input_batch_strides[last] == 1) {
      const int64_t inner = g.batch_sizes[last];
      int64_t tile = std::min<int64_t>(inner, std::max<size_t>(1, kTileReadBytes / elem));
      tile = std::min<int64_t>(tile, static_cast<int64_t>(kMaxTileBytes / (elem * g.n)));
      if (tile >= 4) {
        plan.layout = RowLayout::Tiled;
        plan.tile_rows = tile;
      }
    }
  }

  if (plan.layout != RowLayout::Tiled && g.rows < plan.workers) {
    // Too few rows to occupy every thread: split each row. For small k, four segments per
    // thread let the others take over when one thread is slowed down (the machine may be
    // shared). A segment's fixed cost grows with k (it sorts its k best for the merge), so a
    // large k gets one segment per thread, each much longer than k.
    const bool small_k = g.k <= kSmallSegmentK;
    const int64_t per_thread = small_k ? 4 : 1;
    const int64_t min_segment = std::max<int64_t>(kMinSegment, 16 * g.k);
    const int64_t wanted = (per_thread * plan.workers + g.rows - 1) / g.rows;
    const int64_t chunks = std::min({wanted, g.n / min_segment, kMaxChunks});
    if (chunks > 1) {
      plan.chunks = chunks;
      plan.chunk_len = (g.n + chunks - 1) / chunks;
      plan.shared_bytes = round_up(static_cast<size_t>(g.rows * chunks * g.k) * plan.word_bytes);
    }
  }
  if (plan.chunks == 1) plan.chunk_len = g.n;

  const size_t n = static_cast<size_t>(g.n);
  switch (plan.selector) {
    case RowSelector::ShortRow:  // n words and n keys
      plan.selector_bytes = n * (plan.word_bytes + elem);
      break;
    case RowSelector::Insertion:
      plan.selector_bytes = static_cast<size_t>(g.k) * plan.word_bytes;
      break;
    case RowSelector::Buffered:
      plan.selector_bytes =
          static_cast<size_t>(plan.candidate_capacity + kScanBlock) * plan.word_bytes;
      break;
  }
  plan.selector_bytes = round_up(plan.selector_bytes);
  if (plan.layout == RowLayout::Tiled) {
    plan.gather_bytes = round_up(static_cast<size_t>(plan.tile_rows) * n * elem);
  } else if (plan.layout == RowLayout::Gathered) {
    // A short row is gathered whole, a long one a piece at a time.
    const size_t piece =
        plan.selector == RowSelector::ShortRow ? n : std::min<size_t>(kGatherPiece, n);
    plan.gather_bytes = round_up(piece * elem);
  }
  plan.worker_bytes = plan.selector_bytes + plan.gather_bytes;
  return plan;
}

}  // namespace mtk::cpu
