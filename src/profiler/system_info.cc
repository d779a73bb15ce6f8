#include "profiler/system_info.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

namespace hypura::profiler {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string_view::npos ? "" : std::string(s.substr(b, e - b + 1));
}

// Value of "key : value" lines in /proc/cpuinfo style text, first occurrence.
std::string field(const std::string& text, std::string_view key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key)
      return trim(line.substr(colon + 1));
  }
  return "";
}

int count_physical_cores(const std::string& cpuinfo) {
  std::set<std::pair<std::string, std::string>> cores;
  std::string phys, core;
  std::istringstream in(cpuinfo + "\n");
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    std::string key = colon == std::string::npos ? trim(line) : trim(line.substr(0, colon));
    std::string val = colon == std::string::npos ? "" : trim(line.substr(colon + 1));
    if (key == "physical id") phys = val;
    if (key == "core id") core = val;
    if (key.empty() && !core.empty()) {  // blank line ends one processor's block
      cores.insert({phys, core});
      phys.clear();
      core.clear();
    }
  }
  return static_cast<int>(cores.size());
}

// Parses a cgroup limit file; nullopt for "max", unreadable or near-2^63 ("unlimited").
std::optional<uint64_t> parse_limit(const std::optional<std::string>& text) {
  if (!text) return std::nullopt;
  std::string t = trim(*text);
  if (t.empty() || t == "max") return std::nullopt;
  try {
    uint64_t v = std::stoull(t);
    if (v >= (uint64_t{1} << 62)) return std::nullopt;
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// Tightest limit in `file` from dir up to (and including) mount.
std::optional<uint64_t> walk_limits(std::string dir, const std::string& mount,
                                    const std::string& file, const FileReader& read) {
  std::optional<uint64_t> best;
  for (;;) {
    auto v = parse_limit(read(dir + "/" + file));
    if (v && (!best || *v < *best)) best = v;
    if (dir.size() <= mount.size()) break;
    dir = dir.substr(0, dir.rfind('/'));
  }
  return best;
}

struct Mount {
  std::string root, point;
};

}  // namespace

CpuProfile probe_cpu() {
  CpuProfile c;
  std::string cpuinfo = read_text_file("/proc/cpuinfo").value_or("");
  c.model = field(cpuinfo, "model name");
  c.logical_cores = static_cast<int>(std::thread::hardware_concurrency());
  c.physical_cores = count_physical_cores(cpuinfo);
  if (c.physical_cores == 0) c.physical_cores = c.logical_cores;
  __builtin_cpu_init();
  struct Feature {
    const char* name;
    bool present;
  };
  const Feature features[] = {
      {"sse4.2", static_cast<bool>(__builtin_cpu_supports("sse4.2"))},
      {"avx", static_cast<bool>(__builtin_cpu_supports("avx"))},
      {"avx2", static_cast<bool>(__builtin_cpu_supports("avx2"))},
      {"fma", static_cast<bool>(__builtin_cpu_supports("fma"))},
      {"f16c", field(cpuinfo, "flags").find("f16c") != std::string::npos},
      {"avx512f", static_cast<bool>(__builtin_cpu_supports("avx512f"))},
      {"avx512bw", static_cast<bool>(__builtin_cpu_supports("avx512bw"))},
      {"avx512vl", static_cast<bool>(__builtin_cpu_supports("avx512vl"))},
      {"avx512vnni", static_cast<bool>(__builtin_cpu_supports("avx512vnni"))},
      {"avx512bf16", field(cpuinfo, "flags").find("avx512_bf16") != std::string::npos},
      {"amx", field(cpuinfo, "flags").find("amx_tile") != std::string::npos},
  };
  for (const auto& f : features) {
    if (f.present) c.flags.push_back(f.name);
  }
  auto has = [&](const char* n) {
    return std::find(c.flags.begin(), c.flags.end(), n) != c.flags.end();
  };
  // The kernels' level (compute/cpu/dispatch.cc) needs the kernel's grant of the AMX tile
  // state too; the flag alone is what a VM that hides AMX would not show.
  c.simd = has("amx") && has("avx512vnni") && has("avx512bw") ? "amx"
           : has("avx512vnni") && has("avx512bw")             ? "avx512vnni"
           : has("avx512f") && has("avx512bw")                ? "avx512"
           : has("avx2") && has("fma")                        ? "avx2"
                                                              : "scalar";
  return c;
}

CgroupMemoryLimit find_cgroup_memory_limit(std::string_view proc_self_cgroup,
                                           std::string_view mountinfo, const FileReader& read) {
  std::optional<Mount> v1, v2;
  for (std::string_view line : split(mountinfo, '\n')) {
    auto f = split(line, ' ');
    // "id parent maj:min root mount_point options [optional...] - fstype source super"
    size_t dash = static_cast<size_t>(std::find(f.begin(), f.end(), "-") - f.begin());
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    std::string_view fstype = f[dash + 1];
    std::string_view super = dash + 3 < f.size() ? f[dash + 3] : "";
    Mount m{std::string(f[3]), std::string(f[4])};
    if (fstype == "cgroup2") v2 = m;
    if (fstype == "cgroup") {
      for (auto opt : split(super, ',')) {
        if (opt == "memory") v1 = m;
      }
    }
  }
  std::optional<std::string> path_v1, path_v2;
  for (std::string_view line : split(proc_self_cgroup, '\n')) {
    auto f = split(line, ':');
    if (f.size() < 3) continue;
    std::string path(line.substr(f[0].size() + f[1].size() + 2));
    if (f[0] == "0" && f[1].empty()) path_v2 = path;
    for (auto c : split(f[1], ',')) {
      if (c == "memory") path_v1 = path;
    }
  }
  // The cgroup path is relative to the hierarchy root; the mount shows hierarchy `root`.
  auto dir_of = [](const Mount& m, const std::string& path) {
    std::string rel = path;
    if (m.root != "/" && rel.rfind(m.root, 0) == 0) rel = rel.substr(m.root.size());
    if (rel == "/") rel.clear();
    return m.point + rel;
  };
  CgroupMemoryLimit out;
  if (v1 && path_v1) {
    out.version = "v1";
    out.limit_bytes = walk_limits(dir_of(*v1, *path_v1), v1->point, "memory.limit_in_bytes", read);
  } else if (v2 && path_v2) {
    out.version = "v2";
    out.limit_bytes = walk_limits(dir_of(*v2, *path_v2), v2->point, "memory.max", read);
  }
  return out;
}

MemoryProfile probe_memory(uint64_t reserve_bytes) {
  MemoryProfile m;
  std::string meminfo = read_text_file("/proc/meminfo").value_or("");
  auto kib = [&](const char* key) {
    std::string v = field(meminfo, key);  // "23000000 kB"
    return v.empty() ? uint64_t{0} : std::stoull(v) * 1024;
  };
  m.total_bytes = kib("MemTotal");
  m.available_bytes = kib("MemAvailable");
  CgroupMemoryLimit cg =
      find_cgroup_memory_limit(read_text_file("/proc/self/cgroup").value_or(""),
                               read_text_file("/proc/self/mountinfo").value_or(""), read_text_file);
  m.cgroup_version = cg.version;
  m.cgroup_limit_bytes = cg.limit_bytes;
  m.effective_limit_bytes = std::min(m.total_bytes, cg.limit_bytes.value_or(m.total_bytes));
  m.reserve_bytes = reserve_bytes;
  m.usable_bytes = usable_memory(m, reserve_bytes);
  return m;
}

std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace hypura::profiler
