// Where a model computes: `--device auto|cpu|cuda` of run, bench and serve, decided before
// the planner places the weights (part 1 of the GPU tier: a model runs on the GPU only
// when all of it fits there).
//
//   auto   the GPU when the build has CUDA, a device is present, the GPU kernels handle the
//          model (head sizes, weight types), the KV cache is F16, and the weights + KV
//          cache + work buffers fit in the device's free memory less a reserve; else the
//          CPU, with the reason
//   cpu    the CPU
//   cuda   the GPU, or an error saying which condition failed (never a silent fallback)
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
  uint64_t weight_bytes = 0, kv_bytes = 0, work_bytes = 0;
};

struct DeviceChoice {
  DeviceKind kind = DeviceKind::kCpu;
  std::string reason;  // one line for the log and `inspect --plan`
  uint64_t need_bytes = 0;     // weights + KV + work (0 when no GPU was considered)
  uint64_t reserve_bytes = 0;  // kept free on the device: CUDA context, cuBLAS, fragmentation
  uint64_t free_bytes = 0;
};

// Device memory left free: max(1 GiB, 5% of the device).
uint64_t device_reserve_bytes(uint64_t total_bytes);

// kCuda requested but impossible: kUnsupported or kResourceExhausted with the reason.
Result<DeviceChoice> decide_device(DeviceRequest request, const DeviceFacts& facts);

// The facts for this model (weight bytes from the file, KV for n_ctx, the GPU blocks'
// buffers for max_batch) and the decision.
Result<DeviceChoice> choose_device(DeviceRequest request, const gguf::GgufFile& file,
                                   const model::HParams& hp, int64_t n_ctx, bool kv_f32,
                                   int64_t max_batch);

}  // namespace hypura::runtime
