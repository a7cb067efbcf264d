// MetalMemoryMap (metal_memory_map.hpp): the address ranges of one Metal context.
#include "metal/metal_memory_map.hpp"

#include <iterator>
#include <utility>

#include "core/error.hpp"

namespace mtk {

MetalMemoryMap::Ranges::const_iterator MetalMemoryMap::containing(uintptr_t address) const {
  auto after = ranges_.upper_bound(address);
  if (after == ranges_.begin()) return ranges_.end();
  const auto candidate = std::prev(after);
  return address - candidate->first < candidate->second.bytes ? candidate : ranges_.end();
}

MetalMemoryMap::Ranges::iterator MetalMemoryMap::overlapping(uintptr_t start, size_t bytes) {
  // Ranges never overlap one another, so only the last one starting at or before `start` and
  // the first one starting after it can reach into [start, start + bytes).
  auto after = ranges_.upper_bound(start);
  if (after != ranges_.begin()) {
    const auto before = std::prev(after);
    if (start - before->first < before->second.bytes) return before;
  }
  if (after != ranges_.end() && after->first - start < bytes) return after;
  return ranges_.end();
}

void MetalMemoryMap::add_allocation(const void* contents, size_t bytes, BufferRef buffer) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(contents);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto stale = overlapping(start, bytes);
  if (stale != ranges_.end()) {
    const Range& range = stale->second;
    const void* range_start = reinterpret_cast<const void*>(stale->first);
    if (range.registrations == 0) {
      fail(MTK_ERROR_INTERNAL, "Metal allocated ", bytes, " bytes at ", contents,
           " inside memory it had allocated before (", range.bytes, " bytes at ", range_start, ")");
    }
    fail(MTK_ERROR_INVALID_ARGUMENT, "Metal allocated ", bytes, " bytes at ", contents,
         " inside the registered buffer ", range.buffer.get(), " (", range.bytes, " bytes at ",
         range_start, "): its owner released it before mtk_unregister_buffer");
  }
  ranges_.emplace(start, Range{std::move(buffer), bytes, 0});
}

MetalMemoryMap::BufferRef MetalMemoryMap::remove_allocation(const void* contents) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = ranges_.find(reinterpret_cast<uintptr_t>(contents));
  if (found == ranges_.end() || found->second.registrations > 0) return nullptr;
  BufferRef released = std::move(found->second.buffer);
  ranges_.erase(found);
  return released;
}

void MetalMemoryMap::register_buffer(const void* contents, size_t bytes, BufferRef buffer) {
  const uintptr_t start = reinterpret_cast<uintptr_t>(contents);
  if (contents == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", buffer.get(), " has no contents address");
  if (bytes == 0) fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", buffer.get(), " has length 0");
  if (bytes - 1 > UINTPTR_MAX - start) {  // the last byte may be the address space's last
    fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", buffer.get(), " (", bytes, " bytes at ", contents,
         ") runs past the end of the address space");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const auto known = overlapping(start, bytes);
  if (known == ranges_.end()) {
    ranges_.emplace(start, Range{std::move(buffer), bytes, 1});
    return;
  }
  const Range& range = known->second;
  if (known->first == start && range.bytes == bytes && range.registrations > 0 &&
      range.buffer.get() == buffer.get()) {
    ++known->second.registrations;
    return;
  }
  const void* range_start = reinterpret_cast<const void*>(known->first);
  if (range.registrations > 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", buffer.get(), " (", bytes, " bytes at ", contents,
         ") overlaps the registered buffer ", range.buffer.get(), " (", range.bytes, " bytes at ",
         range_start, ")");
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, "buffer = ", buffer.get(), " (", bytes, " bytes at ", contents,
       ") overlaps memory this Metal context allocated (", range.bytes, " bytes at ", range_start, ")");
}

MetalMemoryMap::BufferRef MetalMemoryMap::unregister_buffer(const void* contents) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(contents);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = ranges_.find(address);
  if (found != ranges_.end() && found->second.registrations > 0) {
    if (--found->second.registrations > 0) return nullptr;
    BufferRef released = std::move(found->second.buffer);
    ranges_.erase(found);
    return released;
  }
  const auto inside = containing(address);
  if (inside == ranges_.end()) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "data = ", contents,
         " is not the contents of a buffer registered with this Metal context");
  }
  const Range& range = inside->second;
  const void* range_start = reinterpret_cast<const void*>(inside->first);
  if (range.registrations == 0) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "data = ", contents, " is inside memory this Metal context allocated (",
         range.bytes, " bytes at ", range_start, "), not a registered buffer");
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, "data = ", contents, " is inside the registered buffer ", range.buffer.get(),
       " (", range.bytes, " bytes at ", range_start,
       ") but not at its start: pass the address mtk_register_buffer returned");
}

MetalMemoryMap::Slice MetalMemoryMap::resolve(const void* ptr, size_t bytes, const char* argument) const {
  const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = containing(address);
  if (found != ranges_.end()) {
    const size_t offset = address - found->first;
    if (bytes <= found->second.bytes - offset) return Slice{found->second.buffer, offset};
  }
  fail(MTK_ERROR_INVALID_ARGUMENT, argument, " = ", ptr, " (", bytes,
       " bytes) is not inside memory this Metal context allocated or registered");
}

}  // namespace mtk
