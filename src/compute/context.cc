// Context: the thread pool, the kernel table and the activation scratch behind matmul().
//
// matmul(W, x) in two parallel steps:
//   1. quantize each token row of x to the weight type's activation format (scratch);
//   2. cut W's rows and the tokens into items that the threads claim dynamically
//      (ItemGrid): a decode step's rows in blocks of kRowBlock, each run by the tile kernel
//      against every token, so a block of weights is read from memory once per batch and
//      then reused from cache; a prompt's blocks of kTokBlock tokens against as many rows as
//      fit half of L2, so a kernel's per-call preparation of its tokens serves many rows.
// Neither step changes the order in which an output element is reduced, which is what
// makes results independent of n_tokens and of the thread count.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "compute/compute.h"
#include "compute/cpu/kernels.h"
#include "compute/cpu/thread_pool.h"
#include "compute/op_profile.h"
#include "quant/quant.h"

namespace hypura::compute {
namespace {

constexpr int64_t kRowBlock = 64;  // weight rows per cache block (a few hundred KiB at most)
constexpr int64_t kTokBlock = 64;  // activation rows per tile call
constexpr int64_t kRowAlign = 16;  // work items start on multiples of this

// Work items of a product per pool thread: more items shorten the wait for the last one;
// each claim is one atomic operation (more items per thread measured no better,
// docs/BENCHMARKS.md, "CPU kernels").
constexpr int64_t kItemsPerThread = 4;

// Rows per work item when n_rows rows are shared among the pool: kRowAlign multiples,
// about kItemsPerThread items per thread.
int64_t rows_per_item(int64_t n_rows, int n_threads) {
  const int64_t n_share = kItemsPerThread * n_threads;
  return std::max<int64_t>(kRowAlign, (n_rows + n_share - 1) / n_share / kRowAlign * kRowAlign);
}

// Weight bytes of one prompt work item: half of a core's L2, so that the thread's next item
// (the same rows, the next tokens) finds them there.
size_t item_weight_bytes() {
  static const size_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? static_cast<size_t>(l2) / 2 : size_t{1} << 20;
  }();
  return bytes;
}

// A product's work items: `rows`-row ranges by blocks of kTokBlock tokens, token blocks
// innermost. Prompts (several token blocks) take ranges as wide as item_weight_bytes()
// allows, each item one tile call: a kernel prepares its tokens once per call, so wide
// calls spread that over many row tiles (docs/BENCHMARKS.md, "CPU kernels"). A decode
// step's tokens are one block, and its items take rows_per_item(share_rows) rows (a grouped
// product shares all its groups' rows).
struct ItemGrid {
  int64_t rows = 0, n_ranges = 0, n_tok_blocks = 0;

  ItemGrid(int64_t n_rows, size_t w_stride, int64_t n_tokens, int n_threads, int64_t share_rows)
      : n_tok_blocks((n_tokens + kTokBlock - 1) / kTokBlock) {
    if (n_tok_blocks <= 1) {
      rows = std::min(n_rows, rows_per_item(share_rows, n_threads));
    } else {
      const int64_t fit = static_cast<int64_t>(item_weight_bytes() / w_stride);
      rows = std::max<int64_t>(kRowAlign, fit / kRowAlign * kRowAlign);
      // Enough items for every thread: narrower ranges when the token blocks are few.
      const int64_t want_ranges = (kItemsPerThread * n_threads + n_tok_blocks - 1) / n_tok_blocks;
      rows = std::min(rows, std::max<int64_t>(kRowAlign, (n_rows + want_ranges - 1) / want_ranges /
                                                             kRowAlign * kRowAlign));
    }
    n_ranges = (n_rows + rows - 1) / rows;
  }
  int64_t count() const { return n_ranges * n_tok_blocks; }

  // Item i's tile calls, as call(first row, rows, first token, tokens).
  template <class Call>
  void run(int64_t i, int64_t n_rows, int64_t n_tokens, Call&& call) const {
    const int64_t r_begin = i / n_tok_blocks * rows, r_end = std::min(n_rows, r_begin + rows);
    const int64_t t0 = i % n_tok_blocks * kTokBlock;
    const int nt = static_cast<int>(std::min(kTokBlock, n_tokens - t0));
    if (n_tok_blocks > 1) {
      call(r_begin, static_cast<int>(r_end - r_begin), t0, nt);
      return;
    }
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowBlock) {
      call(r0, static_cast<int>(std::min(kRowBlock, r_end - r0)), t0, nt);
    }
  }
};

