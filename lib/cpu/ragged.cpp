#include "cpu/ragged.hpp"

#include <algorithm>
#include <cstring>

#include "core/dtype.hpp"
#include "core/ragged_rows.hpp"

namespace mtk::cpu {
namespace {

// The window of `row` as a one-row top-k problem writing to the start of the row's outputs.
TopkProblem window_problem(const RaggedProblem& p, int64_t row, RaggedWindow window) {
  const TopkProblem& dense = p.dense;
  const RowGeometry& g = dense.geometry;
  const RowOffsets at = row_offsets(g, row);
  const auto element = static_cast<int64_t>(dtype_info(dense.dtype)->size);
  const auto index_bytes = static_cast<int64_t>(dtype_info(dense.index_dtype)->size);
  TopkProblem q = dense;
  // An empty window reads nothing: its start may lie one past the row's last element, whose
  // address the input's extent need not hold (a stride near the int64 limit overflows there).
  const int64_t first = window.length > 0 ? window.start * g.input_stride : 0;
  q.input = static_cast<const std::byte*>(dense.input) + (at.input + first) * element;
  q.values = dense.values != nullptr
                 ? static_cast<std::byte*>(dense.values) + at.values * element
                 : nullptr;
  q.indices = static_cast<std::byte*>(dense.indices) + at.indices * index_bytes;
  RowGeometry& h = q.geometry;
  h = RowGeometry{};
  h.n = window.length;
  h.k = std::min(g.k, window.length);
  h.rows = 1;
  h.input_stride = g.input_stride;
  h.values_stride = g.values_stride;
  h.indices_stride = g.indices_stride;
  return q;
}

// Each window is planned alone, on one thread: a row's task never splits (the pool is busy with
// the other rows) and never waits on the pool it runs in.
TopkPlan window_plan(const TopkProblem& window) { return make_topk_plan(window, 1); }

// Transforms the row's `count` winners' indices, then pads positions [count, k): index -1 and
// all-zero value bits.
template <class Index>
void finish_row(const RaggedProblem& p, int64_t row, int64_t count) {
  const RowGeometry& g = p.dense.geometry;
  const RowOffsets at = row_offsets(g, row);
  Index* indices = static_cast<Index*>(p.dense.indices) + at.indices;
  if (p.transform != MTK_INDEX_TRANSFORM_NONE) {
    for (int64_t i = 0; i < count; ++i) {
      Index& index = indices[i * g.indices_stride];
      index = static_cast<Index>(transform_index(p, row, index));
    }
  }
  for (int64_t i = count; i < g.k; ++i) indices[i * g.indices_stride] = Index(-1);
  if (p.dense.values == nullptr) return;
  const auto element = static_cast<int64_t>(dtype_info(p.dense.dtype)->size);
  auto* values = static_cast<std::byte*>(p.dense.values);
  for (int64_t i = count; i < g.k; ++i) {
    std::memset(values + (at.values + i * g.values_stride) * element, 0,
                static_cast<size_t>(element));
  }
}

}  // namespace

size_t ragged_worker_bytes(const RaggedProblem& problem) {
  // A window's scratch grows with its length within each selector's range of lengths (see
  // make_topk_plan), and those ranges end at the row's length n, at the longest short row and
  // at the longest insertion k: the most any window needs is the most of these three.
  const int64_t n = problem.dense.geometry.n;
  size_t most = 0;
  for (const int64_t length : {n, std::min(n, kShortRowMax), std::min(n, kInsertionMaxK)}) {
    if (length < 1) continue;
    const TopkProblem window = window_problem(problem, 0, RaggedWindow{0, length});
    most = std::max(most, window_plan(window).worker_bytes);
  }
  return most;
}

void run_ragged(const RaggedProblem& problem, TopkKernel kernel, ThreadPool& pool,
                std::byte* const* worker_scratch) {
  ThreadPool serial(1);  // spawns no thread: a window's kernel runs inline in its row's task
  pool.parallel_for_worker(problem.dense.geometry.rows, [&](int worker, int64_t begin,
                                                            int64_t end) {
    std::byte* const scratch[1] = {worker_scratch[worker]};
    const ScratchView view{nullptr, scratch};
    for (int64_t row = begin; row < end; ++row) {
      const TopkProblem window = window_problem(problem, row, ragged_window(problem, row));
      const int64_t count = window.geometry.k;
      if (count > 0) kernel(window, window_plan(window), serial, view);
      if (problem.dense.index_dtype == MTK_INT64) {
        finish_row<int64_t>(problem, row, count);
      } else {
        finish_row<int32_t>(problem, row, count);
      }
    }
  });
}

}  // namespace mtk::cpu
