#include "profiler/decode_rates.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "compute/compute.h"
#include "compute/decode_probe.h"
#include "profiler/in_child.h"

namespace hypura::profiler {

std::span<const gguf::GgmlType> profiled_decode_types() {
  using gguf::GgmlType;
  static constexpr GgmlType kTypes[] = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                        GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                                        GgmlType::F16};
  return kTypes;
}

std::vector<gguf::GgmlType> matrix_types(const gguf::GgufFile& file) {
  std::vector<gguf::GgmlType> types;
  for (const auto& t : file.tensors()) {
    if (t.type != gguf::GgmlType::F32 && t.ne.size() >= 2) types.push_back(t.type);
  }
  std::sort(types.begin(), types.end());
  types.erase(std::unique(types.begin(), types.end()), types.end());
  return types;
}

bool add_missing_decode_rates(HardwareProfile& p, std::span<const gguf::GgmlType> types) {
  std::vector<gguf::GgmlType> missing;
  for (gguf::GgmlType t : types) {
    const auto same = std::find_if(p.cpu.decode.begin(), p.cpu.decode.end(),
                                   [&](const DecodeRate& r) { return r.type == t; });
    if (same == p.cpu.decode.end() || same->bps <= 0 || same->overhead_s < 0) missing.push_back(t);
  }
  if (missing.empty()) return false;
  const std::vector<DecodeRate> rates = measure_decode_rates_in_child(
      missing, std::max(1, p.cpu.physical_cores), kDecodeProbeSeconds);
  for (const DecodeRate& r : rates) p.cpu.set_decode(r);
  return !rates.empty();
}

std::vector<DecodeRate> measure_decode_rates(std::span<const gguf::GgmlType> types, int n_threads,
                                             double seconds_each) {
  compute::Context ctx(n_threads);
  std::vector<DecodeRate> out;
  for (gguf::GgmlType type : types) {
    const compute::DecodeCost cost =
        compute::measure_decode_cost(ctx, type, kDecodeProbeBytes, seconds_each);
    if (cost.bps > 0) out.push_back({type, cost.bps, cost.overhead_s});
  }
  return out;
}

static_assert(std::is_trivially_copyable_v<DecodeRate>, "sent through a pipe as raw bytes");

std::vector<DecodeRate> measure_decode_rates_in_child(std::span<const gguf::GgmlType> types,
                                                      int n_threads, double seconds_each) {
  const auto bytes = run_in_child([&] {
    const std::vector<DecodeRate> rates = measure_decode_rates(types, n_threads, seconds_each);
    return std::string(reinterpret_cast<const char*>(rates.data()),
                       rates.size() * sizeof(DecodeRate));
  });
  if (!bytes) return {};  // no child: better no figure than the probe's memory in our peak
  std::vector<DecodeRate> rates(bytes->size() / sizeof(DecodeRate));
  std::memcpy(rates.data(), bytes->data(), rates.size() * sizeof(DecodeRate));
  return rates;
}

}  // namespace hypura::profiler
