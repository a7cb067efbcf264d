// ExecuTorch's Metal runtime as the shim sees it (executorch_metal.mm; macOS only): the MTLBuffer
// behind a tensor's data pointer, and the command buffer of the runtime's stream. Both are found
// at first use in the process's symbols, so the shim also loads where that runtime is absent
// (libtorch, the tests): there they return NULL and the shim keeps metaltopk's own memory and
// queue. Unverified on Apple hardware: written from ExecuTorch v1.2.0's sources.
#pragma once

namespace metaltopk_aoti {

// The runtime's id<MTLBuffer> whose contents address is `data` (its tensors' data pointers are
// exactly such addresses, views included), or NULL where the runtime is absent or does not know
// `data`. Never throws.
void* executorch_metal_buffer(void* data);

// The id<MTLCommandBuffer> the runtime's current stream encodes into, with the stream's open
// compute encoder ended so that metaltopk may encode its own; the runtime commits it (and waits
// for it before it copies outputs to the host). NULL where the runtime is absent, or, with a
// static message in *error, where it is present but failed. Never throws.
void* executorch_metal_command_buffer(const char** error);

}  // namespace metaltopk_aoti
