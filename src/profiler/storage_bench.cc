#include "profiler/storage_bench.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <random>
#include <sstream>
#include <type_traits>

#include "io/aligned_buffer.h"
#include "io/storage.h"
#include "profiler/in_child.h"
#include "profiler/system_info.h"

namespace hypura::profiler {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Creates a new scratch file in `dir` under an unpredictable name and returns its
// descriptor (O_DIRECT where the filesystem allows). O_EXCL | O_NOFOLLOW: the directory
// may be shared (/tmp), and a name someone else created first, or a link planted there,
// must never be opened, let alone truncated and filled with a gigabyte.
Result<int> create_scratch(const std::string& dir, std::string* path) {
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    char name[64];
    std::snprintf(name, sizeof name, ".hypura-profile-%08x%08x.tmp", random(), random());
    *path = (std::filesystem::path(dir) / name).string();
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = ::open(path->c_str(), flags | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) fd = ::open(path->c_str(), flags, 0600);
    if (fd >= 0) return fd;
    if (errno != EEXIST)
      return io_error("cannot create scratch file " + *path + ": " + std::strerror(errno));
  }
  return io_error("cannot create a scratch file in " + dir + ": every name tried exists");
}

// Writes `bytes` of pseudo-random data (incompressible, so no layer below can shortcut it)
// to a new scratch file in `dir`, then fsyncs. Returns its path; the file is the caller's
// to delete (on failure it is already deleted).
Result<std::string> write_scratch(const std::string& dir, uint64_t bytes) {
  std::string path;
  HYPURA_ASSIGN_OR_RETURN(const int fd, create_scratch(dir, &path));
  constexpr uint64_t kChunk = 8 << 20;
  io::AlignedBuffer buf(kChunk);
  std::mt19937_64 rng(12345);
  auto* words = reinterpret_cast<uint64_t*>(buf.data());
  for (uint64_t done = 0; done < bytes; done += kChunk) {
    for (uint64_t i = 0; i < kChunk / 8; ++i) words[i] = rng();
    ssize_t n = ::pwrite(fd, buf.data(), kChunk, static_cast<off_t>(done));
    if (n != static_cast<ssize_t>(kChunk)) {
      std::string err = n < 0 ? std::strerror(errno) : "short write";
      ::close(fd);
      std::remove(path.c_str());
      return io_error("writing scratch file " + path + ": " + err);
    }
  }
  ::fsync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return path;
}

void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Keeps `depth` reads of `block` bytes in flight at offsets from next_offset() for
// `seconds`; returns bytes per second. Each read has its own buffer from a ring of depth.
template <typename NextOffset>
double timed_reads(io::Storage& s, uint64_t block, uint32_t depth, double seconds,
                   uint64_t* n_reads, NextOffset next_offset, Status* error) {
  std::vector<io::AlignedBuffer> bufs;
  for (uint32_t i = 0; i < depth; ++i) bufs.emplace_back(block);
  std::deque<std::pair<io::ReadId, uint32_t>> pending;  // (read, buffer index)
  uint64_t bytes = 0, reads = 0;
  auto t0 = Clock::now();
  for (uint32_t i = 0; i < depth; ++i)
    pending.emplace_back(s.submit(next_offset(), bufs[i].span()), i);
  while (!pending.empty()) {
    auto [id, buf] = pending.front();
    pending.pop_front();
    Status st = s.wait(id);
    if (!st.is_ok() && error->is_ok()) *error = st;
    bytes += block;
    ++reads;
    if (error->is_ok() && seconds_since(t0) < seconds) {
      pending.emplace_back(s.submit(next_offset(), bufs[buf].span()), buf);
    }
  }
  if (n_reads) *n_reads = reads;
  return static_cast<double>(bytes) / seconds_since(t0);
}

Result<std::unique_ptr<io::Storage>> open_for(const std::string& path, uint64_t block,
                                              uint32_t depth) {
  io::StorageOptions o;
  o.queue_depth = depth;
  o.request_bytes = block;
  return io::Storage::open(path, o);
}

// Sequential reads are submitted the way the streaming engine submits a tensor: large
// ranges (at least 32 MiB, two in flight) that Storage splits into `block`-byte device
// reads kept `depth` deep, so the figure is the device's and not the cost of handing
// every read between threads.
Result<double> sequential_point(const std::string& path, uint64_t block, uint32_t depth,
                                double seconds, uint64_t* start) {
  HYPURA_ASSIGN_OR_RETURN(auto s, open_for(path, block, depth));
  if (!s->direct()) drop_cache(path);
  uint64_t chunk = std::max<uint64_t>(block * depth, 32 << 20);
  chunk = std::min(chunk, io::align_down(s->size() / 2, block));
  uint64_t span = io::align_down(s->size(), chunk);
  if (chunk < block || span < chunk) {
    return invalid_argument(path + " is too small for " + std::to_string(block) + "-byte reads");
  }
  uint64_t pos = io::align_down(*start % span, chunk);
  auto next = [&] {
    uint64_t o = pos;
    pos = (pos + chunk) % span;
    return o;
  };
  Status err;
  double bps = timed_reads(*s, chunk, 2, seconds, nullptr, next, &err);
  *start = pos;  // the next point continues where this one stopped: no re-reads
  if (!err.is_ok()) return err;
  return bps;
}