// Rows quantized on the calling thread when the whole input has at most this many floats:
// a decode step's few short rows cost less than waking the pool.
constexpr int64_t kInlineQuantizeFloats = 8192;

// Quantizes n_rows rows of n_cols floats (row i at src(i)) into `act`, `stride` bytes
// apart, in act_type with the kernels' own quantizer `own` when they have one.
template <class Src>
void quantize_rows(ThreadPool& pool, gguf::GgmlType act_type, QuantizeActFn own, Src src,
                   int64_t n_rows, int64_t n_cols, uint8_t* act, size_t stride) {
  auto one = [&](int64_t i) {
    if (own) {
      own(src(i), act + i * stride, n_cols);
    } else {
      quant::quantize_activations(act_type, src(i), act + i * stride, n_cols);
    }
  };
  if (n_rows * n_cols <= kInlineQuantizeFloats) {
    for (int64_t i = 0; i < n_rows; ++i) one(i);
    return;
  }
  pool.parallel_for(n_rows, one);
}

// Rows of a row-major (n_rows, n_cols) matrix, for quantize_rows.
auto dense_rows(const float* x, int64_t n_cols) {
  return [x, n_cols](int64_t i) { return x + i * n_cols; };
}

SimdLevel level_from_name(std::string_view name) {
  for (int l = kSimdLevels - 1; l >= 0; --l) {
    const auto level = static_cast<SimdLevel>(l);
    if (name == simd_level_name(level)) {
      while (!cpu_supports(static_cast<SimdLevel>(l))) --l;
      return static_cast<SimdLevel>(l);
    }
  }
  return default_simd_level();
}

}  // namespace

const char* default_simd_name() {
  return simd_level_name(default_simd_level());
}

struct Context::Impl {
  explicit Impl(int n_threads, SimdLevel level) : pool(n_threads), kernels(kernel_table(level)) {}

  ThreadPool pool;
  const KernelTable* kernels;
  std::vector<uint8_t> act;  // (n_tokens, activation row bytes): quantized x rows
  std::vector<float> row;    // (max_cols): one dequantized row for get_rows fallbacks
  // matmul + attention multiply-accumulates so far; pool threads add theirs at once.
  mutable std::atomic<uint64_t> macs{0};
  OpProfile* profile = nullptr;  // set_op_profile(); null: off

  // Counts a product's multiply-accumulates, and times it while profiling.
  OpProfile::Scope product(const OpKey& key, double n_macs) {
    macs.fetch_add(static_cast<uint64_t>(n_macs), std::memory_order_relaxed);
    return {profile, key, n_macs};
  }

  void ensure_act(size_t bytes) {
    if (act.size() < bytes) act.resize(bytes);  // only when reserve() was too small
  }
};

Context::Context(int n_threads) : impl_(std::make_unique<Impl>(n_threads, default_simd_level())) {}

Context::Context(int n_threads, std::string_view simd)
    : impl_(std::make_unique<Impl>(n_threads,
                                   simd.empty() ? default_simd_level() : level_from_name(simd))) {}

Context::~Context() = default;

int Context::n_threads() const {
  return impl_->pool.size();
}
ThreadPool& Context::pool() {
  return impl_->pool;
}
const char* Context::simd_name() const {
  return impl_->kernels->name;
}

size_t Context::scratch_bytes() const {
  return impl_->act.size();
}

void Context::reserve(int64_t max_tokens, int64_t max_cols) {
  // The widest activation row: Q8_K (292 bytes / 256) or Q8_1 (36 bytes / 32), whichever
  // is larger for this width; F32 activations are used in place.
  const int64_t q8k = (max_cols + 255) / 256 * static_cast<int64_t>(sizeof(quant::BlockQ8_K));
  const int64_t q81 = (max_cols + 31) / 32 * static_cast<int64_t>(sizeof(quant::BlockQ8_1));
  // matmul_shared's small batches keep up to kMaxSharedProducts quantized copies of x.
  const int64_t rows =
      std::max(max_tokens, kMaxSharedProducts * std::min(max_tokens, kSharedMaxTokens));
  impl_->ensure_act(static_cast<size_t>(rows * std::max(q8k, q81)));
}

uint64_t Context::macs() const {
  return impl_->macs.load(std::memory_order_relaxed);
}

