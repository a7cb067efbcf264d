// The state of one Metal context, shared by the Metal and MPSGraph backends: device and queue,
// the memory map, the embedded kernel library, the pipeline cache and the command buffers.
// Included only by .mm files.
#pragma once

#import <Foundation/Foundation.h>
#if defined(__APPLE__)
#import <Metal/Metal.h>
#else
#import "metal_stubs.h"  // Linux syntax checks only (tests/metal/stubs)
#endif

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/cache.hpp"
#include "metal/metal_memory_map.hpp"
#include "metal/metal_plan_common.hpp"
#include "metal/objc_ref.h"

namespace mtk {
namespace metal {

// A device pointer resolved to its MTLBuffer and the byte offset inside it.
struct BufferSlice {
  ObjcRef<id<MTLBuffer>> buffer;
  size_t offset = 0;
};

// The state of one Metal context. Thread-safe: the last command buffer and the library are
// locked; the memory map and the pipeline cache lock themselves.
class MetalDevice {
 public:
  explicit MetalDevice(int device_index);

  id<MTLDevice> device() const { return device_.get(); }
  id<MTLCommandQueue> queue() const { return queue_.get(); }

  // Shared-storage buffers whose contents address is the device pointer.
  void* allocate(size_t bytes);
  void deallocate(void* ptr) noexcept;
  // Another runtime's shared buffer made resolvable (mtk_register_buffer); the memory map counts
  // nested registrations. Both throw MTK_ERROR_INVALID_ARGUMENT with the reason.
  void* register_buffer(void* native_buffer);
  void unregister_buffer(void* data);
  // The buffer holding [ptr, ptr + bytes); interior pointers are fine. Throws
  // MTK_ERROR_INVALID_ARGUMENT naming `argument` for memory this context did not allocate.
  BufferSlice resolve(const void* ptr, size_t bytes, const char* argument) const;
  // The same for a strided tensor: checks its whole extent, returns element 0's offset.
  BufferSlice resolve_tensor(const void* element0, const ByteExtent& extent, const char* argument) const;

  // The caller's command buffer when `stream` is one (nil for NULL); throws for anything else.
  static id<MTLCommandBuffer> caller_command_buffer(void* stream);
  // Where to encode for `stream`: the caller's command buffer, or a new one on the queue.
  ObjcRef<id<MTLCommandBuffer>> command_buffer(void* stream);
  // Commits a command buffer of the context's own queue (not the caller's) without waiting,
  // and remembers it as the one synchronize waits for.
  void submit(const ObjcRef<id<MTLCommandBuffer>>& command_buffer, void* stream);
  void remember_committed(const ObjcRef<id<MTLCommandBuffer>>& command_buffer);
  void synchronize(void* stream);
  void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind kind, void* stream);

  // Per-call scratch: the command buffer that uses it keeps it alive until it completes.
  ObjcRef<id<MTLBuffer>> new_scratch(size_t bytes);

  // Pipelines by function name ("<kernel>_<dtype>"), compiled from the embedded source on
  // first use with safe math.
  ObjcRef<id<MTLComputePipelineState>> pipeline(const std::string& function);
  CacheCounters pipeline_counters() const { return pipelines_.counters(); }

  // Limits the plan must respect for `dtype`: the threadgroup size every one of its pipelines
  // allows (creating them on first use).
  MetalLimits limits(mtk_dtype dtype);

 private:
  id<MTLLibrary> library();
  static void wait_and_check(id<MTLCommandBuffer> command_buffer);

  ObjcRef<id<MTLDevice>> device_;
  ObjcRef<id<MTLCommandQueue>> queue_;
  MetalMemoryMap memory_;
  std::mutex submit_mutex_;
  ObjcRef<id<MTLCommandBuffer>> last_committed_;
  std::mutex library_mutex_;
  ObjcRef<id<MTLLibrary>> library_;
  LruCache<std::string, ObjcRef<id<MTLComputePipelineState>>> pipelines_{256};
  std::mutex limits_mutex_;
  std::map<mtk_dtype, MetalLimits> limits_;
};

}  // namespace metal
}  // namespace mtk
