// Shim (bench/peers) for FlashInfer's csrc/tvm_ffi_utils.h: the kernel sources the harness
// compiles name tvm::ffi::Optional in a using-declaration and use nothing else of it.
#pragma once
namespace tvm::ffi {
template <class T>
class Optional {};
}  // namespace tvm::ffi
