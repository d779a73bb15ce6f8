#include "common/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace hypura {
namespace {

namespace fs = std::filesystem;

std::string errno_text(const std::string& what, const std::string& path, int err) {
  return what + " '" + path + "': " + std::strerror(err);
}

// "<dir>/.<name>.tmp-" for target <dir>/<name>.
std::string temp_prefix(const fs::path& target) {
  return (target.parent_path() / ("." + target.filename().string() + ".tmp-")).string();
}

// The pid in a leftover's name "<prefix><pid>-<n>", or 0 when the name is not one of ours.
pid_t leftover_pid(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix)) return 0;
  name.remove_prefix(prefix.size());
  pid_t pid = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (ec != std::errc() || end == name.data() + name.size() || *end != '-') return 0;
  return pid;
}

// Removes the temporaries of `target` whose writer no longer runs (killed mid-write).
void remove_leftovers(const fs::path& target) {
  const std::string prefix = temp_prefix(target);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = (target.parent_path() / e.path().filename()).string();
    const pid_t pid = leftover_pid(name, prefix);
    if (pid > 0 && pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH)
      fs::remove(e.path(), ec);
  }
}

// fsync of the directory holding `path`, so a rename into it survives a power loss.
Status sync_directory(const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return io_error(errno_text("cannot open directory", dir.string(), errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some filesystems (and tmpfs) refuse fsync on directories; the rename is still atomic.
  if (rc != 0 && err != EINVAL && err != EROFS)
    return io_error(errno_text("cannot sync directory", dir.string(), err));
  return Status::ok();
}

}  // namespace

Result<AtomicFile> AtomicFile::create(const std::string& given) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  const fs::file_status st = fs::status(given, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {  // a device or a pipe: in place
    const int fd = ::open(given.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return io_error(errno_text("cannot open", given, errno));
    return AtomicFile(given, "", fd);
  }
  std::string path = given;
  if (fs::exists(st)) {
    path = fs::canonical(given, ec).string();
    if (ec) return io_error("cannot resolve '" + given + "': " + ec.message());
  }
  remove_leftovers(fs::path(path));
  const std::string prefix = temp_prefix(fs::path(path)) + std::to_string(::getpid()) + "-";
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string temp = prefix + std::to_string(counter.fetch_add(1));
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return AtomicFile(path, std::move(temp), fd);
    if (errno != EEXIST) return io_error(errno_text("cannot write", path, errno));
  }
  return io_error("cannot create a temporary file for '" + path + "'");
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)), temp_(std::move(other.temp_)), fd_(other.fd_) {
  other.fd_ = -1;
  other.temp_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abandon();
    path_ = std::move(other.path_);
    temp_ = std::move(other.temp_);
    fd_ = other.fd_;
    other.fd_ = -1;
    other.temp_.clear();
  }
  return *this;
}

AtomicFile::~AtomicFile() {
  abandon();
}

void AtomicFile::abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

Status AtomicFile::write(std::span<const uint8_t> bytes) {
  if (fd_ < 0) return io_error("write to '" + path_ + "' after commit");
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(errno_text("cannot write", path_, errno));
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::ok();
}

Status AtomicFile::write(std::string_view text) {
  return write(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

Status AtomicFile::truncate(uint64_t size) {
  if (temp_.empty()) return Status::ok();  // a device or a pipe has no size to set
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0)
    return io_error(errno_text("cannot set the size of", path_, errno));
  return Status::ok();
}

Status AtomicFile::commit() {
  if (fd_ < 0) return io_error("'" + path_ + "' committed twice");
  const bool in_place = temp_.empty();
  if (!in_place && ::fsync(fd_) != 0) return io_error(errno_text("cannot sync", path_, errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) return io_error(errno_text("cannot close", path_, errno));
  if (in_place) return Status::ok();
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    return io_error(errno_text("cannot rename " + temp_ + " to", path_, errno));
  temp_.clear();
  return sync_directory(fs::path(path_));
}

Status write_file_atomically(const std::string& path, std::string_view contents) {
  HYPURA_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  HYPURA_RETURN_IF_ERROR(file.write(contents));
  return file.commit();
}

}  // namespace hypura