void Context::set_op_profile(OpProfile* profile) {
  impl_->profile = profile;
}
OpProfile* Context::op_profile() const {
  return impl_->profile;
}

uint64_t Context::pool_jobs() const {
  return impl_->pool.jobs();
}

double Context::int8_peak_macs_per_second(double seconds) {
  const auto probe = impl_->kernels->int8_peak;
  if (probe == nullptr) return 0;
  std::vector<double> rate(static_cast<size_t>(n_threads()), 0.0);
  impl_->pool.run([&](int ith, int) { rate[static_cast<size_t>(ith)] = probe(seconds); });
  double total = 0;
  for (double r : rate) total += r;
  return total;
}

void Context::matmul(const WeightView& w, const float* x, int64_t n_tokens, float* y) {
  const auto scope = impl_->product({"matmul", w.type, w.n_cols, w.n_rows},
                                    static_cast<double>(w.n_rows * w.n_cols * n_tokens));
  const gguf::GgmlType act_type = quant::activation_type(w.type);
  const TileFn tile = tile_fn(*impl_->kernels, w.type);
  assert(tile != nullptr && "matmul: weight type without kernels");
  assert(w.n_cols % quant::block_size(w.type) == 0);
  const size_t w_stride = quant::row_size(w.type, w.n_cols);
  const int64_t n_cols = w.n_cols, n_rows = w.n_rows;

  const void* xa = x;
  size_t x_stride = static_cast<size_t>(n_cols) * sizeof(float);
  if (act_type != gguf::GgmlType::F32) {
    x_stride = quant::row_size(act_type, n_cols);
    impl_->ensure_act(x_stride * static_cast<size_t>(n_tokens));
    OpProfile::Scope q(impl_->profile, {"quantize x", act_type, n_cols, 0});
    quantize_rows(impl_->pool, act_type, quantize_act_fn(*impl_->kernels, w.type),
                  dense_rows(x, n_cols), n_tokens, n_cols, impl_->act.data(), x_stride);
    xa = impl_->act.data();
  }

  const auto* wbytes = static_cast<const uint8_t*>(w.data);
  const auto* xbytes = static_cast<const uint8_t*>(xa);
  const ItemGrid grid(n_rows, w_stride, n_tokens, n_threads(), n_rows);
  impl_->pool.parallel_for(grid.count(), [&](int64_t item) {
    grid.run(item, n_rows, n_tokens, [&](int64_t r0, int nr, int64_t t0, int nt) {
      tile(n_cols, wbytes + r0 * w_stride, w_stride, nr, xbytes + t0 * x_stride, x_stride, nt,
           y + t0 * n_rows + r0, static_cast<size_t>(n_rows));
    });
  });
}

void Context::matmul_shared(const WeightView* const* w, float* const* y, int n, const float* x,
                            int64_t n_tokens) {
  assert(n >= 1 && n <= kMaxSharedProducts);
  const float* xs[kMaxSharedProducts];
  for (int i = 0; i < n; ++i) xs[i] = x;
  matmul_many(w, xs, y, n, n_tokens);
}

