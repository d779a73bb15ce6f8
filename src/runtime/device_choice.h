// Whether the GPU tier exists for a model: `--device auto|cpu|cuda` of run, bench and
// serve, decided before the planner places the weights, and how much device memory the
// planner may fill (the GPU tier, part 2: the planner then gives the GPU the output head
// and as many of the last layers as fit, the CPU the rest, scheduler::GpuSplit).
//
//   auto   the GPU tier when the build has CUDA, a device is present, the GPU kernels
//          handle the model (head sizes, weight types) and the KV cache is F16; its
//          budget is the device's free memory less a reserve, capped by --vram-budget;
//          else the CPU alone, with the reason
//   cpu    the CPU
//   cuda   as auto, or an error saying which condition failed (never a silent fallback)
//
// decide_device() is the pure rule over measured facts (testable without a GPU);
// choose_device() gathers the facts for a model and decides.
//
// Thread-safety: choose_device() queries the CUDA runtime; call from one thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "profiler/hardware_profile.h"

namespace hypura::runtime {

enum class DeviceRequest { kAuto, kCpu, kCuda };
enum class DeviceKind { kCpu, kCuda };

// "auto", "cpu" or "cuda"; anything else is kInvalidArgument naming the choices.
Result<DeviceRequest> parse_device(std::string_view text);
const char* device_kind_name(DeviceKind kind);  // "cpu", "cuda"

// What the decision needs to know.
struct DeviceFacts {
  bool built_with_cuda = false;
  int n_devices = 0;
  std::string gpu_name;
  uint64_t free_bytes = 0, total_bytes = 0;  // device 0
  Status model_supported;                    // cuda_supports(): the kernels handle the model
  bool kv_f32 = false;
  uint64_t vram_budget = 0;  // --vram-budget; 0: none
};

struct DeviceChoice {
  DeviceKind kind = DeviceKind::kCpu;  // kCuda: the GPU tier exists (the plan may still use none)
  std::string reason;                  // one line for the log and `inspect --plan`
  std::string gpu_name;
  uint64_t gpu_bytes = 0;      // what the planner may place on the GPU
  uint64_t reserve_bytes = 0;  // kept free on the device: CUDA context, cuBLAS, fragmentation
  uint64_t free_bytes = 0, total_bytes = 0;
  double copy_bps = 0;  // device-to-device copy bandwidth measured at the decision (0: none)
};

// Device memory left free: max(1 GiB, 5% of the device).
uint64_t device_reserve_bytes(uint64_t total_bytes);

// kCuda requested but impossible: kUnsupported or kResourceExhausted with the reason.
Result<DeviceChoice> decide_device(DeviceRequest request, const DeviceFacts& facts);

// The decision for the machine a hardware profile describes (`inspect --plan --profile
// FILE`): its first GPU, as if present, or the CPU when it lists none. Plans for another
// machine, e.g. a 24 GiB card, from one without a GPU.
Result<DeviceChoice> device_from_profile(const profiler::HardwareProfile& profile,
                                         const gguf::GgufFile& file, const model::HParams& hp,
                                         uint64_t vram_budget);

// The facts for this model and device 0, and the decision.
Result<DeviceChoice> choose_device(DeviceRequest request, const gguf::GgufFile& file,
                                   const model::HParams& hp, bool kv_f32, uint64_t vram_budget);

}  // namespace hypura::runtime
