// adapters/aoti/executorch_metal.mm on Linux (GNUstep, tests/metal/stubs): this executable stands
// in for ExecuTorch's Metal runner. It defines the runtime's symbols with the declarations of
// ExecuTorch v1.2.0's backends/apple/metal/runtime/shims/et_metal.h and exports them (-rdynamic,
// as the runner links with -export_dynamic); the glue must find them by their mangled names, end
// the stream's encoder before taking its command buffer (the order of ExecuTorch's own ops), and
// map data pointers to buffers. What this cannot show: anything of Apple's runtime or GPU.
#import <Foundation/Foundation.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>

#import "metal_stubs.h"
#include "executorch_metal.h"

@class MPSCommandBuffer;

namespace executorch {
namespace backends {
namespace metal {

std::unordered_map<void*, id<MTLBuffer>> ptr_to_mtl_buffer;

class ETMetalStream {
 public:
  MPSCommandBuffer* commandBuffer();
  void endKernelCoalescing();

  std::string calls;  // 'e': endKernelCoalescing, 'c': commandBuffer
  bool raise = false;
};

ETMetalStream* getCurrentMetalStream();

}  // namespace metal
}  // namespace backends
}  // namespace executorch

namespace et = executorch::backends::metal;

namespace {

int failures = 0;
char command_buffer_storage;
et::ETMetalStream stream;
et::ETMetalStream* current_stream = &stream;

void expect(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "executorch_metal_test: FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

MPSCommandBuffer* et::ETMetalStream::commandBuffer() {
  calls += 'c';
  return (MPSCommandBuffer*)(void*)&command_buffer_storage;
}

void et::ETMetalStream::endKernelCoalescing() {
  calls += 'e';
  if (raise) [NSException raise:@"MTLEncoderState" format:@"stand-in failure"];
}

et::ETMetalStream* et::getCurrentMetalStream() { return current_stream; }

int main() {
  @autoreleasepool {
    char tensor[64], view[16], unknown;
    id<MTLBuffer> tensor_buffer = (id<MTLBuffer>)(void*)&tensor[1];
    id<MTLBuffer> view_buffer = (id<MTLBuffer>)(void*)&view[1];
    et::ptr_to_mtl_buffer[tensor] = tensor_buffer;
    et::ptr_to_mtl_buffer[view] = view_buffer;

    expect(metaltopk_aoti::executorch_metal_buffer(tensor) == (void*)tensor_buffer,
           "a tensor's data pointer maps to its buffer");
    expect(metaltopk_aoti::executorch_metal_buffer(view) == (void*)view_buffer,
           "a view's data pointer maps to its own buffer");
    expect(metaltopk_aoti::executorch_metal_buffer(&unknown) == nullptr,
           "memory the runtime does not know maps to NULL");
    expect(metaltopk_aoti::executorch_metal_buffer(tensor + 1) == nullptr,
           "an interior pointer is not a data pointer the runtime made");
    expect(metaltopk_aoti::executorch_metal_buffer(nullptr) == nullptr, "NULL maps to NULL");

    const char* error = "unset";
    void* command_buffer = metaltopk_aoti::executorch_metal_command_buffer(&error);
    expect(error == nullptr, "the stream's command buffer comes without an error");
    expect(command_buffer == &command_buffer_storage, "it is the stream's command buffer");
    expect(stream.calls == "ec", "the encoder is ended before the command buffer is taken");

    stream.calls.clear();
    stream.raise = true;
    command_buffer = metaltopk_aoti::executorch_metal_command_buffer(&error);
    expect(command_buffer == nullptr, "a raising stream gives no command buffer");
    expect(error != nullptr && std::strstr(error, "Objective-C exception") != nullptr,
           "an Objective-C exception becomes a message, not an unwind");
    expect(stream.calls == "e", "nothing is taken after the stream raised");

    current_stream = nullptr;
    command_buffer = metaltopk_aoti::executorch_metal_command_buffer(&error);
    expect(command_buffer == nullptr && error != nullptr &&
               std::strstr(error, "no command buffer") != nullptr,
           "a runtime without a current stream is an error, not the context's own queue");
  }
  if (failures != 0) return 1;
  std::printf("executorch_metal_test: the glue finds ExecuTorch's Metal runtime (stand-in) and "
              "follows its stream's order\n");
  return 0;
}
