// A persistent pool of compute threads that run one data-parallel job at a time.
//
// run(fn) calls fn(thread_index, n_threads) once on every thread (the caller is thread 0)
// and returns when all calls have finished. Workers are created once, spin briefly
// after each job (back-to-back matmuls of a forward pass then start in microseconds)
// and sleep on a condition variable when idle. No thread is created per job and run()
// does not allocate.
//
// Thread-safety: run() must be called by one thread at a time (the Context owner).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace hypura::compute {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // REQUIRES: n_threads >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(thread_index, n_threads) on every thread; fn must not throw.
  template <class Fn>
  void run(Fn&& fn) {
    run_raw(
        [](void* ctx, int ith, int nth) { (*static_cast<std::remove_reference_t<Fn>*>(ctx))(ith, nth); },
        &fn);
  }
  void run_raw(void (*fn)(void*, int, int), void* ctx);

 private:
  void worker_loop(int ith);

  int n_threads_;
  std::vector<std::thread> workers_;
  void (*fn_)(void*, int, int) = nullptr;
  void* ctx_ = nullptr;
  std::atomic<uint64_t> generation_{0};  // bumped once per job
  std::atomic<int> pending_{0};          // workers still running the current job
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
