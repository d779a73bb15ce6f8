// The hardware profile as the rest of Hypura gets it: measured once, cached as JSON in
// the user's cache directory, reused until the machine changes.
//
//   run/bench/serve/inspect:  profiler::load_or_measure(options)   (--profile FILE wins)
//   hypura profile:           the same, with refresh = true when --refresh is given
//
// A cached profile is reused when its fingerprint (CPU model and cores, RAM size, cgroup
// limit, GPUs) matches this machine and its storage figures are for the filesystem that
// holds the model; otherwise the missing parts are measured again and the cache rewritten.
// Progress goes to stderr. Whole measurement: about 15 s (1 GiB scratch file).
//
// Thread-safety: one call at a time per process (the cache file is rewritten atomically).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "gguf/gguf.h"
#include "profiler/hardware_profile.h"

namespace hypura::profiler {

inline constexpr uint64_t kDefaultReserveBytes = uint64_t{2} << 30;

struct ProfileOptions {
  std::string profile_file;               // --profile FILE: use this profile, measure nothing
  bool refresh = false;                   // measure everything again
  std::optional<uint64_t> reserve_bytes;  // --reserve; default 2 GiB (a fixture's own wins)
  std::string storage_dir;                // filesystem to measure (default: the model's, else ".")
  std::string storage_file;  // measure read-only on this file instead of a scratch file
  std::string model_path;    // the model that will run: its filesystem is measured
  std::vector<DecodeShape> decode_shapes;  // its matrices' shapes: decode rates added if missing
  std::string cache_path;                  // default: default_cache_path()
  uint64_t scratch_bytes = uint64_t{1} << 30;
  bool progress = true;  // progress bar on stderr
};

// profile.json in cache_dir() (common/cache_dir.h): $XDG_CACHE_HOME/hypura, else
// ~/.cache/hypura, else a private /tmp/hypura-<uid>. "" (and a warning) when no safe
// directory exists: profiles are then measured but not cached.
std::string default_cache_path();

// Hash of the machine's identity (not of the measured speeds): CPU model, core counts,
// RAM total (in 256 MiB steps), cgroup limit, GPU names and memory. Hex string.
std::string machine_fingerprint(const HardwareProfile& profile);

// Measures everything now (no cache involved).
Result<HardwareProfile> measure_profile(const ProfileOptions& options);

// The profile to plan with: --profile FILE, else the cache when it fits this machine and
// the model's filesystem, else a fresh measurement (saved to the cache).
Result<HardwareProfile> load_or_measure(const ProfileOptions& options);

// The profile for a model that fits in RAM with room to spare, whose plan no storage
// figure can change: the full cache when it fits this machine, else the quick cache
// (quick_cache_path()) when it does, else system facts, a memory-bandwidth probe and a
// nominal storage figure, measured once and kept in the quick cache. Either way with the
// decode rates of `shapes` (a resident prediction rests on them): the missing ones are
// measured (about 0.3 s each) and the cache rewritten. RAM figures are always fresh.
HardwareProfile load_or_quick_measure(uint64_t reserve_bytes, std::span<const DecodeShape> shapes);

// quick-profile.json beside default_cache_path() ("" when there is no cache).
std::string quick_cache_path();

// A one-screen text summary (what `hypura profile` prints without --json).
std::string profile_to_text(const HardwareProfile& profile);

}  // namespace hypura::profiler
