// child_fits (in_child.h): kept apart from run_in_child, which the kernel benchmark
// compiles alone, because it reads the cgroup limit through system_info.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <fstream>

#include "common/size.h"
#include "profiler/in_child.h"
#include "profiler/system_info.h"

namespace hypura::profiler {
namespace {

uint64_t resident_bytes_of_this_process() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace

bool child_fits(uint64_t bytes, const char* what) {
  const MemoryProfile m = probe_memory(0);
  if (!m.cgroup_limit_bytes) return true;
  const uint64_t limit = *m.cgroup_limit_bytes, held = resident_bytes_of_this_process();
  if (held < limit && limit - held >= 2 * bytes) return true;
  spdlog::info(
      "{} skipped: its {} do not fit twice beside this process's {} under the cgroup {} "
      "memory limit of {} (planning without the figure)",
      what, format_size(bytes), format_size(held), m.cgroup_version, format_size(limit));
  return false;
}

}  // namespace hypura::profiler
