// System facts that need no benchmark: CPU model, cores and SIMD level; RAM size and the
// memory limit a container (cgroup v1 or v2) imposes on this process.
//
// The cgroup logic is split into a pure function over the text of /proc/self/cgroup and
// /proc/self/mountinfo plus a file reader, so tests cover v1, v2 and nested limits without
// a container. Thread-safety: free functions, no shared state.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "profiler/hardware_profile.h"

namespace hypura::profiler {

CpuProfile probe_cpu();

struct CgroupMemoryLimit {
  std::optional<uint64_t> limit_bytes;  // the tightest limit on this cgroup or an ancestor
  std::string version = "none";         // "v1", "v2" or "none"
};

// Reads a file's contents, or nullopt when it cannot be read.
using FileReader = std::function<std::optional<std::string>(const std::string& path)>;

// Finds this process's memory limit from /proc/self/cgroup and /proc/self/mountinfo
// contents, reading memory.limit_in_bytes (v1) or memory.max (v2) of its cgroup and every
// ancestor up to the mount point. "Unlimited" values (v1's near-2^63, v2's "max") are no
// limit. The v1 memory controller wins when both are mounted (it is the one enforced).
CgroupMemoryLimit find_cgroup_memory_limit(std::string_view proc_self_cgroup,
                                           std::string_view mountinfo, const FileReader& read);

// MemTotal/MemAvailable from /proc/meminfo and the cgroup limit of this process;
// effective = min(total, limit), usable = usable_memory(effective, reserve).
MemoryProfile probe_memory(uint64_t reserve_bytes);

std::optional<std::string> read_text_file(const std::string& path);

}  // namespace hypura::profiler
