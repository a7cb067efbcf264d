// A fixed set of worker threads that runs one parallel loop at a time. The calling thread works
// too, as worker 0, so a pool of one thread spawns nothing and a loop never waits on an idle core.
//
// Jobs are serialised: a second thread calling parallel_for waits until the running loop ends.
// A loop body must not call back into the same pool (it would wait on itself).
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mtk::cpu {

class ThreadPool {
 public:
  // `num_threads` counts the caller; 0 means one per hardware thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls body(worker, begin, end) on disjoint ranges covering [0, count), concurrently;
  // `worker` in [0, num_threads()) is unique among the calls running at the same moment, so it
  // can index per-worker scratch. Ranges are handed out dynamically in pieces of about
  // count / (4 * num_threads()) to balance uneven work. The first exception thrown by a body is
  // rethrown here after every worker has stopped.
  template <class Body>
  void parallel_for_worker(int64_t count, Body&& body) {
    if (count <= 0) return;
    if (num_threads_ == 1 || count == 1) {
      body(0, int64_t{0}, count);
      return;
    }
    run(count, std::function<void(int, int64_t, int64_t)>(std::ref(body)));
  }

  // Calls body(begin, end) on disjoint ranges covering [0, count), concurrently.
  template <class Body>
  void parallel_for(int64_t count, Body&& body) {
    parallel_for_worker(count, [&body](int, int64_t begin, int64_t end) { body(begin, end); });
  }

 private:
  void run(int64_t count, std::function<void(int, int64_t, int64_t)> body);
  void work(int worker);  // claims pieces of the current job until none are left
  void worker_main(int worker);

  int num_threads_;
  std::vector<std::thread> threads_;

  std::mutex job_mutex_;  // held by the caller for the whole of one parallel loop

  std::mutex state_mutex_;
  std::condition_variable job_ready_, job_done_;
  uint64_t generation_ = 0;  // bumped for each job; workers wait for a new one
  bool stopping_ = false;
  int busy_workers_ = 0;

  // The current job; written under state_mutex_ before generation_ is bumped.
  std::function<void(int, int64_t, int64_t)> body_;
  int64_t count_ = 0, piece_ = 1;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;
  std::mutex error_mutex_;
};

}  // namespace mtk::cpu
