// Unit tests of the Metal memory map (lib/metal/metal_memory_map): the bookkeeping behind
// mtk_malloc, mtk_free, mtk_register_buffer, mtk_unregister_buffer and every pointer lookup of
// the Metal and MPSGraph backends. Buffers are stand-ins that count the holds the map keeps on
// them, as the glue's retains and releases would; addresses are inside a local array.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "metal/metal_memory_map.hpp"

namespace {

using mtk::MetalMemoryMap;

int g_checks = 0, g_failures = 0;

#define EXPECT(cond)                                              \
  do {                                                            \
    ++g_checks;                                                   \
    if (!(cond)) {                                                \
      ++g_failures;                                               \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
    }                                                             \
  } while (0)

// A native buffer: `holds` counts the references handed out by hold() that are still alive.
struct FakeBuffer {
  int holds = 0;
};

// What the glue's hold() does with a real buffer: one retain now, one release with the last copy.
MetalMemoryMap::BufferRef hold(FakeBuffer& buffer) {
  ++buffer.holds;
  return MetalMemoryMap::BufferRef(&buffer, [](void* object) { --static_cast<FakeBuffer*>(object)->holds; });
}

template <class... Parts>
std::string text(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Checks that `call` throws `status` with exactly `message`.
void expect_error(int line, const std::function<void()>& call, mtk_status status, const std::string& message) {
  ++g_checks;
  try {
    call();
    ++g_failures;
    std::printf("FAIL %s:%d: no error, expected \"%s\"\n", __FILE__, line, message.c_str());
  } catch (const mtk::Error& e) {
    if (e.status() != status || message != e.what()) {
      ++g_failures;
      std::printf("FAIL %s:%d: status %d \"%s\"\n  expected %d \"%s\"\n", __FILE__, line, e.status(), e.what(),
                  status, message.c_str());
    }
  }
}
#define EXPECT_ERROR(call, status, message) expect_error(__LINE__, [&] { call; }, status, message)

alignas(64) unsigned char arena[8192];
unsigned char* at(size_t offset) { return arena + offset; }

// Whether [ptr, ptr + bytes) resolves to `buffer` at `offset`.
bool resolves(const MetalMemoryMap& map, const void* ptr, size_t bytes, const FakeBuffer& buffer, size_t offset) {
  try {
    const MetalMemoryMap::Slice slice = map.resolve(ptr, bytes, "input");
    return slice.buffer.get() == &buffer && slice.offset == offset;
  } catch (const mtk::Error&) {
    return false;
  }
}

std::string not_inside(const void* ptr, size_t bytes) {
  return text("input = ", ptr, " (", bytes, " bytes) is not inside memory this Metal context allocated or registered");
}

void test_allocations_resolve_at_every_byte_and_no_further() {
  FakeBuffer a;
  MetalMemoryMap map;
  map.add_allocation(at(0), 256, hold(a));
  EXPECT(a.holds == 1);
  EXPECT(resolves(map, at(0), 256, a, 0));    // first byte, whole range
  EXPECT(resolves(map, at(255), 1, a, 255));  // last byte
  EXPECT(resolves(map, at(100), 156, a, 100));
  EXPECT_ERROR(map.resolve(at(256), 1, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(256), 1));  // one past the end
  EXPECT_ERROR(map.resolve(at(256), 0, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(256), 0));
  EXPECT_ERROR(map.resolve(at(255), 2, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(255), 2));
  EXPECT_ERROR(map.resolve(at(0), 257, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(0), 257));
  EXPECT_ERROR(map.resolve(at(4096), 1, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(4096), 1));

  // Only an allocation's start frees it; the map hands the buffer back for the caller to release.
  EXPECT(map.remove_allocation(at(1)) == nullptr);
  EXPECT(map.remove_allocation(at(4096)) == nullptr);
  EXPECT(resolves(map, at(0), 1, a, 0));
  {
    MetalMemoryMap::BufferRef released = map.remove_allocation(at(0));
    EXPECT(released.get() == &a && a.holds == 1);
  }
  EXPECT(a.holds == 0);
  EXPECT_ERROR(map.resolve(at(0), 1, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(0), 1));
  EXPECT(map.remove_allocation(at(0)) == nullptr);
}

void test_registrations_are_counted() {
  FakeBuffer b;
  MetalMemoryMap map;
  for (int i = 0; i < 3; ++i) map.register_buffer(at(1024), 512, hold(b));
  EXPECT(b.holds == 1);  // the repeated holds were given back at once
  EXPECT(resolves(map, at(1024), 512, b, 0));
  EXPECT(resolves(map, at(1535), 1, b, 511));
  EXPECT_ERROR(map.resolve(at(1536), 1, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(1536), 1));
  EXPECT_ERROR(map.resolve(at(1023), 1, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(1023), 1));

  EXPECT(map.unregister_buffer(at(1024)) == nullptr);
  EXPECT(map.unregister_buffer(at(1024)) == nullptr);
  EXPECT(b.holds == 1 && resolves(map, at(1535), 1, b, 511));  // one registration still open
  {
    MetalMemoryMap::BufferRef released = map.unregister_buffer(at(1024));
    EXPECT(released.get() == &b);
  }
  EXPECT(b.holds == 0);
  EXPECT_ERROR(map.resolve(at(1024), 1, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(1024), 1));
  EXPECT_ERROR(map.unregister_buffer(at(1024)), MTK_ERROR_INVALID_ARGUMENT,
               text("data = ", static_cast<const void*>(at(1024)),
                    " is not the contents of a buffer registered with this Metal context"));

  // Once ended, the same buffer registers afresh.
  map.register_buffer(at(1024), 512, hold(b));
  EXPECT(b.holds == 1 && resolves(map, at(1100), 4, b, 76));
  EXPECT(map.unregister_buffer(at(1024)).get() == &b);
  EXPECT(b.holds == 0);
}

void test_overlaps_are_refused() {
  FakeBuffer a, b, c, d;  // outlive the map, which may hold them until it goes
  MetalMemoryMap map;
  map.add_allocation(at(0), 256, hold(a));
  map.register_buffer(at(1024), 512, hold(b));
  const auto overlaps_allocation = [&](size_t start, size_t bytes) {
    return text("buffer = ", static_cast<void*>(&c), " (", bytes, " bytes at ", static_cast<const void*>(at(start)),
                ") overlaps memory this Metal context allocated (256 bytes at ", static_cast<const void*>(at(0)), ")");
  };
  const auto overlaps_registered = [&](const void* handle, size_t start, size_t bytes) {
    return text("buffer = ", handle, " (", bytes, " bytes at ", static_cast<const void*>(at(start)),
                ") overlaps the registered buffer ", static_cast<void*>(&b), " (512 bytes at ",
                static_cast<const void*>(at(1024)), ")");
  };
  EXPECT_ERROR(map.register_buffer(at(200), 100, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_allocation(200, 100));
  EXPECT_ERROR(map.register_buffer(at(0), 256, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_allocation(0, 256));
  EXPECT_ERROR(map.register_buffer(at(255), 1, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_allocation(255, 1));
  // Ending inside, starting inside, inside, enclosing, and the same range under another handle.
  EXPECT_ERROR(map.register_buffer(at(900), 125, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&c, 900, 125));
  EXPECT_ERROR(map.register_buffer(at(1535), 64, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&c, 1535, 64));
  EXPECT_ERROR(map.register_buffer(at(1100), 100, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&c, 1100, 100));
  EXPECT_ERROR(map.register_buffer(at(1000), 1000, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&c, 1000, 1000));
  EXPECT_ERROR(map.register_buffer(at(1024), 512, hold(c)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&c, 1024, 512));
  // The registered buffer itself at another address or length is not the same registration.
  EXPECT_ERROR(map.register_buffer(at(1100), 100, hold(b)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&b, 1100, 100));
  EXPECT_ERROR(map.register_buffer(at(1024), 513, hold(b)), MTK_ERROR_INVALID_ARGUMENT, overlaps_registered(&b, 1024, 513));
  // Memory the context allocated cannot be registered as well.
  EXPECT_ERROR(map.register_buffer(at(0), 256, hold(a)), MTK_ERROR_INVALID_ARGUMENT,
               text("buffer = ", static_cast<void*>(&a), " (256 bytes at ", static_cast<const void*>(at(0)),
                    ") overlaps memory this Metal context allocated (256 bytes at ", static_cast<const void*>(at(0)), ")"));
  // Refusals keep no hold and change nothing.
  EXPECT(a.holds == 1 && b.holds == 1 && c.holds == 0);
  EXPECT(resolves(map, at(255), 1, a, 255) && resolves(map, at(1024), 512, b, 0));
  EXPECT(map.unregister_buffer(at(1024)).get() == &b);  // b had one registration, no more

  // Ranges that touch without sharing a byte are fine, on either side.
  map.register_buffer(at(1024), 512, hold(b));
  map.register_buffer(at(256), 768, hold(c));
  map.register_buffer(at(1536), 64, hold(d));
  EXPECT(resolves(map, at(256), 1, c, 0) && resolves(map, at(1023), 1, c, 767));
  EXPECT(resolves(map, at(1536), 64, d, 0) && resolves(map, at(1535), 1, b, 511));
  EXPECT_ERROR(map.resolve(at(1000), 100, "input"), MTK_ERROR_INVALID_ARGUMENT, not_inside(at(1000), 100));  // spans two buffers
  map.unregister_buffer(at(256));
  map.unregister_buffer(at(1024));
  map.unregister_buffer(at(1536));
  EXPECT(b.holds == 0 && c.holds == 0 && d.holds == 0);
}

void test_unregister_errors() {
  FakeBuffer a, b;
  MetalMemoryMap map;
  map.add_allocation(at(0), 256, hold(a));
  map.register_buffer(at(1024), 512, hold(b));
  const void* start = at(1024);
  EXPECT_ERROR(map.unregister_buffer(at(4096)), MTK_ERROR_INVALID_ARGUMENT,
               text("data = ", static_cast<const void*>(at(4096)),
                    " is not the contents of a buffer registered with this Metal context"));
  EXPECT_ERROR(map.unregister_buffer(at(1536)), MTK_ERROR_INVALID_ARGUMENT,  // one past the end
               text("data = ", static_cast<const void*>(at(1536)),
                    " is not the contents of a buffer registered with this Metal context"));
  EXPECT_ERROR(map.unregister_buffer(nullptr), MTK_ERROR_INVALID_ARGUMENT,
               text("data = ", static_cast<const void*>(nullptr),
                    " is not the contents of a buffer registered with this Metal context"));
  for (size_t offset : {size_t{0}, size_t{10}}) {
    EXPECT_ERROR(map.unregister_buffer(at(offset)), MTK_ERROR_INVALID_ARGUMENT,
                 text("data = ", static_cast<const void*>(at(offset)), " is inside memory this Metal context allocated (256 bytes at ",
                      static_cast<const void*>(at(0)), "), not a registered buffer"));
  }
  for (size_t offset : {size_t{1025}, size_t{1535}}) {
    EXPECT_ERROR(map.unregister_buffer(at(offset)), MTK_ERROR_INVALID_ARGUMENT,
                 text("data = ", static_cast<const void*>(at(offset)), " is inside the registered buffer ",
                      static_cast<void*>(&b), " (512 bytes at ", start,
                      ") but not at its start: pass the address mtk_register_buffer returned"));
  }
  // None of them ended a registration or freed the allocation.
  EXPECT(a.holds == 1 && b.holds == 1 && resolves(map, at(0), 256, a, 0) && resolves(map, at(1024), 512, b, 0));
  // A registration is not an allocation: remove_allocation leaves it alone.
  EXPECT(map.remove_allocation(at(1024)) == nullptr && resolves(map, at(1024), 1, b, 0));
  EXPECT(map.unregister_buffer(at(1024)).get() == &b);
}

void test_register_arguments() {
  FakeBuffer b;
  MetalMemoryMap map;
  const void* handle = &b;
  EXPECT_ERROR(map.register_buffer(nullptr, 64, hold(b)), MTK_ERROR_INVALID_ARGUMENT,
               text("buffer = ", handle, " has no contents address"));
  EXPECT_ERROR(map.register_buffer(at(0), 0, hold(b)), MTK_ERROR_INVALID_ARGUMENT,
               text("buffer = ", handle, " has length 0"));
  const void* near_end = reinterpret_cast<const void*>(UINTPTR_MAX - 15);
  EXPECT_ERROR(map.register_buffer(near_end, 17, hold(b)), MTK_ERROR_INVALID_ARGUMENT,
               text("buffer = ", handle, " (17 bytes at ", near_end, ") runs past the end of the address space"));
  EXPECT(b.holds == 0);
  // The last byte of the address space can be registered, and resolves.
  map.register_buffer(near_end, 16, hold(b));
  EXPECT(resolves(map, reinterpret_cast<const void*>(UINTPTR_MAX), 1, b, 15));
  EXPECT(map.unregister_buffer(near_end).get() == &b);
  EXPECT(b.holds == 0);
}

void test_allocation_inside_a_known_range() {
  FakeBuffer a, b, fresh;
  MetalMemoryMap map;
  map.add_allocation(at(0), 256, hold(a));
  map.register_buffer(at(1024), 512, hold(b));
  EXPECT_ERROR(map.add_allocation(at(1280), 64, hold(fresh)), MTK_ERROR_INVALID_ARGUMENT,
               text("Metal allocated 64 bytes at ", static_cast<const void*>(at(1280)), " inside the registered buffer ",
                    static_cast<void*>(&b), " (512 bytes at ", static_cast<const void*>(at(1024)),
                    "): its owner released it before mtk_unregister_buffer"));
  EXPECT_ERROR(map.add_allocation(at(128), 256, hold(fresh)), MTK_ERROR_INTERNAL,
               text("Metal allocated 256 bytes at ", static_cast<const void*>(at(128)),
                    " inside memory it had allocated before (256 bytes at ", static_cast<const void*>(at(0)), ")"));
  EXPECT(fresh.holds == 0 && a.holds == 1 && b.holds == 1);
  EXPECT(resolves(map, at(1280), 64, b, 256));
}

// Threads nest and end registrations of one buffer while others resolve pointers into it and
// into an allocation: counts and holds must come out even.
void test_concurrent_registrations() {
  FakeBuffer a, b;
  MetalMemoryMap map;
  map.add_allocation(at(0), 256, hold(a));
  map.register_buffer(at(1024), 512, hold(b));  // stays open throughout
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if (t % 2 == 0) {
          // Nested under the open registration, so no unregister may end it. These holds leave
          // the (non-atomic) counter alone.
          map.register_buffer(at(1024), 512, MetalMemoryMap::BufferRef(&b, [](void*) {}));
          if (map.unregister_buffer(at(1024)) != nullptr) ++wrong[t];
        } else {
          if (!resolves(map, at(1024 + static_cast<size_t>(i) % 512), 1, b, static_cast<size_t>(i) % 512)) ++wrong[t];
          if (!resolves(map, at(static_cast<size_t>(i) % 256), 1, a, static_cast<size_t>(i) % 256)) ++wrong[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT(wrong[t] == 0);
  EXPECT(map.unregister_buffer(at(1024)).get() == &b);
  EXPECT(b.holds == 0);
  EXPECT_ERROR(map.unregister_buffer(at(1024)), MTK_ERROR_INVALID_ARGUMENT,
               text("data = ", static_cast<const void*>(at(1024)),
                    " is not the contents of a buffer registered with this Metal context"));
}

}  // namespace

int main() {
  test_allocations_resolve_at_every_byte_and_no_further();
  test_registrations_are_counted();
  test_overlaps_are_refused();
  test_unregister_errors();
  test_register_arguments();
  test_allocation_inside_a_known_range();
  test_concurrent_registrations();
  std::printf("test_memory_map: %d checks, %d failures\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
