// ExecuTorch's Metal runtime, found in the process (executorch_metal.h). Manual retain/release;
// nothing here retains or releases: the runtime owns its buffers and command buffer, and
// metaltopk retains what it registers or encodes into. Unverified on Apple hardware.
//
// What this relies on, read in ExecuTorch v1.2.0's backends/apple/metal (not copied; the names
// below are its symbols, looked up by their Itanium-mangled names):
//  - runtime/shims/et_metal.h and .mm: `std::unordered_map<void*, id<MTLBuffer>>
//    executorch::backends::metal::ptr_to_mtl_buffer` maps the contents address of every buffer
//    the runtime allocates (metal_allocate_buffer, aoti_torch_mps_malloc: shared storage) and of
//    every view it makes (aoti_torch__reinterpret_tensor wraps the view's address in a no-copy
//    buffer) to that buffer; a tensor's data pointer is always such an address.
//  - `ETMetalStream* executorch::backends::metal::getCurrentMetalStream()`, and the stream's
//    non-virtual members `MPSCommandBuffer* commandBuffer()` (created on first use, committed by
//    the stream; the backend commits and waits after each execution, before copying outputs to
//    the host) and `void endKernelCoalescing()` (ends the open compute encoder). Its own
//    fallback ops (ops/op_mm.mm) call endKernelCoalescing, then encode into commandBuffer().
//  - CMakeLists.txt: the backend is compiled without ARC and linked into the runner with
//    -export_dynamic, so dlsym finds these symbols there.
// A non-virtual member function is called here as a function whose first argument is `this`,
// which is how the Itanium C++ ABI of arm64 and x86-64 macOS passes it.
#include "executorch_metal.h"

#import <Foundation/Foundation.h>
#if defined(__APPLE__)
#import <Metal/Metal.h>
#else
#import "metal_stubs.h"  // Linux syntax checks only (tests/metal/stubs)
#endif

#include <dlfcn.h>

#include <unordered_map>

namespace metaltopk_aoti {
namespace {

using BufferMap = std::unordered_map<void*, id<MTLBuffer>>;
using CurrentStream = void* (*)();
using StreamMember = void* (*)(void* stream);         // commandBuffer(): the MPSCommandBuffer*
using StreamVoidMember = void (*)(void* stream);      // endKernelCoalescing()

template <typename T>
T lookup(const char* mangled_name) {
  return reinterpret_cast<T>(dlsym(RTLD_DEFAULT, mangled_name));
}

struct Runtime {
  BufferMap* buffers = lookup<BufferMap*>("_ZN10executorch8backends5metal17ptr_to_mtl_bufferE");
  CurrentStream current_stream =
      lookup<CurrentStream>("_ZN10executorch8backends5metal21getCurrentMetalStreamEv");
  StreamMember command_buffer =
      lookup<StreamMember>("_ZN10executorch8backends5metal13ETMetalStream13commandBufferEv");
  StreamVoidMember end_kernel_coalescing = lookup<StreamVoidMember>(
      "_ZN10executorch8backends5metal13ETMetalStream19endKernelCoalescingEv");

  bool complete() const {
    return buffers != nullptr && current_stream != nullptr && command_buffer != nullptr &&
           end_kernel_coalescing != nullptr;
  }
  bool partial() const {
    return !complete() && (buffers != nullptr || current_stream != nullptr ||
                           command_buffer != nullptr || end_kernel_coalescing != nullptr);
  }
};

// Looked up once: the runtime is part of the runner, loaded before any model calls the shim.
const Runtime& runtime() {
  static const Runtime found;
  return found;
}

}  // namespace

void* executorch_metal_buffer(void* data) {
  const Runtime& et = runtime();
  if (!et.complete() || data == nullptr) return nullptr;
  const auto found = et.buffers->find(data);
  return found != et.buffers->end() ? (void*)found->second : nullptr;
}

void* executorch_metal_command_buffer(const char** error) {
  *error = nullptr;
  const Runtime& et = runtime();
  if (!et.complete()) {
    if (et.partial()) {
      *error = "ExecuTorch's Metal runtime is only partly present (ptr_to_mtl_buffer, "
               "getCurrentMetalStream, ETMetalStream::commandBuffer and endKernelCoalescing, "
               "as in v1.2.0): another release?";
    }
    return nullptr;
  }
  void* command_buffer = nullptr;
  @try {
    void* stream = et.current_stream();
    if (stream != nullptr) {
      et.end_kernel_coalescing(stream);
      command_buffer = et.command_buffer(stream);
    }
  } @catch (NSException*) {
    *error = "ExecuTorch's Metal stream raised an Objective-C exception while ending its encoder "
             "or making its command buffer";
    return nullptr;
  }
  if (command_buffer == nullptr) *error = "ExecuTorch's Metal stream gave no command buffer";
  return command_buffer;
}

}  // namespace metaltopk_aoti