void Context::matmul_many(const WeightView* const* w, const float* const* x, float* const* y, int n,
                          int64_t n_tokens) {
  assert(n >= 1 && n <= kMaxSharedProducts);
  if (n == 1 || n_tokens > kSharedMaxTokens) {
    for (int i = 0; i < n; ++i) matmul(*w[i], x[i], n_tokens, y[i]);
    return;
  }
  struct Product {
    TileFn tile;
    const uint8_t* w;
    size_t w_stride;
    const uint8_t* x;  // the input itself (F32 products) or its quantized region
    size_t x_stride;
    int64_t n_cols, n_rows, first_item;
    int region;  // index into `done`, or -1 for an F32 input used in place
    float* y;
  };
  int64_t total_rows = 0;
  double n_macs = 0;
  for (int i = 0; i < n; ++i) {
    total_rows += w[i]->n_rows;
    n_macs += static_cast<double>(w[i]->n_rows * w[i]->n_cols * n_tokens);
  }
  // Keyed by the first product's format and width, the rows of all.
  const auto scope =
      impl_->product({"matmul shared", w[0]->type, w[0]->n_cols, total_rows}, n_macs);
  Product p[kMaxSharedProducts];
  // Each distinct (input, activation format, quantizer) is quantized once, into its own
  // region of the scratch.
  struct Quantized {
    const float* x;
    gguf::GgmlType type;
    QuantizeActFn fn;
    int64_t n_cols;
    size_t offset;
  };
  Quantized done[kMaxSharedProducts];
  int n_done = 0;
  size_t act_bytes = 0;
  for (int i = 0; i < n; ++i) {
    const WeightView& wi = *w[i];
    const gguf::GgmlType act_type = quant::activation_type(wi.type);
    Product& q = p[i];
    q.tile = tile_fn(*impl_->kernels, wi.type);
    assert(q.tile != nullptr && "matmul_many: weight type without kernels");
    assert(wi.n_cols % quant::block_size(wi.type) == 0);
    q.w = static_cast<const uint8_t*>(wi.data);
    q.w_stride = quant::row_size(wi.type, wi.n_cols);
    q.n_cols = wi.n_cols;
    q.n_rows = wi.n_rows;
    q.y = y[i];
    q.region = -1;
    if (act_type == gguf::GgmlType::F32) {
      q.x = reinterpret_cast<const uint8_t*>(x[i]);
      q.x_stride = static_cast<size_t>(wi.n_cols) * sizeof(float);
      continue;
    }
    q.x_stride = quant::row_size(act_type, wi.n_cols);
    const QuantizeActFn own = quantize_act_fn(*impl_->kernels, wi.type);
    for (int j = 0; j < n_done; ++j) {
      const Quantized& d = done[j];
      if (d.x == x[i] && d.n_cols == wi.n_cols && d.type == act_type && d.fn == own) q.region = j;
    }
    if (q.region < 0) {
      q.region = n_done++;
      done[q.region] = {x[i], act_type, own, wi.n_cols, act_bytes};
      act_bytes += q.x_stride * static_cast<size_t>(n_tokens);
    }
  }
  impl_->ensure_act(act_bytes);
  for (int j = 0; j < n_done; ++j) {
    const Quantized& d = done[j];
    OpProfile::Scope q(impl_->profile, {"quantize x", d.type, d.n_cols, 0});
    quantize_rows(impl_->pool, d.type, d.fn, dense_rows(d.x, d.n_cols), n_tokens, d.n_cols,
                  impl_->act.data() + d.offset, quant::row_size(d.type, d.n_cols));
  }
  for (int i = 0; i < n; ++i) {
    if (p[i].region >= 0) p[i].x = impl_->act.data() + done[p[i].region].offset;
  }
  // Items of kRowAlign-multiple rows over all the products' rows, claimed dynamically.
  const int64_t per_item = rows_per_item(total_rows, n_threads());
  int64_t n_items = 0;
  for (int i = 0; i < n; ++i) {
    p[i].first_item = n_items;
    n_items += (p[i].n_rows + per_item - 1) / per_item;
  }
  impl_->pool.parallel_for(n_items, [&](int64_t item) {
    int i = n - 1;
    while (p[i].first_item > item) --i;
    const Product& q = p[i];
    const int64_t r_begin = (item - q.first_item) * per_item;
    const int64_t r_end = std::min(q.n_rows, r_begin + per_item);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kRowBlock) {
      const int nr = static_cast<int>(std::min(kRowBlock, r_end - r0));
      q.tile(q.n_cols, q.w + r0 * q.w_stride, q.w_stride, nr, q.x, q.x_stride,
             static_cast<int>(n_tokens), q.y + r0, static_cast<size_t>(q.n_rows));
    }
  });
}

void Context::matmul_grouped(const WeightView& w, int64_t n_groups, const float* x,
                             int64_t n_tokens, float* y) {
  const int64_t n_out = w.n_rows / n_groups;
  matmul_grouped(w, n_groups, x, n_tokens, y,
                 GroupedLayout{n_tokens * w.n_cols, w.n_cols, n_tokens * n_out, n_out});
}

