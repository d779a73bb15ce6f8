#include "profiler/profiler.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <vector>

#include "common/cache_dir.h"
#include "common/log.h"
#include "common/size.h"
#include "profiler/decode_rates.h"
#include "profiler/gpu_probe.h"
#include "profiler/in_child.h"
#include "profiler/memory_bandwidth.h"
#include "profiler/storage_bench.h"
#include "profiler/system_info.h"

namespace hypura::profiler {
namespace {

namespace fs = std::filesystem;

std::string now_iso8601() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// One progress line on stderr, redrawn in place on a terminal.
void show_progress(const std::string& what, double fraction) {
  static const bool tty = ::isatty(2);
  int filled = static_cast<int>(fraction * 30 + 0.5);
  std::fprintf(stderr, "%s[profile] [%-30s] %3.0f%% %-28s%s", tty ? "\r" : "",
               std::string(static_cast<size_t>(filled), '#').c_str(), fraction * 100, what.c_str(),
               tty && fraction < 1 ? "" : "\n");
  std::fflush(stderr);
}

// The directory or file whose filesystem the storage figures must describe.
std::string storage_target(const ProfileOptions& o) {
  if (!o.storage_file.empty()) return o.storage_file;
  if (!o.storage_dir.empty()) return o.storage_dir;
  if (!o.model_path.empty()) {
    fs::path parent = fs::path(o.model_path).parent_path();
    return parent.empty() ? "." : parent.string();
  }
  return ".";
}

uint64_t device_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_dev) : 0;
}

Result<StorageProfile> measure_storage_for(const ProfileOptions& o) {
  StorageBenchOptions b;
  b.file = o.storage_file;
  b.dir = storage_target(o);
  b.scratch_bytes = o.scratch_bytes;
  if (o.progress)
    b.progress = [](const std::string& w, double f) { show_progress(w, 0.1 + 0.9 * f); };
  return measure_storage(b);
}

// Re-reads RAM size, availability and the cgroup limit (cheap, and they change between
// runs: a cgroup limit set for one run must be seen by that run), keeping the measured
// bandwidth and the unified flag.
void refresh_memory(MemoryProfile& m, uint64_t reserve) {
  MemoryProfile fresh = probe_memory(reserve);
  fresh.read_bandwidth_bps = m.read_bandwidth_bps;
  fresh.unified = m.unified;
  m = fresh;
}

void apply_reserve(MemoryProfile& m, uint64_t reserve) {
  m.reserve_bytes = reserve;
  m.usable_bytes = usable_memory(m, reserve);
}

// Writes p to `cache` (creating its directory); a failure is only a warning.
void save_to_cache(const HardwareProfile& p, const std::string& cache) {
  if (cache.empty()) return;
  std::error_code ec;
  fs::create_directories(fs::path(cache).parent_path(), ec);
  Status st = save_profile_file(p, cache);
  if (!st.is_ok()) log().warn("profile: not cached: {}", st.message());
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

std::string default_cache_path() {
  Result<std::string> dir = cache_dir();
  if (!dir.is_ok()) {
    log().warn("profile: no cache: {}", dir.status().message());
    return "";
  }
  return (fs::path(*dir) / "profile.json").string();
}

std::string machine_fingerprint(const HardwareProfile& p) {
  std::ostringstream id;
  id << p.cpu.model << '|' << p.cpu.physical_cores << '|' << p.cpu.logical_cores << '|'
     << p.cpu.simd << '|' << (p.memory.total_bytes >> 28);
  for (const auto& g : p.gpus) id << '|' << g.name << ':' << (g.total_bytes >> 28);
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : id.str()) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return hex64(h);
}

