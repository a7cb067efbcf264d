// The contract's ragged rows (docs/CONTRACT.md, "Ragged rows") computed the obvious way, for the
// reliability programs' oracles: each row's window clipped as rule 1 says, its positions stably
// sorted by the caller's order, the winners' window indices transformed in 64-bit two's
// complement (rule 5), -1 past the winners.
#ifndef METALTOPK_TESTS_RAGGED_MODEL_HPP
#define METALTOPK_TESTS_RAGGED_MODEL_HPP

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "metaltopk.h"

namespace ragged_model {

struct Window {
  int64_t start, length;
};

// Rule 1: a start below 0 counts as 0 and one past n as n; then a length below 0 as 0 and one
// past the row's end as the rest of the row.
inline Window window(int64_t n, int64_t length, int64_t start) {
  start = std::clamp<int64_t>(start, 0, n);
  return {start, std::clamp<int64_t>(length, 0, n - start)};
}

// The window's first min(k, length) indices (relative to its start) in the order `before`
// (positions of the row: before(p, q) when p ranks strictly above q), ties to the lower index.
template <typename Before>
std::vector<int64_t> winners(Window w, int64_t k, Before before) {
  std::vector<int64_t> order(static_cast<size_t>(w.length));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t p, int64_t q) { return before(w.start + p, w.start + q); });
  order.resize(static_cast<size_t>(std::min(k, w.length)));
  return order;
}

inline int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

inline int64_t wrapping_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

// MTK_INDEX_TRANSFORM_PAGE_TABLE of window index i, given the table entry of its page.
inline int64_t paged(int64_t page_entry, int64_t page_size, int64_t i) {
  return wrapping_add(wrapping_mul(page_entry, page_size), i % page_size);
}

// What an index of the given dtype holds for a transformed index (int32 keeps the low bits).
inline int64_t stored(int64_t index, mtk_dtype index_dtype) {
  return index_dtype == MTK_INT32 ? static_cast<int64_t>(static_cast<int32_t>(
                                        static_cast<uint32_t>(static_cast<uint64_t>(index))))
                                  : index;
}

}  // namespace ragged_model

#endif  // METALTOPK_TESTS_RAGGED_MODEL_HPP
