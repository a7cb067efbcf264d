// A context owns one backend instance and every device allocation it made for the caller.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "backend.hpp"
#include "metaltopk.h"

namespace mtk {

class Context {
 public:
  Context(std::unique_ptr<Backend> backend, int device_index);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Backend& backend() { return *backend_; }
  int device_index() const { return device_index_; }

  // Caller-visible device memory, tracked so mtk_free can reject foreign pointers and the
  // context can release what the caller forgot.
  void* allocate(size_t bytes);
  void deallocate(void* ptr);
  size_t live_allocations() const;

 private:
  std::unique_ptr<Backend> backend_;
  int device_index_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, size_t> allocations_;
};

// Device memory owned until release(): frees itself if a later step of the call fails.
class OwnedAllocation {
 public:
  OwnedAllocation(Context& context, size_t bytes)
      : context_(context), ptr_(bytes > 0 ? context.allocate(bytes) : nullptr) {}
  ~OwnedAllocation() {
    if (ptr_ != nullptr) context_.deallocate(ptr_);
  }
  OwnedAllocation(const OwnedAllocation&) = delete;
  OwnedAllocation& operator=(const OwnedAllocation&) = delete;
  void* get() const { return ptr_; }
  void* release() {
    void* p = ptr_;
    ptr_ = nullptr;
    return p;
  }

 private:
  Context& context_;
  void* ptr_;
};

// Backends by kind: factories and availability, honouring what this build compiled in.
bool backend_compiled(mtk_backend backend);
bool backend_available(mtk_backend backend);
mtk_backend resolve_default_backend();
std::unique_ptr<Backend> create_backend(mtk_backend backend, int device_index);

}  // namespace mtk

// The ABI's opaque handle is the context itself.
struct mtk_context_s : mtk::Context {
  using mtk::Context::Context;
};

namespace mtk {
// Registry of live contexts: turns NULL, destroyed and foreign handles into
// MTK_ERROR_INVALID_CONTEXT instead of undefined behaviour.
mtk_context register_context(std::unique_ptr<mtk_context_s> context);
Context& checked_context(mtk_context handle);
void destroy_context(mtk_context handle);
}  // namespace mtk