void Context::matmul_grouped(const WeightView& w, int64_t n_groups, const float* x,
                             int64_t n_tokens, float* y, const GroupedLayout& layout) {
  assert(n_groups > 0 && w.n_rows % n_groups == 0);
  const auto scope = impl_->product({"matmul grouped", w.type, w.n_cols, w.n_rows},
                                    static_cast<double>(w.n_rows * w.n_cols * n_tokens));
  const gguf::GgmlType act_type = quant::activation_type(w.type);
  const TileFn tile = tile_fn(*impl_->kernels, w.type);
  assert(tile != nullptr && "matmul_grouped: weight type without kernels");
  assert(w.n_cols % quant::block_size(w.type) == 0);
  const size_t w_stride = quant::row_size(w.type, w.n_cols);
  const int64_t n_cols = w.n_cols, n_out = w.n_rows / n_groups;

  // Group g's rows: the input's own (F32 weights), or its quantized copy, one block of
  // n_tokens rows per group.
  const auto* xbytes = reinterpret_cast<const uint8_t*>(x);
  size_t x_token = static_cast<size_t>(layout.x_token) * sizeof(float);
  size_t x_group = static_cast<size_t>(layout.x_group) * sizeof(float);
  if (act_type != gguf::GgmlType::F32) {
    x_token = quant::row_size(act_type, n_cols);
    x_group = x_token * static_cast<size_t>(n_tokens);
    impl_->ensure_act(x_group * static_cast<size_t>(n_groups));
    OpProfile::Scope q(impl_->profile, {"quantize x", act_type, n_cols, 0});
    const auto src = [&](int64_t i) {
      return x + (i / n_tokens) * layout.x_group + (i % n_tokens) * layout.x_token;
    };
    quantize_rows(impl_->pool, act_type, quantize_act_fn(*impl_->kernels, w.type), src,
                  n_groups * n_tokens, n_cols, impl_->act.data(), x_token);
    xbytes = impl_->act.data();
  }

  const auto* wbytes = static_cast<const uint8_t*>(w.data);
  const ItemGrid grid(n_out, w_stride, n_tokens, n_threads(), w.n_rows);  // one group's
  impl_->pool.parallel_for(n_groups * grid.count(), [&](int64_t item) {
    const int64_t g = item / grid.count();
    const uint8_t* wg = wbytes + static_cast<size_t>(g * n_out) * w_stride;
    const uint8_t* xg = xbytes + static_cast<size_t>(g) * x_group;
    float* yg = y + g * layout.y_group;
    grid.run(item % grid.count(), n_out, n_tokens, [&](int64_t r0, int nr, int64_t t0, int nt) {
      tile(n_cols, wg + r0 * w_stride, w_stride, nr, xg + t0 * x_token, x_token, nt,
           yg + t0 * layout.y_token + r0, static_cast<size_t>(layout.y_token));
    });
  });
}

