// ThreadPool implementation: a generation counter wakes the workers for each
// parallel_for; the caller runs tasks too and then waits for the workers to drain.
// Both sides first spin (pause loop) for up to kSpinSeconds before sleeping on the
// condition variables: a decode step issues ~200 sub-millisecond parallel_fors and a
// futex wake-up each (tens of microseconds on a VM) idles the second core. The spin is
// short because on an oversubscribed machine a long one takes the core from the thread
// doing the work (a 2 ms spin made decode 2-5x slower under load 4 on 2 cores).
#include "backend/cpu/thread_pool.h"

#include <chrono>
#include <cstdlib>

namespace brass::backend::cpu {

namespace {
// BRASS_POOL_SPIN_US overrides the spin (experiments; read once).
const double kSpinSeconds = [] {
  const char* e = std::getenv("BRASS_POOL_SPIN_US");
  return e && *e ? std::atof(e) * 1e-6 : 50e-6;
}();

// Spin until pred() or kSpinSeconds pass; true if pred() became true.
template <class Pred>
bool spin_until(Pred pred) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > kSpinSeconds) return pred();
  }
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads), slices_(n_threads_) {
  const char* e = std::getenv("BRASS_POOL_SLICES");  // experiment knob: 0 = one range, thread 0 from the front, the rest from the back
  sliced_ = !(e && e[0] == '0');
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    stop_flag_.store(true, std::memory_order_release);
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_tasks(int index) {
  // own slice first, from its front; then the others', from their back, so the owner's
  // reads stay one ascending stream and the thief's another (tasks handed out one at a
  // time to both ends of one range interleave the two threads' reads, which halved the
  // read bandwidth on a 2-core EPYC: 10 vs 21 GB/s for 16 KiB chunks)
  for (int k = 0; k < n_threads_; ++k) {
    std::atomic<uint64_t>& r = slices_[(index + k) % n_threads_].range;
    uint64_t cur = r.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t front = cur & 0xffffffffu, back = cur >> 32;
      if (front >= back) break;
      const uint64_t next = k == 0 ? (back << 32) | (front + 1) : ((back - 1) << 32) | front;
      if (!r.compare_exchange_weak(cur, next, std::memory_order_relaxed)) continue;
      (*fn_)(static_cast<int64_t>(k == 0 ? front : back - 1), index);
      cur = r.load(std::memory_order_relaxed);
    }
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return stop_flag_.load(std::memory_order_acquire) || gen_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
    }
    if (stop_flag_.load(std::memory_order_acquire)) return;
    seen = gen_.load(std::memory_order_acquire);
    run_tasks(index);
    if (active_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lk(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1 || n_tasks > 0xffffffffLL) {  // (slices pack 32-bit bounds)
    for (int64_t i = 0; i < n_tasks; ++i) fn(i, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    for (int i = 0; i < n_threads_; ++i) {
      const uint64_t lo = sliced_ ? n_tasks * i / n_threads_ : (i ? n_tasks : 0);
      const uint64_t hi = sliced_ ? n_tasks * (i + 1) / n_threads_ : n_tasks;
      slices_[i].range.store((hi << 32) | lo, std::memory_order_relaxed);
    }
    active_.store(n_threads_ - 1, std::memory_order_relaxed);
    ++generation_;
    gen_.store(generation_, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_tasks(0);
  if (!spin_until([&] { return active_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return active_.load(std::memory_order_acquire) == 0; });
  }
  fn_ = nullptr;
}

}  // namespace brass::backend::cpu
