// A persistent pool of compute threads that run one data-parallel job at a time.
//
// parallel_for(n, fn) calls fn(i) once for every i in [0, n). The caller and the workers
// claim items one at a time from a shared counter, so a worker that the OS has not
// scheduled yet (other processes on a 2-core machine) never holds the job up: the caller
// simply does more of the items. Which thread runs an item never changes its result.
//
// Workers are created once, spin briefly after each job (the matmuls of a forward pass
// start within microseconds of each other) and then sleep on a condition variable. No
// thread is created per job and neither call allocates.
//
// Thread-safety: jobs must be submitted by one thread at a time (the Context owner).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace hypura::compute {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // caller + n_threads - 1 workers; n_threads >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Jobs handed to the workers so far (calls that ran inline on the caller not counted):
  // each costs a wake-up and a wait for the last item, the per-op overhead of a decode step.
  uint64_t jobs() const { return jobs_.load(std::memory_order_relaxed); }

  // Calls fn(i) for every i in [0, n_items) (n_items < 2^32), each exactly once; returns
  // when all calls have finished. fn must not throw.
  template <class Fn>
  void parallel_for(int64_t n_items, Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_items(
        n_items, [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); }, &fn);
  }

  // Calls fn(i, size()) once for every share i < size(). i names a share of the work (and
  // of per-share scratch), not a physical thread: two shares may run on the same thread
  // one after the other, never at the same time on two threads.
  template <class Fn>
  void run(Fn&& fn) {
    const int n = n_threads_;
    parallel_for(n, [&](int64_t i) { fn(static_cast<int>(i), n); });
  }

 private:
  using ItemFn = void (*)(void*, int64_t);
  void run_items(int64_t n_items, ItemFn fn, void* ctx);
  void work_on(uint64_t generation);  // claims and runs items of that job until none remain
  void worker_loop();

  int n_threads_;
  std::vector<std::thread> workers_;
  uint64_t generation_ = 0;         // caller-side job counter
  std::atomic<uint64_t> jobs_{0};   // jobs(); written by the submitting thread only
  std::atomic<uint64_t> state_{0};  // (generation << 32) | next unclaimed item
  std::atomic<int64_t> n_items_{0};
  std::atomic<ItemFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> done_{0};  // items finished in the current job
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
};

// The [begin, end) share of thread ith among nth of n items, in chunks of `align`
// (the last share takes the remainder). Shares are contiguous and ordered by ith.
inline void split_range(int64_t n, int ith, int nth, int64_t align, int64_t* begin, int64_t* end) {
  const int64_t units = (n + align - 1) / align;
  const int64_t per = units / nth, extra = units % nth;
  const int64_t u0 = ith * per + (ith < extra ? ith : extra);
  const int64_t u1 = u0 + per + (ith < extra ? 1 : 0);
  *begin = u0 * align < n ? u0 * align : n;
  *end = u1 * align < n ? u1 * align : n;
}

}  // namespace hypura::compute
