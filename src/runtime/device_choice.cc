#include "runtime/device_choice.h"

#include <algorithm>

#include "common/size.h"
#include "model/cuda_blocks.h"

#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#endif

namespace hypura::runtime {

Result<DeviceRequest> parse_device(std::string_view text) {
  if (text == "auto") return DeviceRequest::kAuto;
  if (text == "cpu") return DeviceRequest::kCpu;
  if (text == "cuda") return DeviceRequest::kCuda;
  return invalid_argument("--device '" + std::string(text) + "': expected auto, cpu or cuda");
}

const char* device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? "cuda" : "cpu";
}

uint64_t device_reserve_bytes(uint64_t total_bytes) {
  return std::max<uint64_t>(uint64_t{1} << 30, total_bytes / 20);
}

Result<DeviceChoice> decide_device(DeviceRequest request, const DeviceFacts& f) {
  DeviceChoice c;
  if (request == DeviceRequest::kCpu) {
    c.reason = "cpu (--device cpu)";
    return c;
  }
  const bool forced = request == DeviceRequest::kCuda;
  // The first condition that fails, as the CPU's reason (auto) or the error (cuda).
  const auto cpu_because = [&](StatusCode code, const std::string& why) -> Result<DeviceChoice> {
    if (forced) return Status(code, "--device cuda: " + why);
    c.reason = "cpu: " + why;
    return c;
  };
  if (!f.built_with_cuda)
    return cpu_because(StatusCode::kUnsupported, "this build has no CUDA backend");
  if (f.n_devices == 0) return cpu_because(StatusCode::kUnsupported, "no CUDA device");
  if (!f.model_supported.is_ok())
    return cpu_because(StatusCode::kUnsupported, f.model_supported.message());
  if (f.kv_f32)
    return cpu_because(StatusCode::kUnsupported,
                       "the GPU keeps its KV cache in F16 (--kv-type f32)");
  c.reserve_bytes = device_reserve_bytes(f.total_bytes);
  c.free_bytes = f.free_bytes;
  c.total_bytes = f.total_bytes;
  c.gpu_name = f.gpu_name;
  if (f.free_bytes <= c.reserve_bytes) {
    return cpu_because(StatusCode::kResourceExhausted,
                       f.gpu_name + " has " + format_size(f.free_bytes) + " free, within its " +
                           format_size(c.reserve_bytes) + " reserve");
  }
  c.gpu_bytes = f.free_bytes - c.reserve_bytes;
  if (f.vram_budget > 0) c.gpu_bytes = std::min(c.gpu_bytes, f.vram_budget);
  c.kind = DeviceKind::kCuda;
  c.reason =
      "cuda: " + format_size(c.gpu_bytes) + " of " + f.gpu_name + " (" + format_size(f.free_bytes) +
      " free less a " + format_size(c.reserve_bytes) + " reserve" +
      (f.vram_budget > 0 ? ", --vram-budget " + format_size(f.vram_budget) : std::string()) + ")";
  return c;
}

Result<DeviceChoice> device_from_profile(const profiler::HardwareProfile& profile,
                                         const gguf::GgufFile& file, const model::HParams& hp,
                                         uint64_t vram_budget) {
  if (profile.gpus.empty()) {
    DeviceChoice c;
    c.reason = "cpu: the profile lists no GPU";
    return c;
  }
  const profiler::GpuProfile& g = profile.gpus.front();
  DeviceFacts f;
  f.built_with_cuda = true;
  f.n_devices = static_cast<int>(profile.gpus.size());
  f.gpu_name = g.name;
  f.total_bytes = g.total_bytes;
  f.free_bytes = g.free_bytes > 0 ? g.free_bytes : g.total_bytes;
  f.model_supported = model::cuda_supports(hp, file);
  f.vram_budget = vram_budget;
  HYPURA_ASSIGN_OR_RETURN(DeviceChoice c, decide_device(DeviceRequest::kAuto, f));
  c.copy_bps = g.memory_bandwidth_bps;
  if (c.kind == DeviceKind::kCuda) c.reason += ", from the profile";
  return c;
}

Result<DeviceChoice> choose_device(DeviceRequest request, const gguf::GgufFile& file,
                                   const model::HParams& hp, bool kv_f32, uint64_t vram_budget) {
  DeviceFacts f;
  f.kv_f32 = kv_f32;
  f.vram_budget = vram_budget;
  if (request == DeviceRequest::kCpu) return decide_device(request, f);
#if HYPURA_HAVE_CUDA
  f.built_with_cuda = true;
  f.n_devices = compute::cuda::device_count();
  if (f.n_devices > 0) {
    HYPURA_ASSIGN_OR_RETURN(compute::cuda::DeviceInfo info, compute::cuda::device_info(0));
    f.gpu_name = info.name;
    f.free_bytes = info.free_bytes;
    f.total_bytes = info.total_bytes;
  }
#endif
  f.model_supported = model::cuda_supports(hp, file);
  HYPURA_ASSIGN_OR_RETURN(DeviceChoice c, decide_device(request, f));
#if HYPURA_HAVE_CUDA
  // The planner's GPU speed: a quick copy measurement (256 MiB, a few milliseconds).
  if (c.kind == DeviceKind::kCuda) {
    if (auto bps = compute::cuda::measure_copy_bandwidth(size_t{256} << 20, 3); bps.is_ok())
      c.copy_bps = *bps;
  }
#endif
  return c;
}

}  // namespace hypura::runtime
