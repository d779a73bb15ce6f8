// The one memory read-bandwidth probe: `hypura profile` and the kernel benchmarks call
// it, so "fraction of memory bandwidth" means the same thing everywhere.
//
// Method: n threads each sum 64-bit words over their own slice of a buffer several times
// larger than the last-level cache (so the figure is DRAM, not cache), repeatedly, and
// the best pass of at least min_seconds is reported as bytes read per second.
//
// Thread-safety: a free function with no shared state; it allocates and touches its own
// buffer (buffer_bytes of RAM for the duration of the call) unless given one to read.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hypura::profiler {

struct MemoryBandwidthOptions {
  size_t buffer_bytes = 0;  // 0: max(4 x last-level cache, 1 GiB)
  // Read this memory instead of allocating (bench passes the loaded weights): no new
  // pages, so the probe neither raises peak RSS nor leaves freed pages that the next
  // large allocation must fault back in (slow in a VM). Used when it is larger than
  // 4 x the last-level cache; buffer_bytes is then ignored.
  const void* existing = nullptr;
  size_t existing_bytes = 0;
  int n_threads = 1;
  double min_seconds = 0.5;  // total measuring time; the best pass is reported
};

struct MemoryBandwidth {
  double read_bytes_per_second = 0;  // best pass
  size_t buffer_bytes = 0;
  int n_threads = 0;
};

// Size of the last-level cache from sysfs (bytes), or 0 when unknown.
size_t last_level_cache_bytes();

MemoryBandwidth measure_memory_read_bandwidth(const MemoryBandwidthOptions& options);

}  // namespace hypura::profiler
