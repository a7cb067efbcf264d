// The memory map of one Metal context: which address ranges are device pointers, the buffer
// behind each, and how many registrations of another runtime's buffer (mtk_register_buffer) are
// open. Portable C++ so that its rules run on Linux (tests/metal/test_memory_map.cpp); the
// Objective-C++ glue (lib/metal/metal_device.mm) only supplies the buffers and their addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace mtk {

// Thread-safe. Ranges are [contents, contents + bytes) and never overlap one another.
class MetalMemoryMap {
 public:
  // Keeps one native buffer (an id<MTLBuffer>) alive while the map holds it. get() is the
  // handle, which tells buffers apart; the glue's deleter releases it with the last copy.
  using BufferRef = std::shared_ptr<void>;

  struct Slice {
    BufferRef buffer;
    size_t offset = 0;  // of the resolved pointer from the buffer's contents
  };

  // Memory this context has just allocated. Throws MTK_ERROR_INVALID_ARGUMENT when the range
  // overlaps a registered buffer (its owner released it before mtk_unregister_buffer, so the
  // device reused its memory), MTK_ERROR_INTERNAL when it overlaps an allocation.
  void add_allocation(const void* contents, size_t bytes, BufferRef buffer);
  // Forgets the allocation at `contents` and hands its buffer back, so that the release happens
  // outside the map's lock; null for an address that is not an allocation's start (a registered
  // buffer stays registered).
  BufferRef remove_allocation(const void* contents) noexcept;

  // Another runtime's buffer. Registering the buffer that is already registered at `contents`
  // nests (one more unregister ends it); any other overlap with a known range, an empty range and
  // one that wraps the address space throw MTK_ERROR_INVALID_ARGUMENT.
  void register_buffer(const void* contents, size_t bytes, BufferRef buffer);
  // Ends one registration of the buffer whose contents start at `contents`. Hands the buffer back
  // when that was the last one (null while registrations stay open). Throws
  // MTK_ERROR_INVALID_ARGUMENT, saying why, for any other address.
  BufferRef unregister_buffer(const void* contents);

  // The buffer that holds all of [ptr, ptr + bytes), and ptr's offset in it: interior pointers
  // resolve. Throws MTK_ERROR_INVALID_ARGUMENT naming `argument` when no buffer does.
  Slice resolve(const void* ptr, size_t bytes, const char* argument) const;

 private:
  struct Range {
    BufferRef buffer;
    size_t bytes;
    size_t registrations;  // 0: allocated by this context; else another runtime's buffer
  };
  using Ranges = std::map<uintptr_t, Range>;  // by start address

  // The range containing `address`, or end().
  Ranges::const_iterator containing(uintptr_t address) const;
  // The first range that overlaps [start, start + bytes), or end().
  Ranges::iterator overlapping(uintptr_t start, size_t bytes);

  mutable std::mutex mutex_;
  Ranges ranges_;
};

}  // namespace mtk
