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

// The median seconds of one product with matrices of `rows` rows taken in turn from the
// buffer (every product reads from RAM: the buffer is far bigger than the caches), over
// about `seconds`.
double median_product_seconds(Context& ctx, const uint8_t* weights, gguf::GgmlType type,
                              int64_t n_cols, int64_t total_rows, int64_t rows, const float* x,
                              float* y, double seconds) {
  const uint64_t row = quant::row_size(type, n_cols);
  const int64_t n_matrices = std::max<int64_t>(total_rows / rows, 1);
  const auto view = [&](int64_t i) {
    return WeightView{weights + static_cast<uint64_t>(i % n_matrices * rows) * row, type, n_cols,
                      rows};
  };
  ctx.matmul(view(0), x, 1, y);  // warm: pages, activation scratch, the pool
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  std::vector<double> times;
  const auto t0 = Clock::now();
  for (int64_t i = 1; times.empty() || since(t0) < seconds; ++i) {
    const auto p0 = Clock::now();
    ctx.matmul(view(i), x, 1, y);
    times.push_back(since(p0));
  }
  // The median: decode runs for minutes, so its sustained cost is what a prediction
  // needs, not the best burst.
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

}  // namespace

DecodeCost measure_decode_cost(Context& ctx, gguf::GgmlType type, int64_t n_cols, uint64_t bytes,
                               double seconds) {
  if (n_cols <= 0) n_cols = kDecodeProbeCols;
  if (!quant::is_supported(type) || n_cols % quant::block_size(type) != 0) return {};
  const uint64_t row = quant::row_size(type, n_cols);
  const int64_t n_rows = static_cast<int64_t>(std::max<uint64_t>(bytes / row, 1));
  Mapping weights(row * static_cast<uint64_t>(n_rows));
  if (weights.data() == nullptr) return {};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n_cols));
  for (float& v : x) v = normal(rng);
  // One quantized random row, repeated: the bytes are the kernels' real work, and filling
  // hundreds of MiB through the reference quantizer would take longer than the probe.
  quant::quantize_row_ref(type, x.data(), weights.data(), n_cols);
  for (int64_t r = 1; r < n_rows; ++r) std::memcpy(weights.data() + r * row, weights.data(), row);
  const int64_t narrow = std::min(kDecodeProbeNarrowRows, n_rows);
  // Wide matrices grow with the threads, so each thread's share stays long enough to reach
  // its streaming rate: a short share per thread reads slower than the model's own products
  // (docs/BENCHMARKS.md, "Planner predictions").
  const int64_t wide_at_width =
      kDecodeProbeWideRows * kDecodeProbeCols / n_cols * std::max(1, ctx.n_threads() / 2);
  const int64_t wide = std::max(std::min(wide_at_width, n_rows / 2), narrow);
  std::vector<float> y(static_cast<size_t>(wide));
  const double t_wide = median_product_seconds(ctx, weights.data(), type, n_cols, n_rows, wide,
                                               x.data(), y.data(), seconds / 2);
  const double t_narrow = median_product_seconds(ctx, weights.data(), type, n_cols, n_rows, narrow,
                                                 x.data(), y.data(), seconds / 2);
  const double wide_bytes = static_cast<double>(row * static_cast<uint64_t>(wide));
  const double narrow_bytes = static_cast<double>(row * static_cast<uint64_t>(narrow));
  // A noisy pair (the narrow product no cheaper): the wide rate alone, no overhead.
  if (t_wide <= t_narrow || wide == narrow) return {wide_bytes / t_wide, 0};
  const double bps = (wide_bytes - narrow_bytes) / (t_wide - t_narrow);
  return {bps, std::max(0.0, t_narrow - narrow_bytes / bps)};
}

}  // namespace hypura::compute
