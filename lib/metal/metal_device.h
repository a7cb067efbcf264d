// Objective-C++ pieces shared by the Metal and MPSGraph backends: object ownership under manual
// retain/release, Objective-C exceptions turned into mtk::Error, and the per-context device
// state (queue, memory map, embedded kernel library, pipeline cache, command buffers).
// Included only by .mm files. Built with manual retain/release on every platform (Debian's
// GNUstep runtime has no ARC), so every +1 reference is held by exactly one ObjcRef.
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
#include <utility>

#include "core/backend.hpp"
#include "core/cache.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "metal/metal_plan.hpp"

namespace mtk {
namespace metal {

// One strong reference to an Objective-C object; copies retain, destruction releases.
template <class T>
class ObjcRef {
 public:
  ObjcRef() = default;
  // Takes over a +1 reference (from alloc/new/copy or a NS_RETURNS_RETAINED function).
  static ObjcRef adopt(T object) {
    ObjcRef ref;
    ref.object_ = object;
    return ref;
  }
  // Adds a reference to an object owned elsewhere (for example an autoreleased one).
  static ObjcRef retain(T object) { return adopt(object ? (T)[object retain] : object); }

  ObjcRef(const ObjcRef& other) : object_(other.object_ ? (T)[other.object_ retain] : other.object_) {}
  ObjcRef(ObjcRef&& other) noexcept : object_(other.object_) { other.object_ = nil; }
  ObjcRef& operator=(ObjcRef other) noexcept {
    std::swap(object_, other.object_);
    return *this;
  }
  ~ObjcRef() {
    if (object_) [object_ release];
  }

  T get() const { return object_; }
  explicit operator bool() const { return object_ != nil; }

 private:
  T object_ = nil;
};

// Runs `body` (which may throw mtk::Error) inside an autorelease pool, and turns an Objective-C
// exception into MTK_ERROR_DEVICE. The mtk::Error is thrown after the @try block has been left,
// so no C++ exception is raised from inside an @catch handler.
template <class Body>
void objc_call(const char* what, Body&& body) {
  std::string objc_failure;
  @try {
    @autoreleasepool {
      body();
    }
  } @catch (NSException* exception) {
    NSString* reason = [exception reason];
    objc_failure = reason ? [reason UTF8String] : "unknown Objective-C exception";
  }
  if (!objc_failure.empty()) fail(MTK_ERROR_DEVICE, what, ": ", objc_failure);
}

// The text of an NSError, or a fallback when there is none.
std::string describe(NSError* error);

// A device pointer resolved to its MTLBuffer and the byte offset inside it.
struct BufferSlice {
  ObjcRef<id<MTLBuffer>> buffer;
  size_t offset = 0;
};

// The state of one Metal context. Thread-safe: the memory map, the last command buffer and the
// library are locked; the pipeline cache locks itself.
class MetalDevice {
 public:
  explicit MetalDevice(int device_index);

  id<MTLDevice> device() const { return device_.get(); }
  id<MTLCommandQueue> queue() const { return queue_.get(); }

  // Shared-storage buffers whose contents address is the device pointer.
  void* allocate(size_t bytes);
  void deallocate(void* ptr) noexcept;
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

  struct Allocation {
    ObjcRef<id<MTLBuffer>> buffer;
    size_t bytes;
  };

  ObjcRef<id<MTLDevice>> device_;
  ObjcRef<id<MTLCommandQueue>> queue_;
  mutable std::mutex memory_mutex_;
  std::map<uintptr_t, Allocation> allocations_;  // by contents address
  std::mutex submit_mutex_;
  ObjcRef<id<MTLCommandBuffer>> last_committed_;
  std::mutex library_mutex_;
  ObjcRef<id<MTLLibrary>> library_;
  LruCache<std::string, ObjcRef<id<MTLComputePipelineState>>> pipelines_{256};
  std::mutex limits_mutex_;
  std::map<mtk_dtype, MetalLimits> limits_;
};

// The Metal kernels' plan of a problem: the plan of both backends (the MPSGraph backend routes
// some problems to the kernels, and only those need scratch).
struct MetalPlannedTopk final : PlannedTopk {
  MetalPlan plan;
};

// The Metal backend's top-k, shared with the MPSGraph backend for the problems it routes.
void encode_metal_topk(MetalDevice& device, const MetalPlan& plan, const TopkProblem& problem,
                       Workspace workspace, void* stream);

// The Metal backend's MoE router (one kernel), which the MPSGraph backend also runs.
void encode_metal_moe_route(MetalDevice& device, const RouterProblem& problem, void* stream);

// What the Metal and MPSGraph backends share: one MetalDevice behind memory, copies, the
// workspace of the Metal kernels and the router. Each backend adds its kind, top-k and counters.
class MetalDeviceBackend : public Backend {
 public:
  explicit MetalDeviceBackend(int device_index) : device_(device_index) {}

  bool supports_dtype(mtk_dtype dtype) const override {
    return dtype != MTK_FLOAT64 && dtype_info(dtype) != nullptr;
  }
  void* allocate(size_t bytes) override { return device_.allocate(bytes); }
  void deallocate(void* ptr) noexcept override { device_.deallocate(ptr); }
  void copy(void* dst, const void* src, size_t bytes, mtk_copy_kind kind, void* stream) override {
    device_.copy(dst, src, bytes, kind, stream);
  }
  void synchronize(void* stream) override { device_.synchronize(stream); }
  std::shared_ptr<const PlannedTopk> plan_topk(const TopkProblem& problem) override {
    auto planned = std::make_shared<MetalPlannedTopk>();
    planned->plan = make_metal_plan(problem, device_.limits(problem.dtype));
    planned->workspace_bytes = planned->plan.workspace_bytes;
    return planned;
  }
  // MPSGraph has no fused router (and its top-k's tie order is undocumented): both backends
  // run the Metal kernel, on this context's device and queue.
  void moe_route(const RouterProblem& problem, void* stream) override {
    encode_metal_moe_route(device_, problem, stream);
  }
  // Scratch is allocated per call and owned by the command buffer that uses it.
  size_t scratch_bytes() const override { return 0; }
  void set_num_threads(int) override {
    fail(MTK_ERROR_INVALID_ARGUMENT, "num_threads applies to CPU contexts only; the ",
         mtk_backend_name(kind()), " backend has no worker threads");
  }

 protected:
  MetalDevice device_;
};

}  // namespace metal

// Whether a Metal device is present: both Metal backends register with it.
bool metal_backend_available();

}  // namespace mtk
