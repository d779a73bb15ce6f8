// GPU probe: the CUDA driver library (libcuda.so.1) loaded with dlopen at run time, so the
// binary has no CUDA dependency and a machine without the driver simply has no GPU tier.
//
// For each device: name, memory total/free, host-to-device copy bandwidth from pinned and
// from pageable host memory, and device memory bandwidth (a device-to-device copy).
// Thread-safety: call from one thread; it creates and releases primary contexts.
#pragma once

#include <string>
#include <vector>

#include "profiler/hardware_profile.h"

namespace hypura::profiler {

struct GpuProbeResult {
  std::vector<GpuProfile> gpus;
  std::string note;  // why there is no GPU ("libcuda.so.1 not found"), or ""
};

// copy_bytes: size of each timed copy (the best of a few repetitions is kept).
GpuProbeResult probe_gpus(size_t copy_bytes = size_t{256} << 20);

}  // namespace hypura::profiler
