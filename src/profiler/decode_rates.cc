#include "profiler/decode_rates.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "compute/compute.h"
#include "compute/decode_probe.h"
#include "profiler/in_child.h"

namespace hypura::profiler {

static_assert(kDefaultDecodeCols == compute::kDecodeProbeCols, "one default probe width");

std::span<const DecodeShape> profiled_decode_shapes() {
  using gguf::GgmlType;
  static constexpr DecodeShape kShapes[] = {{GgmlType::Q4_K}, {GgmlType::Q5_K}, {GgmlType::Q6_K},
                                            {GgmlType::Q8_0}, {GgmlType::Q4_0}, {GgmlType::Q4_1},
                                            {GgmlType::F16},  {GgmlType::MXFP4}};
  return kShapes;
}

std::vector<DecodeShape> matrix_shapes(const gguf::GgufFile& file) {
  std::vector<DecodeShape> shapes;
  for (const auto& t : file.tensors()) {
    if (t.type != gguf::GgmlType::F32 && t.ne.size() >= 2)
      shapes.push_back({t.type, static_cast<int64_t>(t.ne[0])});
  }
  const auto key = [](const DecodeShape& s) { return std::pair(s.type, s.n_cols); };
  std::sort(shapes.begin(), shapes.end(),
            [&](const DecodeShape& a, const DecodeShape& b) { return key(a) < key(b); });
  shapes.erase(
      std::unique(shapes.begin(), shapes.end(),
                  [&](const DecodeShape& a, const DecodeShape& b) { return key(a) == key(b); }),
      shapes.end());
  return shapes;
}

bool add_missing_decode_rates(HardwareProfile& p, std::span<const DecodeShape> shapes) {
  std::vector<DecodeShape> missing;
  for (const DecodeShape& s : shapes) {
    const DecodeRate* same = p.cpu.measured(s);
    if (same == nullptr || same->bps <= 0 || same->overhead_s < 0) missing.push_back(s);
  }
  if (missing.empty()) return false;
  const std::vector<DecodeRate> rates = measure_decode_rates_in_child(
      missing, std::max(1, p.cpu.physical_cores), kDecodeProbeSeconds);
  for (const DecodeRate& r : rates) p.cpu.set_decode(r);
  return !rates.empty();
}

std::vector<DecodeRate> measure_decode_rates(std::span<const DecodeShape> shapes, int n_threads,
                                             double seconds_each) {
  compute::Context ctx(n_threads);
  std::vector<DecodeRate> out;
  for (const DecodeShape& s : shapes) {
    const compute::DecodeCost cost =
        compute::measure_decode_cost(ctx, s.type, s.n_cols, kDecodeProbeBytes, seconds_each);
    if (cost.bps > 0) out.push_back({s.type, cost.bps, cost.overhead_s, s.n_cols});
  }
  return out;
}

static_assert(std::is_trivially_copyable_v<DecodeRate>, "sent through a pipe as raw bytes");

std::vector<DecodeRate> measure_decode_rates_in_child(std::span<const DecodeShape> shapes,
                                                      int n_threads, double seconds_each) {
  if (!child_fits(kDecodeProbeBytes, "the decode-rate probe")) return {};
  const auto bytes = run_in_child([&] {
    const std::vector<DecodeRate> rates = measure_decode_rates(shapes, n_threads, seconds_each);
    return std::string(reinterpret_cast<const char*>(rates.data()),
                       rates.size() * sizeof(DecodeRate));
  });
  if (!bytes) return {};  // no child: better no figure than the probe's memory in our peak
  std::vector<DecodeRate> rates(bytes->size() / sizeof(DecodeRate));
  std::memcpy(rates.data(), bytes->data(), rates.size() * sizeof(DecodeRate));
  return rates;
}

}  // namespace hypura::profiler
