#include "compute/decode_probe.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace hypura::compute {
namespace {

using Clock = std::chrono::steady_clock;

// Anonymous memory with huge pages where the kernel allows them (the ledger's resident
// allocations ask for the same), unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(uint64_t bytes) : bytes_(bytes) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    data_ = static_cast<uint8_t*>(p);
    madvise(p, bytes, MADV_HUGEPAGE);
  }
  ~Mapping() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* data() const { return data_; }

 private:
  uint64_t bytes_;
  uint8_t* data_ = nullptr;
};

}  // namespace

double decode_bytes_per_second(Context& ctx, gguf::GgmlType type, uint64_t bytes, double seconds) {
  if (!quant::is_supported(type)) return 0;
  const int64_t n_cols = kDecodeProbeCols;
  const uint64_t row = quant::row_size(type, n_cols);
  const int64_t n_rows = static_cast<int64_t>(std::max<uint64_t>(bytes / row, 1));
  Mapping weights(row * static_cast<uint64_t>(n_rows));
  if (weights.data() == nullptr) return 0;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_cols)), y(static_cast<size_t>(n_rows));
  for (float& v : x) v = normal(rng);
  // One quantized random row, repeated: the bytes are the kernels' real work, and filling
  // hundreds of MiB through the reference quantizer would take longer than the probe.
  quant::quantize_row_ref(type, x.data(), weights.data(), n_cols);
  for (int64_t r = 1; r < n_rows; ++r) std::memcpy(weights.data() + r * row, weights.data(), row);
  const WeightView w{weights.data(), type, n_cols, n_rows};
  ctx.matmul(w, x.data(), 1, y.data());  // warm: pages, activation scratch, the pool
  std::vector<double> rates;
  const auto t0 = Clock::now();
  do {
    const auto p0 = Clock::now();
    ctx.matmul(w, x.data(), 1, y.data());
    const double s = std::chrono::duration<double>(Clock::now() - p0).count();
    if (s > 0) rates.push_back(static_cast<double>(row * n_rows) / s);
  } while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds);
  // The median pass: decode runs for minutes, so its sustained rate is what a prediction
  // needs, not the best burst.
  std::nth_element(rates.begin(), rates.begin() + rates.size() / 2, rates.end());
  return rates.empty() ? 0 : rates[rates.size() / 2];
}

}  // namespace hypura::compute
