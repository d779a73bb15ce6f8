// Measures CpuProfile::decode, the CPU's resident decode speed per weight type
// (compute/decode_probe.h), for the profile and for bench's same-run prediction.
//
// Thread-safety: one measurement at a time (it occupies every core).
#pragma once

#include <span>
#include <vector>

#include "gguf/gguf.h"
#include "profiler/hardware_profile.h"

namespace hypura::profiler {

// Matrices of this size for each probe: well beyond any last-level cache a core sees.
inline constexpr uint64_t kDecodeProbeBytes = uint64_t{512} << 20;
// Seconds each type's probe runs (the profile's and bench's).
inline constexpr double kDecodeProbeSeconds = 0.3;

// The shapes `hypura profile` measures: the common GGUF quantizations at the default width.
std::span<const DecodeShape> profiled_decode_shapes();

// The block formats and row widths of a model's matrices (every tensor of two or more
// dimensions that is not F32), ascending: the decode rates its prediction needs.
std::vector<DecodeShape> matrix_shapes(const gguf::GgufFile& file);

// Measures (in a child) the rates of `shapes` that p.cpu.decode lacks (or has without an
// overhead) and adds them; true when it added any.
bool add_missing_decode_rates(HardwareProfile& p, std::span<const DecodeShape> shapes);

// Each shape's rate on a fresh context of n_threads, for about seconds_each (types without
// CPU kernels are left out).
std::vector<DecodeRate> measure_decode_rates(std::span<const DecodeShape> shapes, int n_threads,
                                             double seconds_each);

// The same in a forked child process (in_child.h), so the probe matrices never count in
// this process's peak RSS: bench runs it beside a loaded engine. Empty when it failed.
std::vector<DecodeRate> measure_decode_rates_in_child(std::span<const DecodeShape> shapes,
                                                      int n_threads, double seconds_each);

}  // namespace hypura::profiler
