// Runs a measurement in a forked child process, so the memory it touches never counts in
// this process's peak RSS (VmHWM): bench compares that peak with --ram-budget, and its
// references (the memory-bandwidth probe's 1 GiB buffer, the disk grid's read buffers of
// up to 2 x 128 MiB) are not the engine's memory.
//
// The child runs `fn`, writes the bytes it returns to a pipe and leaves with _exit (no
// atexit handlers, no destructors of the parent's objects). After fork the child holds
// only the calling thread: `fn` must not wait on other threads of the parent or on locks
// they may hold (malloc is fork-safe in glibc; avoid logging). Returns the bytes (empty
// when the child failed), or nullopt when no child could be started (pipe or fork failed).
//
// Thread-safety: one call at a time per process is the intended use; nothing shared.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace hypura::profiler {

std::optional<std::string> run_in_child(const std::function<std::string()>& fn);

// Whether a child that touches `bytes` fits under this process's memory cgroup limit beside
// what this process holds (twice the bytes of room): a full cgroup's OOM killer takes its
// largest process, which is this one once it holds more than the child (a server planning
// again beside its loaded weights). When not, says so in the log, naming `what`.
bool child_fits(uint64_t bytes, const char* what);

}  // namespace hypura::profiler