Result<HardwareProfile> measure_profile(const ProfileOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  HardwareProfile p;
  p.source = "measured";
  p.timestamp = now_iso8601();
  if (o.progress) show_progress("cpu, memory", 0);
  p.cpu = probe_cpu();
  p.memory = probe_memory(o.reserve_bytes.value_or(kDefaultReserveBytes));
  if (o.progress) show_progress("memory bandwidth", 0.02);
  MemoryBandwidthOptions mb;
  mb.n_threads = p.cpu.physical_cores;
  mb.min_seconds = 0.5;
  p.memory.read_bandwidth_bps = measure_memory_read_bandwidth(mb).read_bytes_per_second;
  if (o.progress) show_progress("decode kernels", 0.05);
  p.cpu.decode = measure_decode_rates_in_child(profiled_decode_shapes(), p.cpu.physical_cores,
                                               kDecodeProbeSeconds);
  if (o.progress) show_progress("gpu", 0.08);
  GpuProbeResult gpu = probe_gpus();
  p.gpus = gpu.gpus;
  if (p.gpus.empty()) log().info("profile: no GPU tier ({})", gpu.note);
  HYPURA_ASSIGN_OR_RETURN(p.storage, measure_storage_for(o));
  p.fingerprint = machine_fingerprint(p);
  log().info("profile: measured in {:.1f} s",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return p;
}

Result<HardwareProfile> load_or_measure(const ProfileOptions& o) {
  if (!o.profile_file.empty()) {
    HYPURA_ASSIGN_OR_RETURN(HardwareProfile p, load_profile_file(o.profile_file));
    if (o.reserve_bytes) apply_reserve(p.memory, *o.reserve_bytes);
    return p;
  }
  std::string cache = o.cache_path.empty() ? default_cache_path() : o.cache_path;
  uint64_t reserve = o.reserve_bytes.value_or(kDefaultReserveBytes);
  bool dirty = false;
  Result<HardwareProfile> cached = o.refresh || cache.empty()
                                       ? Result<HardwareProfile>(not_found("no cache"))
                                       : load_profile_file(cache);
  HardwareProfile p;
  if (cached.is_ok()) {
    p = std::move(cached).value();
    HardwareProfile now;
    now.cpu = probe_cpu();
    now.memory = probe_memory(reserve);
    now.gpus = probe_gpus(0).gpus;  // names and memory only: no copies timed
    if (machine_fingerprint(now) != p.fingerprint) {
      log().info("profile: this machine differs from the cached profile; measuring again");
      cached = not_found("machine changed");
    }
  } else if (!o.refresh && cached.status().code() != StatusCode::kNotFound) {
    log().warn("profile: ignoring unreadable cache: {}", cached.status().message());
  }
  if (!cached.is_ok()) {
    HYPURA_ASSIGN_OR_RETURN(p, measure_profile(o));
    dirty = true;
  } else {
    refresh_memory(p.memory, reserve);
    if (add_missing_decode_rates(p, profiled_decode_shapes())) dirty = true;  // older caches
    if (add_missing_decode_rates(p, o.decode_shapes)) dirty = true;
    if (device_of(storage_target(o)) != p.storage.device_id || !o.storage_file.empty()) {
      log().info("profile: measuring the storage that holds {}", storage_target(o));
      HYPURA_ASSIGN_OR_RETURN(p.storage, measure_storage_for(o));
      dirty = true;
    }
  }
  if (dirty) save_to_cache(p, cache);
  return p;
}

std::string quick_cache_path() {
  const std::string full = default_cache_path();
  return full.empty() ? "" : (fs::path(full).parent_path() / "quick-profile.json").string();
}

HardwareProfile load_or_quick_measure(uint64_t reserve, std::span<const DecodeShape> shapes) {
  HardwareProfile now;
  now.cpu = probe_cpu();
  now.memory = probe_memory(reserve);
  now.gpus = probe_gpus(0).gpus;
  const std::string fingerprint = machine_fingerprint(now);
  for (const std::string& cache : {default_cache_path(), quick_cache_path()}) {
    if (cache.empty() || !fs::exists(cache)) continue;
    Result<HardwareProfile> cached = load_profile_file(cache);
    if (!cached.is_ok() || cached->fingerprint != fingerprint) continue;
    HardwareProfile p = std::move(cached).value();
    refresh_memory(p.memory, reserve);
    if (add_missing_decode_rates(p, shapes)) save_to_cache(p, cache);
    return p;
  }
  HardwareProfile p = now;
  p.source = "system facts and memory bandwidth (no storage benchmark: the model fits)";
  p.timestamp = now_iso8601();
  p.fingerprint = fingerprint;
  MemoryBandwidthOptions mo;
  mo.n_threads = std::max(1, p.cpu.physical_cores);
  if (child_fits(memory_probe_bytes(mo), "the memory bandwidth probe"))
    p.memory.read_bandwidth_bps = measure_memory_read_bandwidth_in_child(mo).read_bytes_per_second;
  add_missing_decode_rates(p, shapes);
  p.storage.seq_read_bps = 1e9;
  save_to_cache(p, quick_cache_path());
  return p;
}

std::string profile_to_text(const HardwareProfile& p) {
  std::ostringstream out;
  char line[256];
  auto gbps = [](double bps) { return bps / 1e9; };
  out << "Hardware profile (" << p.source << ", " << p.timestamp << ", fingerprint "
      << p.fingerprint << ")\n";
  out << "  CPU      " << p.cpu.model << ": " << p.cpu.physical_cores << " physical cores ("
      << p.cpu.logical_cores << " logical), SIMD " << p.cpu.simd << "\n";
  const MemoryProfile& m = p.memory;
  out << "  RAM      total " << format_size(m.total_bytes) << ", available "
      << format_size(m.available_bytes) << ", cgroup " << m.cgroup_version << " limit "
      << (m.cgroup_limit_bytes ? format_size(*m.cgroup_limit_bytes) : std::string("none"))
      << "\n           usable " << format_size(m.usable_bytes) << " = min(total - reserve "
      << format_size(m.reserve_bytes) << ", cgroup limit)"
      << (m.unified ? " (unified with GPU)" : "") << "\n";
  std::snprintf(line, sizeof line, "           read bandwidth %.1f GB/s\n",
                gbps(m.read_bandwidth_bps));
  out << line;
  if (!p.cpu.decode.empty()) {
    out << "  Decode   one token's products from RAM, weight GB/s (+ per product):";
    for (const DecodeRate& r : p.cpu.decode) {
      std::snprintf(line, sizeof line, " %s %.1f (+%.1f us)", decode_shape_name(r).c_str(),
                    gbps(r.bps), 1e6 * std::max(0.0, r.overhead_s));
      out << line;
    }
    out << "\n";
  }
  if (p.gpus.empty()) out << "  GPU      none (no GPU tier)\n";
  for (const auto& g : p.gpus) {
    std::snprintf(
        line, sizeof line,
        "  GPU      %s: %s (%s free), H2D pinned %.1f GB/s, pageable %.1f GB/s, memory %.0f GB/s\n",
        g.name.c_str(), format_size(g.total_bytes).c_str(), format_size(g.free_bytes).c_str(),
        gbps(g.h2d_pinned_bps), gbps(g.h2d_pageable_bps), gbps(g.memory_bandwidth_bps));
    out << line;
  }
  const StorageProfile& s = p.storage;
  out << "  Storage  " << s.path << " on " << s.device << " (" << s.mount_point << "), "
      << (s.direct ? "O_DIRECT" : "buffered") << " via " << s.engine << ", " << s.method << " "
      << format_size(s.test_bytes) << "\n";
  std::snprintf(line, sizeof line,
                "           sequential %.2f GB/s (best of the grid and a 1.5 s re-measure), chosen "
                "point %s x%u\n",
                gbps(s.seq_read_bps), format_size(s.best_block_bytes).c_str(), s.best_queue_depth);
  out << line;
  if (!s.sequential.empty()) {
    out << "           sequential GB/s by block (rows) and queue depth (columns):\n           "
           "block     ";
    std::vector<uint32_t> depths;
    for (const auto& pt : s.sequential) {
      if (std::find(depths.begin(), depths.end(), pt.queue_depth) == depths.end())
        depths.push_back(pt.queue_depth);
    }
    for (uint32_t d : depths) {
      std::snprintf(line, sizeof line, "%7u", d);
      out << line;
    }
    out << "\n";
    uint64_t row = 0;
    for (const auto& pt : s.sequential) {
      if (pt.block_bytes != row) {
        if (row != 0) out << "\n";
        row = pt.block_bytes;
        std::snprintf(line, sizeof line, "           %-9s ", format_size(row).c_str());
        out << line;
        for (uint32_t d : depths) {
          double v = 0;
          for (const auto& q : s.sequential) {
            if (q.block_bytes == row && q.queue_depth == d) v = q.bps;
          }
          if (v > 0) {
            std::snprintf(line, sizeof line, "%7.2f", gbps(v));
          } else {
            std::snprintf(line, sizeof line, "%7s", "-");
          }
          out << line;
        }
      }
    }
    out << "\n";
  }
  for (const auto& r : s.random) {
    std::snprintf(line, sizeof line, "           random %s x%u: %.0f IOPS, %.3f GB/s\n",
                  format_size(r.block_bytes).c_str(), r.queue_depth, r.iops, gbps(r.bps));
    out << line;
  }
  return out.str();
}

}  // namespace hypura::profiler
