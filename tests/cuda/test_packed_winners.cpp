// Unit tests of PackedWinners (lib/cuda/topk_packed_winners.hpp), host C++ only: for rows of
// winners drawn from keys of every width (clustered, spread over all 32 bits, all equal) and
// row lengths from 1 to the CUDA backend's limit, packing keeps the composites' order, maps
// none to 0 or past end_bit, and unpacks to the composite itself.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <vector>

#include "cuda/topk_packed_winners.hpp"
#include "../host_expect.hpp"

namespace {

using mtk::cuda::PackedWinners;

uint64_t composite(uint32_t key, uint32_t index) { return (uint64_t(key) << 32) | ~index; }

// `count` distinct winners of a row of n: keys in [low, low + span], indices below n.
std::vector<uint64_t> draw_winners(std::mt19937_64& rng, int64_t n, uint32_t low, uint64_t span,
                                   int count) {
  std::set<uint64_t> winners;
  while (int(winners.size()) < count) {
    const uint32_t key = uint32_t(low + (span == 0 ? 0 : rng() % (span + 1)));
    const uint32_t index = uint32_t(rng() % uint64_t(n));
    winners.insert(composite(key, index));
  }
  return std::vector<uint64_t>(winners.begin(), winners.end());
}

void check_row(const std::vector<uint64_t>& winners, int64_t n) {
  uint32_t lowest = ~0u, highest = 0;
  for (uint64_t c : winners) {
    lowest = std::min(lowest, uint32_t(c >> 32));
    highest = std::max(highest, uint32_t(c >> 32));
  }
  const PackedWinners packing = PackedWinners::for_row(lowest, n);
  const uint32_t end_bit = packing.end_bit(highest);
  EXPECT(end_bit >= 1 && end_bit <= 64);
  std::vector<uint64_t> sorted = winners;
  std::sort(sorted.begin(), sorted.end());
  uint64_t previous = 0;
  for (uint64_t c : sorted) {
    const uint64_t packed = packing.pack(c);
    EXPECT(packed > previous);  // order kept, and above the padding's 0
    EXPECT(end_bit == 64 || packed >> end_bit == 0);
    EXPECT(packing.unpack(packed) == c);
    previous = packed;
  }
}

}  // namespace

int main() {
  std::mt19937_64 rng(20261204);
  const int64_t lengths[] = {1, 2, 3, 4095, 4096, 4097, 262144, 262145, int64_t(1) << 31,
                             int64_t(0xfffffffe)};
  struct Keys { uint32_t low; uint64_t span; };
  const Keys key_ranges[] = {
      {0x3f7c0000u, 1u << 18},   // uniform floats' top percent: clustered
      {0, 0xffffffffu},          // every key
      {0xffffff00u, 0xffu},      // at the top
      {0, 0},                    // one key: indices alone order the row
      {0x80u, 0x7fu},            // 8-bit keys
      {0x7f80u, 0x80u},          // 16-bit keys
  };
  for (int64_t n : lengths) {
    for (const Keys& keys : key_ranges) {
      for (int count : {1, 2, 100, 4096}) {
        if (double(count) > double(keys.span + 1) * double(n)) continue;  // not that many
        check_row(draw_winners(rng, n, keys.low, keys.span, count), n);
      }
    }
  }
  // The extremes: the first and last index, the lowest and highest key, together.
  const int64_t n = int64_t(0xfffffffe);
  check_row({composite(0, 0), composite(0xffffffffu, uint32_t(n - 1)), composite(0, uint32_t(n - 1)),
             composite(0xffffffffu, 0)},
            n);
  EXPECT(PackedWinners::for_row(0, 1).index_bits == 1);
  EXPECT(PackedWinners::for_row(0, 4096).index_bits == 13);
  EXPECT(PackedWinners::for_row(0, 4095).index_bits == 12);
  if (g_failures == 0) std::printf("packed winners: all checks passed\n");
  return g_failures == 0 ? 0 : 1;
}
