// AtomicFile: writes a file so that readers, and the next start after a crash or a
// SIGKILL mid-write, see either the old contents or the new ones, never a torn mix.
//
// The bytes go to a temporary file beside the target (same directory, so the rename is
// atomic), named .<name>.tmp-<pid>-<n>; commit() flushes them to the device (fsync), renames
// the temporary over the target and syncs the directory so the rename itself survives a
// power loss. A writer destroyed without commit() (an error, an exception) removes its
// temporary; one killed leaves it behind, and the next AtomicFile for the same target
// removes the leftovers whose process is gone. A target that is a symbolic link is
// resolved first (the file it names is replaced, the link stays); one that exists and is
// not a regular file (/dev/null, a pipe) is written in place, having nothing to replace.
//
// Every file Hypura writes goes through here: the hardware profile, expert statistics,
// routing traces, --save-logits files, bench plots and `hypura synth` models.
//
// Thread-safety: one AtomicFile is used by one thread; any number may write the same
// target at once (each has its own temporary; the last commit wins).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hypura {

class AtomicFile {
 public:
  // Creates the temporary for `path` (the directory must exist).
  static Result<AtomicFile> create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temporary unless committed

  // Appends bytes; errors name the target.
  Status write(std::span<const uint8_t> bytes);
  Status write(std::string_view text);
  // Sets the size (extends with zeros), e.g. for a header-only model.
  Status truncate(uint64_t size);
  // fsync, rename over the target, fsync of the directory. Call at most once.
  Status commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }  // "" when written in place

 private:
  AtomicFile(std::string path, std::string temp, int fd)
      : path_(std::move(path)), temp_(std::move(temp)), fd_(fd) {}
  void abandon();

  std::string path_;
  std::string temp_;
  int fd_ = -1;
};

// The whole file at once: create, write, commit.
Status write_file_atomically(const std::string& path, std::string_view contents);

}  // namespace hypura