Result<RandomReadPoint> random_point(const std::string& path, uint64_t block, uint32_t depth,
                                     double seconds) {
  HYPURA_ASSIGN_OR_RETURN(auto s, open_for(path, block, depth));
  if (!s->direct()) drop_cache(path);
  uint64_t n_blocks = s->size() / block;
  if (n_blocks == 0) return invalid_argument(path + " is too small for random reads");
  std::mt19937_64 rng(block * 31 + depth);
  auto next = [&] { return (rng() % n_blocks) * block; };
  Status err;
  uint64_t reads = 0;
  double bps = timed_reads(*s, block, depth, seconds, &reads, next, &err);
  if (!err.is_ok()) return err;
  return RandomReadPoint{block, depth, bps / static_cast<double>(block), bps};
}

// The headline sequential figure: the best of the grid's points and the confirmation
// run. Streaming keeps deep queues of large reads, the grid's best case: on a drifting
// disk dense streaming read as fast as the best point, and a mean of the best points
// made the planner's predictions too low (docs/PROFILE.md, "best").
double headline_bps(const std::vector<SeqReadPoint>& points, double confirmed) {
  double best = confirmed;
  for (const auto& p : points) best = std::max(best, p.bps);
  return best;
}

// The smallest block, then smallest depth, reaching 95% of the best: larger reads only
// cost memory (pool slots) and latency for no bandwidth.
void choose_best(StorageProfile& p) {
  double top = 0;
  for (const auto& pt : p.sequential) top = std::max(top, pt.bps);
  p.seq_read_bps = top;
  for (const auto& pt : p.sequential) {
    if (pt.bps < 0.95 * top) continue;
    if (p.best_block_bytes == 0 || pt.block_bytes < p.best_block_bytes ||
        (pt.block_bytes == p.best_block_bytes && pt.queue_depth < p.best_queue_depth)) {
      p.best_block_bytes = pt.block_bytes;
      p.best_queue_depth = pt.queue_depth;
    }
  }
  p.apply_min_in_flight();
}

// The sequential grid (see measure_sequential_grid); progress as a share of `n_points`.
Result<std::vector<SeqReadPoint>> grid(const std::string& path, const StorageBenchOptions& o,
                                       uint64_t file_bytes, size_t n_points, uint64_t* cursor) {
  std::vector<SeqReadPoint> points;
  size_t done = 0;
  for (uint64_t block : o.block_sizes) {
    for (uint32_t depth : o.queue_depths) {
      ++done;
      if (block * depth > o.max_in_flight_bytes || block > file_bytes) continue;
      if (o.progress) {
        o.progress("sequential " + std::to_string(block >> 10) + " KiB x" + std::to_string(depth),
                   static_cast<double>(done) / static_cast<double>(n_points));
      }
      HYPURA_ASSIGN_OR_RETURN(double bps,
                              sequential_point(path, block, depth, o.seconds_per_point, cursor));
      points.push_back({block, depth, bps});
    }
  }
  return points;
}

}  // namespace

Result<std::vector<SeqReadPoint>> measure_sequential_grid(const std::string& path,
                                                          const StorageBenchOptions& options,
                                                          uint64_t* cursor) {
  HYPURA_ASSIGN_OR_RETURN(auto probe, open_for(path, 1 << 20, 1));
  const uint64_t size = probe->size();
  probe.reset();
  return grid(path, options, size, options.block_sizes.size() * options.queue_depths.size(),
              cursor);
}

static_assert(std::is_trivially_copyable_v<SeqReadPoint>, "sent through a pipe as raw bytes");

Result<std::vector<SeqReadPoint>> measure_sequential_grid_in_child(
    const std::string& path, const StorageBenchOptions& options, uint64_t* cursor) {
  StorageBenchOptions o = options;
  o.progress = nullptr;  // the child must not call back into the parent's state
  // The child's answer: the cursor, then the points as raw structs (trivially copyable);
  // nothing when the grid failed.
  const auto bytes = run_in_child([&]() -> std::string {
    uint64_t c = *cursor;
    auto grid = measure_sequential_grid(path, o, &c);
    if (!grid.is_ok()) return {};
    std::string out(reinterpret_cast<const char*>(&c), sizeof c);
    out.append(reinterpret_cast<const char*>(grid->data()), grid->size() * sizeof(SeqReadPoint));
    return out;
  });
  if (!bytes) return measure_sequential_grid(path, options, cursor);  // no child: in-process
  if (bytes->size() < sizeof(uint64_t) ||
      (bytes->size() - sizeof(uint64_t)) % sizeof(SeqReadPoint) != 0) {
    return io_error("sequential read grid on " + path + " failed (in a child process)");
  }
  std::memcpy(cursor, bytes->data(), sizeof(uint64_t));
  std::vector<SeqReadPoint> points((bytes->size() - sizeof(uint64_t)) / sizeof(SeqReadPoint));
  std::memcpy(points.data(), bytes->data() + sizeof(uint64_t),
              points.size() * sizeof(SeqReadPoint));
  return points;
}

