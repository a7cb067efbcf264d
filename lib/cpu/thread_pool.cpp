#include "cpu/thread_pool.hpp"

#include <utility>

namespace mtk::cpu {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads_ = std::max(1, num_threads);
  threads_.reserve(num_threads_ - 1);
  try {
    for (int worker = 1; worker < num_threads_; ++worker)
      threads_.emplace_back([this, worker] { worker_main(worker); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      stopping_ = true;
    }
    job_ready_.notify_all();
    for (auto& thread : threads_) thread.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    stopping_ = true;
  }
  job_ready_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ThreadPool::run(int64_t count, std::function<void(int, int64_t, int64_t)> body) {
  std::lock_guard<std::mutex> job_lock(job_mutex_);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    body_ = std::move(body);
    count_ = count;
    piece_ = std::max<int64_t>(1, count / (4 * int64_t{num_threads_}));
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    busy_workers_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  job_ready_.notify_all();
  work(0);
  std::unique_lock<std::mutex> lock(state_mutex_);
  job_done_.wait(lock, [this] { return busy_workers_ == 0; });
  body_ = nullptr;
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::work(int worker) {
  for (;;) {
    const int64_t begin = next_.fetch_add(piece_, std::memory_order_relaxed);
    if (begin >= count_) return;
    try {
      body_(worker, begin, std::min(count_, begin + piece_));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
      next_.store(count_, std::memory_order_relaxed);  // stop handing out pieces
      return;
    }
  }
}

void ThreadPool::worker_main(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(state_mutex_);
      job_ready_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    work(worker);
    bool last;
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      last = --busy_workers_ == 0;
    }
    if (last) job_done_.notify_one();
  }
}

}  // namespace mtk::cpu
