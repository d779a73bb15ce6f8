// A handshake between a stream and a host thread that polls, through a flag pair in mapped
// page-locked memory: the stream raises `ready` (signal_host), then a one-thread kernel
// polls host memory (wait_for_host) until the host thread, which polled `ready` and did its
// part, has copied `ready` to `done`. Both launches are ordinary kernels, so a CUDA graph
// replays the handshake; unlike a host node (cudaLaunchHostFunc) nothing passes through the
// driver's callback thread, whose wake-ups cost tens of microseconds each.
//
// The host side (HostFlag::wait_ready / set_done) needs no CUDA headers. A kernel that
// polls longer than kHostWaitTimeoutNs gives up and sets timed_out, so a host thread that
// failed never leaves the device spinning forever.
//
// Thread-safety: one host thread serves a flag; the flag's memory must outlive the work.
#pragma once

#include <cstdint>

#include "compute/cuda/device.h"

namespace hypura::compute::cuda {

inline constexpr uint64_t kHostWaitTimeoutNs = uint64_t{30} * 1000 * 1000 * 1000;

// One handshake's counters, zeroed before first use; each round raises both by one.
struct HostFlag {
  uint32_t ready = 0;      // raised by the stream
  uint32_t done = 0;       // copied from ready by the host when its part is done
  uint32_t timed_out = 0;  // set by a device wait that gave up
  uint32_t pad = 0;

  // Polls until ready == want or `timeout_s` passes (false then).
  bool wait_ready(uint32_t want, double timeout_s) const;
  void set_done(uint32_t value);
};

// flag: the device's address of a HostFlag (mapped_device_pointer). Queued on `stream`.
void signal_host(HostFlag* flag, StreamHandle stream);
void wait_for_host(HostFlag* flag, StreamHandle stream);

}  // namespace hypura::compute::cuda
