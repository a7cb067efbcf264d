// How the CPU backend splits one top-k call into tasks and how much scratch each task needs.
// The plan depends only on the problem's shape and the thread count, never on the data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/problem.hpp"

namespace mtk::cpu {

// Elements are scanned in blocks of this many: one vectorised pass compares a block with the
// running threshold, and only the few elements that beat it are visited one by one.
constexpr int64_t kScanBlock = 32;
// Strided rows are copied to contiguous scratch this many elements at a time before scanning.
constexpr int64_t kGatherPiece = 2048;
// Up to this k a sorted array of the k best with insertion is cheapest: the threshold is always
// exact, so few elements get past it, and each insertion moves at most k words.
constexpr int64_t kInsertionMaxK = 16;
// Rows up to this long (their keys stay in L1) with k <= kInsertionMaxK take the short-row path.
constexpr int64_t kShortRowMax = 4096;

// Keys sampled from a long row to start the buffered selector at a high threshold, for k of at
// least kFloorMinK.
constexpr int64_t kFloorSamples = 1024;
constexpr int64_t kFloorMinK = 256;

enum class RowSelector {
  ShortRow,   // keys of the whole row at once, a cheap floor, then sort the few that reach it
  Insertion,  // stream with a sorted array of the k best (k <= kInsertionMaxK)
  Buffered,   // stream into a candidate buffer pruned to k whenever it fills
};

// The tile transpose requests input lines this many positions ahead of the one it copies.
constexpr int64_t kTilePrefetchAhead = 8;
// At most this many segments per split row (their best k are merged through a heap this big).
constexpr int64_t kMaxChunks = 64;

enum class RowLayout {
  Contiguous,  // input stride along dim is 1: rows are scanned in place
  Tiled,       // rows strided, but adjacent rows are adjacent in memory (e.g. dim 0 of a matrix):
               // a tile of rows is transposed into scratch with contiguous reads, then scanned
  Gathered,    // anything else: each row is copied in pieces of kGatherPiece elements
};

struct TopkPlan {
  RowLayout layout = RowLayout::Contiguous;
  int64_t tile_rows = 1;   // Tiled: rows per tile (all within one run of the innermost batch dim)
  int64_t chunks = 1;      // >1: each row is split into this many segments searched in parallel
  int64_t chunk_len = 0;   // elements per segment (the last may be shorter)
  bool wide_words = false; // candidates packed in 128 bits (64-bit keys or rows >= 2^32)
  size_t word_bytes = 8;
  RowSelector selector = RowSelector::Buffered;
  int64_t candidate_capacity = 0;  // Buffered: words in the candidate buffer
  int workers = 1;
  size_t selector_bytes = 0;  // per worker: candidate words (and a short row's keys)
  size_t gather_bytes = 0;    // per worker: gathered piece or tile
  size_t worker_bytes = 0;    // per worker in all, a multiple of kScratchAlign
  size_t shared_bytes = 0;    // per call: every segment's k best words when rows are split
};

constexpr size_t kScratchAlign = 64;

TopkPlan make_topk_plan(const TopkProblem& problem, int threads);

// Total scratch of a plan, as one workspace: shared part, then one slice per worker.
inline size_t plan_scratch_bytes(const TopkPlan& plan) {
  return plan.shared_bytes + plan.worker_bytes * static_cast<size_t>(plan.workers);
}

// Scratch of one call, already carved: `shared` and `worker[w]` for w < plan.workers.
struct ScratchView {
  std::byte* shared = nullptr;
  std::byte* const* worker = nullptr;
};

}  // namespace mtk::cpu
