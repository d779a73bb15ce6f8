// The one memory read-bandwidth probe: `hypura profile` and the kernel benchmarks call
// it, so "fraction of memory bandwidth" means the same thing everywhere.
//
// Method: n threads each sum 64-bit words over their own slice of a buffer several times
// larger than the last-level cache (so the figure is DRAM, not cache), repeatedly, and
// the best pass of at least min_seconds is reported as bytes read per second.
//
// Thread-safety: a free function with no shared state; it allocates and touches its own
// buffer (buffer_bytes of RAM for the duration of the call).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hypura::profiler {

struct MemoryBandwidthOptions {
  size_t buffer_bytes = 0;  // 0: max(4 x last-level cache, 1 GiB)

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

// The probe's buffer: options.buffer_bytes, else 4x the last-level cache and at least 1 GiB.
size_t memory_probe_bytes(const MemoryBandwidthOptions& options);

MemoryBandwidth measure_memory_read_bandwidth(const MemoryBandwidthOptions& options);

// The same, run in a child process (fork), so its buffer never counts in this process's
// peak RSS (VmHWM) or against a memory budget that bench checks afterwards. Falls back
// to measuring in this process when fork fails. Call it before starting threads, and
// where a cgroup limit may be small only after child_fits(memory_probe_bytes(...)).
MemoryBandwidth measure_memory_read_bandwidth_in_child(const MemoryBandwidthOptions& options);

}  // namespace hypura::profiler