SeqReadPoint fastest_point(const std::vector<SeqReadPoint>& points) {
  SeqReadPoint best;
  for (const auto& p : points) {
    if (p.bps > best.bps) best = p;
  }
  return best;
}

void describe_filesystem(const std::string& path, StorageProfile& out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) out.device_id = static_cast<uint64_t>(st.st_dev);
  std::string mountinfo = read_text_file("/proc/self/mountinfo").value_or("");
  std::istringstream in(mountinfo);
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string id, parent, majmin, root, point;
    f >> id >> parent >> majmin >> root >> point;
    unsigned maj = 0, min = 0;
    if (std::sscanf(majmin.c_str(), "%u:%u", &maj, &min) != 2) continue;
    if (makedev(maj, min) != st.st_dev) continue;
    out.mount_point = point;
    size_t dash = line.find(" - ");
    if (dash != std::string::npos) {
      std::istringstream tail(line.substr(dash + 3));
      std::string fstype;
      tail >> fstype >> out.device;
    }
  }
}

Result<double> measure_sequential_bps(const std::string& path, uint64_t block, uint32_t depth,
                                      double seconds) {
  uint64_t start = 0;
  return sequential_point(path, block, depth, seconds, &start);
}

Result<StorageProfile> measure_storage(const StorageBenchOptions& o) {
  namespace fs = std::filesystem;
  StorageProfile p;
  std::string path = o.file;
  bool scratch = path.empty();
  auto progress = [&](const std::string& what, double f) {
    if (o.progress) o.progress(what, f);
  };
  if (scratch) {
    struct statvfs vfs {};
    if (::statvfs(o.dir.c_str(), &vfs) != 0)
      return io_error("cannot stat directory " + o.dir + ": " + std::strerror(errno));
    uint64_t avail = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    if (avail < o.scratch_bytes + (uint64_t{1} << 30)) {
      return resource_exhausted("not enough free space in " + o.dir + " for a " +
                                std::to_string(o.scratch_bytes >> 20) +
                                " MiB scratch file (plus 1 GiB margin); use --file to measure "
                                "read-only on an existing file");
    }
    progress("writing scratch file", 0);
    HYPURA_ASSIGN_OR_RETURN(path, write_scratch(o.dir, o.scratch_bytes));
  }
  p.path = scratch ? o.dir : o.file;
  p.method = scratch ? "scratch" : "file";
  describe_filesystem(p.path, p);
  auto run = [&]() -> Status {
    HYPURA_ASSIGN_OR_RETURN(auto probe, open_for(path, 1 << 20, 1));
    p.direct = probe->direct();
    p.engine = probe->engine_name();
    p.test_bytes = probe->size();
    probe.reset();
    size_t n_points = o.block_sizes.size() * o.queue_depths.size() + 4;
    size_t done = o.block_sizes.size() * o.queue_depths.size();
    uint64_t cursor = 0;
    HYPURA_ASSIGN_OR_RETURN(p.sequential, grid(path, o, p.test_bytes, n_points, &cursor));
    for (uint64_t block : {uint64_t{4096}, uint64_t{1} << 20}) {
      for (uint32_t depth : {1u, 32u}) {
        progress("random " + std::to_string(block >> 10) + " KiB x" + std::to_string(depth),
                 static_cast<double>(++done) / static_cast<double>(n_points));
        HYPURA_ASSIGN_OR_RETURN(auto pt,
                                random_point(path, block, depth, o.seconds_per_random_point));
        p.random.push_back(pt);
      }
    }
    choose_best(p);
    if (o.seconds_confirm > 0 && p.best_block_bytes > 0) {
      progress("confirming the best point",
               static_cast<double>(n_points - 1) / static_cast<double>(n_points));
      HYPURA_ASSIGN_OR_RETURN(const double confirmed,
                              sequential_point(path, p.best_block_bytes, p.best_queue_depth,
                                               o.seconds_confirm, &cursor));
      p.seq_read_bps = headline_bps(p.sequential, confirmed);
    }
    return Status::ok();
  };
  Status st = run();
  if (scratch) std::remove(path.c_str());
  if (!st.is_ok()) return st;
  progress("storage done", 1);
  return p;
}

}  // namespace hypura::profiler
