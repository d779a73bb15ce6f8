#include "compute/cuda/host_signal.h"

#include <chrono>
#include <thread>

namespace hypura::compute::cuda {

// Spins first (the stream's part between two handshakes takes tens of microseconds), then
// yields the core while the wait drags on.
bool HostFlag::wait_ready(uint32_t want, double timeout_s) const {
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t spins = 0;; ++spins) {
    if (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) == want) return true;
    if (spins < (uint64_t{1} << 16)) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      continue;
    }
    std::this_thread::yield();
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > timeout_s) return false;
  }
}

void HostFlag::set_done(uint32_t value) {
  __atomic_store_n(&done, value, __ATOMIC_RELEASE);
}

}  // namespace hypura::compute::cuda
