// HardwareProfile: what `hypura profile` measured about this machine, as plain data.
//
// The planner (scheduler/) reads it; `hypura profile` writes it as JSON (schema in
// docs/PROFILE.md; every size in bytes, every bandwidth in bytes per second) to the
// user's cache directory. Tests and reproducible plans load hand-written fixtures of the
// same schema (`--profile FILE`), e.g. the original's M1 Max rig.
//
// Thread-safety: plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "gguf/gguf.h"

namespace hypura::profiler {

inline constexpr int kProfileSchemaVersion = 1;

// The row width of a rate measured without one (compute::kDecodeProbeCols).
inline constexpr int64_t kDefaultDecodeCols = 4096;

// A weight type at a row width: narrow rows decode slower per byte in some formats (the
// AVX-512 kernels of the 32-element formats take rows in groups of 16 blocks, so a
// 576-column row does the work of 1024; docs/PROFILE.md, "decode rates").
struct DecodeShape {
  gguf::GgmlType type = gguf::GgmlType::F32;
  int64_t n_cols = 0;  // 0: the probe's default width (compute::kDecodeProbeCols)
};

// How fast one token's products read weights of one shape from RAM on every physical core
// (compute/decode_probe.h): the CPU's resident decode speed, arithmetic and memory bus
// together, and what each product costs beyond its bytes.
struct DecodeRate {
  gguf::GgmlType type = gguf::GgmlType::F32;
  double bps = 0;          // weight bytes per second
  double overhead_s = -1;  // seconds per product beyond bytes / bps; < 0: not measured
                           // (profiles written before it), so it is measured again
  int64_t n_cols = 0;      // the row width measured (0: the probe's default)
};

// "Q4_K" for the default width, "Q4_Kx576" for another (reports and JSON keys).
std::string decode_shape_name(const DecodeRate& r);

struct CpuProfile {
  std::string model;  // "Intel(R) Xeon(R) Processor"
  int physical_cores = 0;
  int logical_cores = 0;
  std::string simd;                // best level: "scalar", "avx2", "avx512", "avx512vnni", "amx"
  std::vector<std::string> flags;  // the SIMD features seen ("avx2", "fma", "avx512f", ...)
  std::vector<DecodeRate> decode;  // per weight type (empty: not measured, older profiles)

  // The rate measured for `type` at the width nearest n_cols (0: the default width);
  // nullptr when the type was not measured.
  const DecodeRate* decode_rate(gguf::GgmlType type, int64_t n_cols = 0) const;
  double decode_bps(gguf::GgmlType type, int64_t n_cols = 0) const;         // 0 when not measured
  double decode_overhead_s(gguf::GgmlType type, int64_t n_cols = 0) const;  // the same
  // The rate measured for exactly this shape; nullptr when there is none.
  const DecodeRate* measured(const DecodeShape& shape) const;
  // Adds r, or replaces the rate of its type and width.
  void set_decode(const DecodeRate& r);
};

struct MemoryProfile {
  uint64_t total_bytes = 0;                    // MemTotal
  uint64_t available_bytes = 0;                // MemAvailable when measured (informative only)
  std::optional<uint64_t> cgroup_limit_bytes;  // memory.limit_in_bytes / memory.max, if set
  std::string cgroup_version;                  // "v1", "v2" or "none"
  uint64_t effective_limit_bytes = 0;          // min(total, cgroup limit)
  uint64_t reserve_bytes = 0;                  // kept free for the OS (--reserve, default 2 GiB)
  uint64_t usable_bytes = 0;      // usable_memory(*this, reserve): what the planner may fill
  double read_bandwidth_bps = 0;  // memory read bandwidth, all physical cores (B's probe)
  bool unified = false;           // GPU and CPU share this RAM (Apple-style rigs)
};

struct GpuProfile {
  std::string name;
  uint64_t total_bytes = 0;  // device memory (unified: the GPU working-set limit)
  uint64_t free_bytes = 0;
  double h2d_pinned_bps = 0;        // host-to-device copy from pinned memory
  double h2d_pageable_bps = 0;      // ... from ordinary (pageable) memory
  double memory_bandwidth_bps = 0;  // device memory read bandwidth (0: unknown)
};

// One sequential-read measurement: reads of block_bytes, queue_depth in flight.
struct SeqReadPoint {
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  double bps = 0;
};

struct RandomReadPoint {
  uint64_t block_bytes = 0;
  uint32_t queue_depth = 0;
  double iops = 0;
  double bps = 0;
};

struct StorageProfile {
  std::string path;         // directory or file the figures are for
  std::string mount_point;  // filesystem holding it ("/")
  std::string device;       // "/dev/vda", as mountinfo names it
  uint64_t device_id = 0;   // st_dev of the filesystem: identifies it on this boot
  std::string method;       // "scratch" (file written, read, deleted) or "file"
  uint64_t test_bytes = 0;  // size of the file read
  bool direct = false;      // measured with O_DIRECT (page cache bypassed)
  std::string engine;       // "io_uring" or "threads"
  std::vector<SeqReadPoint> sequential;
  std::vector<RandomReadPoint> random;
  double seq_read_bps = 0;        // best of the grid and a 1.5 s re-measure of its chosen point
  uint64_t best_block_bytes = 0;  // smallest (block, depth) within 5% of the best,
  uint32_t best_queue_depth = 0;  // the depth raised to keep kMinBytesInFlight queued

  // Streaming and loading keep at least this many bytes of reads queued, whatever depth
  // the grid's best point had: at depth 1 the device idles during every submission and
  // every page fault on a fresh destination (docs/STREAMING.md), and on a
  // noisy virtual disk a depth-1 point often wins the grid by chance.
  static constexpr uint64_t kMinBytesInFlight = 32ull << 20;
  // Raises best_queue_depth to kMinBytesInFlight / best_block_bytes.
  void apply_min_in_flight();

  // Best measured random-read figure for this block size (any depth <= queue_depth), or 0.
  double random_bps(uint64_t block_bytes, uint32_t max_queue_depth = 1024) const;
};

struct HardwareProfile {
  int schema_version = kProfileSchemaVersion;
  std::string timestamp;    // ISO 8601 UTC, when measured
  std::string fingerprint;  // machine identity (profiler.h: machine_fingerprint)
  std::string source;       // "measured", or the fixture's own description
  CpuProfile cpu;
  MemoryProfile memory;
  std::vector<GpuProfile> gpus;  // empty: no GPU tier
  StorageProfile storage;
};

// What Hypura may fill: min(total - reserve, cgroup limit). The reserve protects the rest
// of the machine (OS, other programs); a cgroup limit is already this process's own cap,
// so the reserve is not taken from it again (a 3 GiB cgroup gives 3 GiB, not 1 GiB).
uint64_t usable_memory(const MemoryProfile& memory, uint64_t reserve_bytes);

// JSON text <-> profile. Parsing checks types and required fields and names the field.
std::string profile_to_json(const HardwareProfile& profile);
Result<HardwareProfile> profile_from_json(const std::string& text);
Result<HardwareProfile> load_profile_file(const std::string& path);
Status save_profile_file(const HardwareProfile& profile, const std::string& path);

}  // namespace hypura::profiler
