// A row's winners packed into the few bits in which they differ, for a radix sort that passes
// over those bits alone (radix_sort_rows_kernel). Host and device C++, unit-tested on the host.
#pragma once

#include <cstdint>

#include "core/float_formats.hpp"

namespace mtk {
namespace cuda {

// A 64-bit composite is (key << 32) | ~index. Among a row's winners the key spans
// [lowest, highest], and the index stays below the row's length n, so ~index has all its bits
// from bit_width(n) up set. Packed, a winner is (key - lowest) << index_bits | (~index & mask):
// order-preserving, unique, above 0 (n <= mask keeps ~index & mask >= 1, so 0 is free for
// padding), and end_bit() bits wide, at most 64.
struct PackedWinners {
  uint32_t lowest_key;
  uint32_t index_bits;  // bit_width(n): 1 to 32

  static MTK_HOST_DEVICE uint32_t bit_width(uint64_t v) {
    uint32_t bits = 0;
    while (v != 0) {
      ++bits;
      v >>= 1;
    }
    return bits;
  }

  static MTK_HOST_DEVICE PackedWinners for_row(uint32_t lowest_key, int64_t n) {
    return PackedWinners{lowest_key, bit_width(uint64_t(n))};
  }

  // Bits [0, end_bit) hold every packed winner of keys up to highest_key.
  MTK_HOST_DEVICE uint32_t end_bit(uint32_t highest_key) const {
    return bit_width(uint64_t(highest_key - lowest_key)) + index_bits;
  }

  MTK_HOST_DEVICE uint64_t index_mask() const {
    return index_bits >= 32 ? uint64_t(0xffffffffu) : (uint64_t(1) << index_bits) - 1;
  }

  MTK_HOST_DEVICE uint64_t pack(uint64_t composite) const {
    const uint64_t key = composite >> 32;
    return ((key - lowest_key) << index_bits) | (composite & index_mask());
  }

  MTK_HOST_DEVICE uint64_t unpack(uint64_t packed) const {
    const uint64_t key = (packed >> index_bits) + lowest_key;
    return (key << 32) | (uint64_t(0xffffffffu) & ~index_mask()) | (packed & index_mask());
  }
};

}  // namespace cuda
}  // namespace mtk
