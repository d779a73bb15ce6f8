#include "common/cache_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace hypura {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// $TMPDIR/hypura-<uid>, made 0700 here or verified to be a private directory of ours.
Result<std::string> private_temp_dir() {
  const std::string base = env("TMPDIR") ? env("TMPDIR") : "/tmp";
  const std::string dir = base + "/hypura-" + std::to_string(::geteuid());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return io_error("cannot create cache directory " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    return io_error("cannot stat " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0) {
    return io_error(dir +
                    " is not a private directory of this user (a link, another owner, or "
                    "group/other access): not using it as the cache; set XDG_CACHE_HOME");
  }
  return dir;
}

}  // namespace

Result<std::string> cache_dir() {
  if (const char* xdg = env("XDG_CACHE_HOME"))
    return (std::filesystem::path(xdg) / "hypura").string();
  if (const char* home = env("HOME"))
    return (std::filesystem::path(home) / ".cache" / "hypura").string();
  return private_temp_dir();
}

}  // namespace hypura
