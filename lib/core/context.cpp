#include "context.hpp"

#include <mutex>
#include <shared_mutex>
#include <unordered_set>
#include <utility>

#include "error.hpp"
#include "fault_injection.hpp"

namespace mtk {

Context::Context(std::unique_ptr<Backend> backend, int device_index)
    : backend_(std::move(backend)), device_index_(device_index) {}

Context::~Context() {
  for (auto& allocation : allocations_) {
    backend_->deallocate(allocation.first);
    track_release();
  }
}

void* Context::allocate(size_t bytes) {
  fault_point(FaultSite::DeviceAllocation);
  void* ptr = backend_->allocate(bytes);
  track_allocation();
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    fault_point(FaultSite::HostAllocation);  // the map node below
    allocations_.emplace(ptr, bytes);
  } catch (...) {
    backend_->deallocate(ptr);
    track_release();
    throw;
  }
  return ptr;
}

void Context::deallocate(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = allocations_.find(ptr);
    if (found == allocations_.end()) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "ptr = ", ptr,
           " was not allocated by this context (or was already freed)");
    }
    allocations_.erase(found);
  }
  backend_->deallocate(ptr);
  track_release();
}

size_t Context::live_allocations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return allocations_.size();
}

namespace {
// Every call looks its context up here, so lookups share the lock; only create and destroy
// take it alone.
std::shared_mutex registry_mutex;
std::unordered_set<mtk_context>& live_contexts() {
  static auto* contexts = new std::unordered_set<mtk_context>();  // outlives static destructors
  return *contexts;
}
}  // namespace

mtk_context register_context(std::unique_ptr<mtk_context_s> context) {
  std::lock_guard<std::shared_mutex> lock(registry_mutex);
  fault_point(FaultSite::HostAllocation);  // the set node below
  live_contexts().insert(context.get());
  return context.release();
}

Context& checked_context(mtk_context handle) {
  if (handle == nullptr) fail(MTK_ERROR_INVALID_CONTEXT, "ctx is NULL");
  std::shared_lock<std::shared_mutex> lock(registry_mutex);
  if (live_contexts().count(handle) == 0) {
    fail(MTK_ERROR_INVALID_CONTEXT, "ctx = ", static_cast<const void*>(handle),
         " is not a live context (destroyed, or never created by mtk_context_create)");
  }
  return *handle;
}

void destroy_context(mtk_context handle) {
  std::unique_ptr<mtk_context_s> owned;
  {
    std::lock_guard<std::shared_mutex> lock(registry_mutex);
    if (live_contexts().erase(handle) == 0) {
      fail(MTK_ERROR_INVALID_CONTEXT, "ctx = ", static_cast<const void*>(handle),
           " is not a live context (destroyed, or never created by mtk_context_create)");
    }
    owned.reset(handle);
  }
}

}  // namespace mtk
