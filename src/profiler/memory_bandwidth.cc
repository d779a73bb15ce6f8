#include "profiler/memory_bandwidth.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "profiler/in_child.h"

namespace hypura::profiler {
namespace {

// Bytes ahead of the read position that each thread asks for with prefetch hints: a
// single core only reaches DRAM's rate with many lines in flight, which the hardware
// prefetcher alone does not sustain on the VMs we measured.
constexpr size_t kPrefetchBytes = 4096;

// Sums n 64-bit words with independent accumulators (loads, not the add chain, limit).
uint64_t read_words(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  const size_t ahead = kPrefetchBytes / sizeof(uint64_t);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    if (ahead) __builtin_prefetch(p + i + ahead);
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

size_t parse_size(const std::string& s) {
  size_t v = std::strtoull(s.c_str(), nullptr, 10);
  if (s.find('K') != std::string::npos) v <<= 10;
  if (s.find('M') != std::string::npos) v <<= 20;
  return v;
}

}  // namespace

size_t last_level_cache_bytes() {
  size_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string s;
    if (f >> s) best = std::max(best, parse_size(s));
  }
  return best;
}

size_t memory_probe_bytes(const MemoryBandwidthOptions& options) {
  if (options.buffer_bytes != 0) return options.buffer_bytes;
  return std::max<size_t>(4 * last_level_cache_bytes(), size_t{1} << 30);
}

MemoryBandwidth measure_memory_read_bandwidth(const MemoryBandwidthOptions& options) {
  const int nth = std::max(1, options.n_threads);
  const size_t bytes = memory_probe_bytes(options);
  const size_t words_per_thread = bytes / sizeof(uint64_t) / nth / 8 * 8;
  std::vector<uint64_t> buffer(words_per_thread * nth);  // zero-filled: pages are touched

  std::atomic<uint64_t> sink{0};
  std::barrier sync(nth + 1);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < nth; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t* mine = buffer.data() + static_cast<size_t>(t) * words_per_thread;
      for (;;) {
        sync.arrive_and_wait();  // start of a pass
        if (stop.load()) return;
        sink += read_words(mine, words_per_thread);
        sync.arrive_and_wait();  // end of a pass
      }
    });
  }
  using clock = std::chrono::steady_clock;
  double best = 0, total = 0;
  int passes = 0;
  while (total < options.min_seconds || passes < 3) {
    const auto t0 = clock::now();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    total += s;
    ++passes;
    best = std::max(best, static_cast<double>(words_per_thread * nth * sizeof(uint64_t)) / s);
  }
  stop.store(true);
  sync.arrive_and_wait();
  for (auto& th : threads) th.join();
  return MemoryBandwidth{best, words_per_thread * nth * sizeof(uint64_t), nth};
}

MemoryBandwidth measure_memory_read_bandwidth_in_child(const MemoryBandwidthOptions& options) {
  const auto bytes = run_in_child([&] {
    const MemoryBandwidth m = measure_memory_read_bandwidth(options);
    return std::string(reinterpret_cast<const char*>(&m), sizeof m);
  });
  if (!bytes) return measure_memory_read_bandwidth(options);  // fork failed
  MemoryBandwidth m;
  if (bytes->size() != sizeof m) return MemoryBandwidth{};
  std::memcpy(&m, bytes->data(), sizeof m);
  return m;
}

}  // namespace hypura::profiler
