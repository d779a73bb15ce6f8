#include "compute/cpu/thread_pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hypura::compute {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spin iterations before a worker sleeps (some hundred microseconds): long enough to
// bridge the gap between the matmuls of one token, short enough not to hold a core that
// someone else needs when the engine is idle.
constexpr int kSpinIterations = 1 << 12;

inline uint64_t job_of(uint64_t state) {
  return state >> 32;
}
constexpr uint64_t kClosed = 0xffffffffu;  // item index meaning "no items to claim"

}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_items(int64_t n_items, ItemFn fn, void* ctx) {
  if (n_items <= 0) return;
  if (n_threads_ == 1 || n_items == 1) {
    for (int64_t i = 0; i < n_items; ++i) fn(ctx, i);
    return;
  }
  jobs_.store(jobs_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Close the previous (complete) job first: a late worker still holding its state word
  // then fails its claim instead of taking an item against the new job's fields.
  state_.store((job_of(state_.load(std::memory_order_relaxed)) << 32) | kClosed,
               std::memory_order_seq_cst);
  fn_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  n_items_.store(n_items, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const uint64_t generation = ++generation_ & 0xffffffffu;
  {
    // Publishing under the lock orders it against a worker that is about to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    state_.store(generation << 32, std::memory_order_release);
  }
  cv_.notify_all();
  work_on(generation);
  int spins = 0;
  while (done_.load(std::memory_order_acquire) != n_items) {
    if (++spins < kSpinIterations) {
      cpu_relax();
    } else {
      std::this_thread::yield();  // a worker is inside an item but descheduled
    }
  }
}

void ThreadPool::work_on(uint64_t generation) {
  for (;;) {
    uint64_t s = state_.load(std::memory_order_acquire);
    if (job_of(s) != generation) return;  // that job is over; a newer one is not ours
    const int64_t item = static_cast<int64_t>(s & 0xffffffffu);
    if (item >= n_items_.load(std::memory_order_relaxed)) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) continue;
    // A claimed item keeps the job open, so fn_ and ctx_ still belong to it.
    fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), item);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    while (job_of(state_.load(std::memory_order_acquire)) == seen && !stop_.load() &&
           spins < kSpinIterations) {
      cpu_relax();
      ++spins;
    }
    if (job_of(state_.load(std::memory_order_acquire)) == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_.load() || job_of(state_.load()) != seen; });
    }
    if (stop_.load()) return;
    seen = job_of(state_.load(std::memory_order_acquire));
    work_on(seen);
  }
}

}  // namespace hypura::compute
