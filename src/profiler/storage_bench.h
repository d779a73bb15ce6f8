// Storage benchmark: read bandwidth of the filesystem that holds the model, through the
// same direct-I/O reader (io::Storage) the streaming engine uses.
//
// Sequential: reads of each block size (128 KiB .. 16 MiB) with 1 .. 32 of them in flight,
// walking the file in order (submitted as large ranges that Storage splits, as the
// streaming engine does). Random: 4 KiB and 1 MiB reads at block-aligned random
// offsets, at depth 1 and 32. Either on a scratch file written once with real
// (pseudo-random) bytes and deleted afterwards, or read-only on an existing file (the
// model). O_DIRECT keeps the page cache out of the figures; when the filesystem refuses
// it, the cached pages of the file are dropped (posix_fadvise) before every point.
//
// Thread-safety: one benchmark at a time per file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "profiler/hardware_profile.h"

namespace hypura::profiler {

struct StorageBenchOptions {
  std::string dir = ".";  // scratch file goes here (ignored when `file` is set)
  std::string file;       // read-only benchmark on this file instead
  uint64_t scratch_bytes = uint64_t{1} << 30;
  std::vector<uint64_t> block_sizes = {128 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20};
  std::vector<uint32_t> queue_depths = {1, 2, 4, 8, 16, 32};
  uint64_t max_in_flight_bytes = uint64_t{128} << 20;  // skips block x depth above this
  double seconds_per_point = 0.25;
  double seconds_per_random_point = 0.4;
  // The chosen (block, depth) is measured again for this long; the headline figure
  // (seq_read_bps) is the best of that and the grid's points (storage_bench.cc).
  double seconds_confirm = 1.5;
  // Called with (what, fraction done in [0, 1]) between points.
  std::function<void(const std::string&, double)> progress;
};

// Runs the benchmark. Fails when the file cannot be created or read, or the disk lacks
// room for the scratch file (the message says how much is needed).
Result<StorageProfile> measure_storage(const StorageBenchOptions& options);

// One sequential point on an open file: `block` bytes per read, `depth` reads in flight,
// for about `seconds`. Exposed for tests (page-cache independence).
Result<double> measure_sequential_bps(const std::string& path, uint64_t block, uint32_t depth,
                                      double seconds);

// The sequential grid alone, read-only on `path` (no random points, no re-measure):
// every (block, depth) of `options` with block x depth <= max_in_flight_bytes, each for
// seconds_per_point, walking the file from *cursor on (updated, so a later grid continues
// where this one stopped). `hypura bench` runs it on the model file before and after its
// tests: the disk's best sequential rate in the same minutes as the run it judges.
Result<std::vector<SeqReadPoint>> measure_sequential_grid(const std::string& path,
                                                          const StorageBenchOptions& options,
                                                          uint64_t* cursor);

// The same in a forked child process (in_child.h), so its read buffers (up to two ranges
// of max(block x depth, 32 MiB)) never count in this process's peak RSS: bench runs it
// next to a loaded engine whose peak it compares with --ram-budget.
Result<std::vector<SeqReadPoint>> measure_sequential_grid_in_child(
    const std::string& path, const StorageBenchOptions& options, uint64_t* cursor);

// The fastest point of a grid (zeros when empty).
SeqReadPoint fastest_point(const std::vector<SeqReadPoint>& points);

// Fills (mount point, device, st_dev) of the filesystem holding `path`.
void describe_filesystem(const std::string& path, StorageProfile& out);

}  // namespace hypura::profiler