void Context::matmul_chained(const WeightView& w1, const WeightView& w2, int64_t n_groups,
                             const float* x, float* y1, int64_t y1_stride, float* y2,
                             int64_t y2_stride, const WeightView* extra, float* extra_y) {
  assert(n_groups > 0 && w1.n_rows % n_groups == 0 && w2.n_rows % n_groups == 0);
  assert(w2.n_cols <= y1_stride && (extra == nullptr || extra->n_cols == w1.n_cols));
  const auto scope =
      impl_->product({"matmul chained", w1.type, w1.n_cols, w1.n_rows},
                     static_cast<double>(w1.n_rows * w1.n_cols + w2.n_rows * w2.n_cols +
                                         (extra ? extra->n_rows * extra->n_cols : 0)));
  // One operand of a product: its tile and weight rows, its activation row's format.
  struct Operand {
    TileFn tile;
    const uint8_t* w;
    size_t w_stride, x_bytes;
    gguf::GgmlType act;
    QuantizeActFn quantize;
  };
  const auto operand = [&](const WeightView& w) {
    Operand o{tile_fn(*impl_->kernels, w.type),  static_cast<const uint8_t*>(w.data),
              quant::row_size(w.type, w.n_cols), 0,
              quant::activation_type(w.type),    quantize_act_fn(*impl_->kernels, w.type)};
    assert(o.tile != nullptr && w.n_cols % quant::block_size(w.type) == 0);
    o.x_bytes = o.act == gguf::GgmlType::F32 ? static_cast<size_t>(w.n_cols) * sizeof(float)
                                             : quant::row_size(o.act, w.n_cols);
    return o;
  };
  const Operand a = operand(w1), b = operand(w2);
  const Operand e = extra != nullptr ? operand(*extra) : Operand{};
  // Scratch: x as w1 reads it, x as extra reads it, then each group's y1 as w2 reads it.
  const size_t e_off = a.x_bytes, g_off = e_off + e.x_bytes;
  impl_->ensure_act(g_off + b.x_bytes * static_cast<size_t>(n_groups));
  uint8_t* act = impl_->act.data();
  const auto quantize_one = [&](const Operand& o, const float* row, int64_t n_cols,
                                uint8_t* dst) -> const uint8_t* {
    if (o.act == gguf::GgmlType::F32) return reinterpret_cast<const uint8_t*>(row);
    if (o.quantize) {
      o.quantize(row, dst, n_cols);
    } else {
      quant::quantize_activations(o.act, row, dst, n_cols);
    }
    return dst;
  };
  const uint8_t* xa = quantize_one(a, x, w1.n_cols, act);
  // x once for both when w1 and extra read it in the same format.
  const bool same = extra != nullptr && e.act == a.act && e.quantize == a.quantize;
  const uint8_t* xe = extra == nullptr ? nullptr
                      : same           ? xa
                                       : quantize_one(e, x, extra->n_cols, act + e_off);
  const int64_t n1 = w1.n_rows / n_groups, n2 = w2.n_rows / n_groups;
  // y[0..count) = rows [first, first + count) of o's weights . xq.
  const auto rows = [](const Operand& o, int64_t n_cols, int64_t first, int64_t count,
                       const uint8_t* xq, float* y) {
    for (int64_t r = 0; r < count; r += kRowBlock) {
      const int nr = static_cast<int>(std::min(kRowBlock, count - r));
      o.tile(n_cols, o.w + (first + r) * o.w_stride, o.w_stride, nr, xq, o.x_bytes, 1, y + r, 1);
    }
  };
  // Items: one per group, then the extra product's rows in kRowAlign-multiple items.
  const int64_t per_item = extra != nullptr ? rows_per_item(extra->n_rows, n_threads()) : 1;
  const int64_t n_extra = extra != nullptr ? (extra->n_rows + per_item - 1) / per_item : 0;
  impl_->pool.parallel_for(n_groups + n_extra, [&](int64_t item) {
    if (item >= n_groups) {
      const int64_t first = (item - n_groups) * per_item;
      rows(e, extra->n_cols, first, std::min(per_item, extra->n_rows - first), xe, extra_y + first);
      return;
    }
    const int64_t g = item;
    float* y1g = y1 + g * y1_stride;
    rows(a, w1.n_cols, g * n1, n1, xa, y1g);
    const uint8_t* x2 = quantize_one(b, y1g, w2.n_cols, act + g_off + g * b.x_bytes);
    rows(b, w2.n_cols, g * n2, n2, x2, y2 + g * y2_stride);
  });
}

void Context::get_rows(const WeightView& w, const int32_t* ids, int64_t n_ids, float* out) {
  OpProfile::Scope scope(impl_->profile, {"get_rows", w.type, w.n_cols, 0});
  const size_t w_stride = quant::row_size(w.type, w.n_cols);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t i = 0; i < n_ids; ++i) {
    assert(ids[i] >= 0 && ids[i] < w.n_rows);
    quant::dequantize_row(w.type, base + static_cast<size_t>(ids[i]) * w_stride, out + i * w.n_cols,
                          w.n_cols);
  }
}

void Context::widen_rows(const KvRows& src, int64_t n_rows, int64_t width, float* out) const {
  impl_->kernels->widen_rows(src, n_rows, width, out);
}

void Context::widen_keys(const KvRows& src, int64_t n_keys, int64_t d, float* out) const {
  assert(n_keys <= kAttnMaxKeys);
  impl_->kernels->widen_keys(src, n_keys, d, out);
}

void Context::silu_mul(float* gate, const float* up, int64_t n) const {
  impl_->kernels->silu_mul(gate, up, n);
}

void Context::gelu_mul(float* gate, const float* up, int64_t n) const {
  impl_->kernels->gelu_mul(gate, up, n);
}

void Context::attention_step(const AttentionRows& rows, const float* keys_t, const KvRows& values,
                             int64_t n_keys) const {
  assert(n_keys <= kAttnMaxKeys);
  impl_->kernels->attention_step(rows, keys_t, values, n_keys);
  int64_t visible = 0;
  for (int64_t r = 0; r < rows.n_rows; ++r) visible += std::max(0, rows.hi[r] - rows.lo[r]);
  impl_->macs.fetch_add(static_cast<uint64_t>(visible * (rows.head_dim + rows.head_dim_v)),
                        std::memory_order_relaxed);
}

}  // namespace hypura::compute
