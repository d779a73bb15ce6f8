#include "profiler/in_child.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "common/size.h"
#include "profiler/system_info.h"

namespace hypura::profiler {

std::optional<std::string> run_in_child(const std::function<std::string()>& fn) {
  int fds[2];
  if (::pipe(fds) != 0) return std::nullopt;
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return std::nullopt;
  }
  if (pid == 0) {  // the child: measure, write the result, leave without running atexit
    ::close(fds[0]);
    const std::string out = fn();
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ::_exit(1);
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::string();
  return out;
}

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
