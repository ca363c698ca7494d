// A small persistent thread pool for the CPU backends: n-1 worker threads created
// once, plus the calling thread, run `parallel_for` task ranges. Tasks are handed out
// in contiguous ranges: thread i first takes tasks from its own slice [i*n/T, (i+1)*n/T)
// in order, then steals from the back of the other slices (dynamic balancing; experts and heads have
// uneven cost, and the machine may be shared). Contiguous slices keep each thread's weight
// reads one long sequential stream in the decode mat-vecs, which the hardware prefetchers
// follow better than tasks interleaved between threads.
// One parallel_for at a time per pool (the forward pass is single-threaded above it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace brass::backend::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(task, thread_index) for every task in [0, n_tasks); thread_index is in
  // [0, size()) and unique among concurrently running calls (use it for scratch).
  // Returns when all tasks are done.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn);

 private:
  void worker(int index);
  void run_tasks(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::condition_variable cv_done_;
  uint64_t generation_ = 0;          // guarded by mu_ (condition-variable predicate)
  std::atomic<uint64_t> gen_{0};     // the same, read by spinning threads
  std::atomic<int> active_{0};       // workers still running the current generation
  bool stop_ = false;
  std::atomic<bool> stop_flag_{false};
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t n_tasks_ = 0;
  // A slice [front, back) packed in one word (front in the low 32 bits) so that the
  // owner taking from the front and a thief taking from the back agree by CAS on who
  // gets the last task.
  struct alignas(64) Slice {
    std::atomic<uint64_t> range{0};
  };
  std::vector<Slice> slices_;  // (n_threads) per-thread task ranges
  bool sliced_ = true;
};

}  // namespace brass::backend::cpu
