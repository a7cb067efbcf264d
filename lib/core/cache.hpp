// The one cache type of the library (plans, pipelines, graphs): thread-safe, bounded, counted.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "fault_injection.hpp"

namespace mtk {

struct CacheCounters {
  uint64_t hits = 0, misses = 0, entries = 0;
};

// Least-recently-used map from Key to Value; `get_or_create` builds a missing value with `make`
// outside no lock other than the cache's own, so `make` must not re-enter the same cache.
template <class Key, class Value, class Hash = std::hash<Key>>
class LruCache {
 public:
  explicit LruCache(size_t capacity) : capacity_(capacity) {}

  template <class Make>
  Value get_or_create(const Key& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = index_.find(key);
    if (found != index_.end()) {
      ++hits_;
      order_.splice(order_.begin(), order_, found->second);
      return found->second->second;
    }
    ++misses_;
    Value value = make();
    order_.emplace_front(key, value);
    try {
      fault_point(FaultSite::HostAllocation);  // the index node below
      index_.emplace(key, order_.begin());
    } catch (...) {
      order_.pop_front();
      throw;
    }
    if (order_.size() > capacity_) {
      index_.erase(order_.back().first);
      order_.pop_back();
    }
    return value;
  }

  CacheCounters counters() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return CacheCounters{hits_, misses_, static_cast<uint64_t>(order_.size())};
  }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::pair<Key, Value>> order_;
  std::unordered_map<Key, typename std::list<std::pair<Key, Value>>::iterator, Hash> index_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace mtk
