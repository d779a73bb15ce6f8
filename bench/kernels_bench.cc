// Kernel benchmarks: matrix-vector products per weight type (weight GB/s, 1 and 2
// threads) beside the memory read bandwidth measured in the same run, and prompt
// processing (512 tokens through a 4096 x 14336 Q4_K matrix) in GFLOP/s.
//
// Each matvec iteration uses the next of several copies of the matrix, the copies
// together several times the last-level cache, so weights come from DRAM as in real
// generation and not from cache.
//
//   hypura_bench_kernels [--simd=LEVEL] [--benchmark_filter=...]
//   (--simd: scalar, avx2, avx512, avx512vnni or amx; default the best this CPU runs)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "compute/compute.h"
#include "compute/cpu/thread_pool.h"
#include "profiler/memory_bandwidth.h"
#include "quant/fp16.h"
#include "quant/quant.h"

namespace {

std::string g_simd;  // --simd=LEVEL: the kernels' path (empty: the best)

using hypura::compute::Context;
using hypura::compute::WeightView;
using hypura::gguf::GgmlType;
namespace quant = hypura::quant;

std::map<int, double> g_mem_bw;  // threads -> bytes/s, measured at start

// n_copies copies of an (n_rows, n_cols) matrix of `type` holding quantized N(0,1) data
// (64 distinct rows tiled; the content does not change the speed).
struct MatrixSet {
  GgmlType type;
  int64_t n_rows, n_cols;
  size_t matrix_bytes;
  int n_copies;
  std::vector<uint8_t, std::allocator<uint8_t>> bytes;

  WeightView view(int copy) const {
    return WeightView{bytes.data() + matrix_bytes * static_cast<size_t>(copy), type, n_cols,
                      n_rows};
  }
};

MatrixSet make_matrices(GgmlType type, int64_t n_rows, int64_t n_cols, size_t working_set) {
  MatrixSet m{type, n_rows, n_cols, quant::row_size(type, n_cols) * n_rows, 1, {}};
  m.n_copies =
      static_cast<int>(std::max<size_t>(1, (working_set + m.matrix_bytes - 1) / m.matrix_bytes));
  m.bytes.resize(m.matrix_bytes * m.n_copies);
  const size_t rs = quant::row_size(type, n_cols);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row(n_cols);
  for (int r = 0; r < 64; ++r) {
    for (auto& v : row) v = dist(rng);
    quant::quantize_row_ref(type, row.data(), m.bytes.data() + r * rs, n_cols);
  }
  for (size_t off = 64 * rs; off < m.bytes.size(); off += std::min(64 * rs, m.bytes.size() - off)) {
    std::memcpy(m.bytes.data() + off, m.bytes.data(), std::min(64 * rs, m.bytes.size() - off));
  }
  return m;
}

size_t working_set_bytes() {
  return std::max<size_t>(4 * hypura::profiler::last_level_cache_bytes(), size_t{1} << 30);
}

// hot = true: one matrix small enough to stay in L2 (~1.5 MiB), so the figure is
// the kernel's compute ceiling (evidence for whether cores or memory are the limit).
void BM_Matvec(benchmark::State& state, GgmlType type, bool hot) {
  const int64_t n_cols = state.range(0), n_rows = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const MatrixSet m = make_matrices(type, n_rows, n_cols, hot ? 0 : working_set_bytes());
  Context ctx(threads, g_simd);
  ctx.reserve(1, n_cols);
  std::vector<float> x(n_cols, 0.5f), y(n_rows);
  int copy = 0;
  for (auto _ : state) {
    ctx.matmul(m.view(copy), x.data(), 1, y.data());
    benchmark::DoNotOptimize(y.data());
    copy = (copy + 1) % m.n_copies;
  }
  const double bytes =
      static_cast<double>(m.matrix_bytes) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["mem_GB/s"] = g_mem_bw[threads] / 1e9;
  state.SetLabel(std::string(hypura::gguf::type_name(type)) + " " + ctx.simd_name());
}

// "ratio" column: weight GB/s / memory GB/s, added after the run by the reporter below.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  RatioReporter() : ConsoleReporter(OO_Tabular) {}  // plain text: tables go into docs
  void ReportRuns(const std::vector<Run>& runs) override {
    std::vector<Run> copy = runs;
    for (auto& run : copy) {
      auto gb = run.counters.find("GB/s");
      auto mem = run.counters.find("mem_GB/s");
      if (gb != run.counters.end() && mem != run.counters.end() && mem->second.value > 0) {
        // Both are rates already (GB/s of this run and of the probe).
        run.counters["ratio"] = gb->second.value / mem->second.value;
      }
    }
    ConsoleReporter::ReportRuns(copy);
  }
};

void BM_Prompt(benchmark::State& state, GgmlType type) {
  const int64_t n_cols = state.range(0), n_rows = state.range(1), n_tok = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const MatrixSet m = make_matrices(type, n_rows, n_cols, 0);
  Context ctx(threads, g_simd);
  ctx.reserve(n_tok, n_cols);
  std::vector<float> x(n_tok * n_cols), y(n_tok * n_rows);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : x) v = dist(rng);
  for (auto _ : state) {
    ctx.matmul(m.view(0), x.data(), n_tok, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  const double flops = 2.0 * n_cols * n_rows * n_tok * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(hypura::gguf::type_name(type)) + " " + ctx.simd_name());
}

// One query tile of attention against n_keys F16 cached keys, block by block as the
// model runs it (widen the key and value block, one online-softmax step): GFLOP/s of q.k
// and p.v on one thread. rows 96: a prompt's tile (32 tokens x 3 q heads of a kv head,
// head_dim 64 as in SmolLM2); rows 3: one decode token's heads of a kv head (SmolLM2).
void BM_AttentionTile(benchmark::State& state) {
  const int64_t n_keys = state.range(0), d = state.range(1), n_rows = state.range(2);
  Context ctx(1, g_simd);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> kv(2 * n_keys * d);
  for (auto& h : kv) h = quant::f32_to_fp16(dist(rng));
  // Scratch aligned as CpuBlocks' (compute::AlignedVector).
  std::vector<float> q(n_rows * d), m(n_rows);
  hypura::compute::AlignedVector<float> keys(hypura::compute::kAttnMaxKeys * d),
      values(hypura::compute::kAttnMaxKeys * d), acc(n_rows * d);
  for (auto& v : q) v = dist(rng);
  std::vector<double> l(n_rows);
  std::vector<const float*> qs;
  for (int64_t r = 0; r < n_rows; ++r) qs.push_back(q.data() + r * d);
  std::vector<int32_t> lo(n_rows, 0), hi(n_rows, 64);
  const hypura::compute::AttentionRows rows{n_rows,    d,         d,        0.125f,   qs.data(),
                                            lo.data(), hi.data(), m.data(), l.data(), acc.data()};
  for (auto _ : state) {
    std::fill(m.begin(), m.end(), -INFINITY);
    std::fill(l.begin(), l.end(), 0.0);
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t kb = 0; kb < n_keys; kb += 64) {
      ctx.widen_keys({kv.data() + kb * d, d, true}, 64, d, keys.data());
      hypura::compute::KvRows v{kv.data() + (n_keys + kb) * d, d, true};
      if (n_rows > hypura::compute::kAttnTileRows) {  // as CpuBlocks: widened for many rows
        ctx.widen_rows(v, 64, d, values.data());
        v = {values.data(), d, false};
      }
      ctx.attention_step(rows, keys.data(), v, 64);
    }
    benchmark::DoNotOptimize(acc.data());
  }
  const double flops = 4.0 * n_rows * n_keys * d * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(ctx.simd_name());
}

// A decode step's attention at depth as the model runs it: one token's q heads of each kv
// head against n_keys positions of n_layers layers' F16 caches (interleaved heads, 3 kv
// heads of 64 as in SmolLM2), so that the caches (~47 MB at 2048 keys and 30 layers)
// come from memory as they do at depth, not from L2: GFLOP/s on one thread. order 1
// takes a 512-key segment's heads in turn (CpuBlocks' order: the segment's cache rows are
// fetched whole once), 0 each head's segments in turn (a head's 128 bytes of every row,
// the lines of the others fetched beside them and gone again before their turn). Taking
// each key block's heads in turn, or prefetching the next block's rows, measured no faster
// than order 1.
void BM_AttentionDepth(benchmark::State& state) {
  const int64_t n_keys = state.range(0), n_layers = state.range(1), order = state.range(2);
  const int64_t d = 64, n_kv = 3, n_gqa = 3, width = n_kv * d;
  Context ctx(1, g_simd);
  std::mt19937 rng(6);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<uint16_t> cache(2 * n_layers * n_keys * width);
  for (auto& h : cache) h = quant::f32_to_fp16(dist(rng));
  std::vector<float> q(n_kv * n_gqa * d), m(n_kv * n_gqa);
  hypura::compute::AlignedVector<float> keys(hypura::compute::kAttnMaxKeys * d),
      acc(n_kv * n_gqa * d);
  for (auto& v : q) v = dist(rng);
  std::vector<double> l(n_kv * n_gqa);
  std::vector<const float*> qs;
  for (int64_t r = 0; r < n_kv * n_gqa; ++r) qs.push_back(q.data() + r * d);
  std::vector<int32_t> lo(n_gqa, 0), hi(n_gqa, 64);
  std::vector<hypura::compute::AttentionRows> rows;
  for (int64_t g = 0; g < n_kv; ++g) {
    const int64_t r = g * n_gqa;
    rows.push_back({n_gqa, d, d, 0.125f, qs.data() + r, lo.data(), hi.data(), m.data() + r,
                    l.data() + r, acc.data() + r * d});
  }
  auto step = [&](const uint16_t* k_layer, const uint16_t* v_layer, int64_t g, int64_t kb) {
    ctx.widen_keys({k_layer + kb * width + g * d, width, true}, 64, d, keys.data());
    ctx.attention_step(rows[g], keys.data(), {v_layer + kb * width + g * d, width, true}, 64);
  };
  const int64_t n_seg = n_keys / 512;
  for (auto _ : state) {
    for (int64_t il = 0; il < n_layers; ++il) {
      const uint16_t* k_layer = cache.data() + 2 * il * n_keys * width;
      const uint16_t* v_layer = k_layer + n_keys * width;
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t i = 0; i < n_kv * n_seg; ++i) {
        const int64_t g = order == 0 ? i / n_seg : i % n_kv,
                      seg = order == 0 ? i % n_seg : i / n_kv;
        for (int64_t kb = seg * 512; kb < (seg + 1) * 512; kb += 64) step(k_layer, v_layer, g, kb);
      }
      benchmark::DoNotOptimize(acc.data());
    }
  }
  const double flops =
      4.0 * n_gqa * n_kv * n_layers * n_keys * d * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(ctx.simd_name());
}

// Cost of one empty job on the persistent pool (the floor under every small matmul).
void BM_PoolRun(benchmark::State& state) {
  Context ctx(static_cast<int>(state.range(0)), g_simd);
  std::atomic<int> sink{0};
  for (auto _ : state) {
    ctx.pool().run([&](int ith, int) { sink.fetch_add(ith, std::memory_order_relaxed); });
  }
}

void BM_MemoryBandwidth(benchmark::State& state) {
  for (auto _ : state) {
  }
  state.counters["mem_GB/s"] = g_mem_bw[static_cast<int>(state.range(0))] / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  // --simd=LEVEL is ours; the rest goes to Google Benchmark.
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--simd="))
      g_simd = std::string(arg.substr(7));
    else
      argv[kept++] = argv[i];
  }
  argc = kept;
  for (int threads : {1, 2}) {
    hypura::profiler::MemoryBandwidthOptions opt;
    opt.n_threads = threads;
    opt.min_seconds = 1.0;
    g_mem_bw[threads] = hypura::profiler::measure_memory_read_bandwidth(opt).read_bytes_per_second;
  }
  benchmark::RegisterBenchmark("memory_read", BM_MemoryBandwidth)->Arg(1)->Arg(2)->Iterations(1);
  benchmark::RegisterBenchmark("pool_run", BM_PoolRun)->Arg(1)->Arg(2)->UseRealTime();
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K, GgmlType::Q5_K,
                            GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q4_1, GgmlType::Q5_1,
                            GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::F16,  GgmlType::BF16,
                            GgmlType::F32,  GgmlType::MXFP4};
  for (GgmlType type : types) {
    const std::string name = std::string("matvec/") + hypura::gguf::type_name(type);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Matvec, type, false);
    b->ArgNames({"cols", "rows", "threads"})->UseRealTime()->MinTime(0.5);
    for (int threads : {1, 2}) {
      b->Args({4096, 14336, threads});
      b->Args({14336, 4096, threads});
      b->Args({896, 9728, threads});  // a small real model's narrow rows (Qwen2.5-0.5B's gate + up)
    }
  }
  for (GgmlType type : types) {
    const std::string name = std::string("matvec_hot/") + hypura::gguf::type_name(type);
    // As many rows as fit in ~1.5 MiB (inside the 2 MiB L2), so the per-call activation
    // quantization of x is amortised as in the big matrices.
    const int64_t rows = std::clamp<int64_t>(
        (int64_t{3} << 19) / static_cast<int64_t>(quant::row_size(type, 4096)), 64, 4096);
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Matvec, type, true);
    b->ArgNames({"cols", "rows", "threads"})->UseRealTime()->MinTime(0.3)->Args({4096, rows, 1});
  }
  benchmark::RegisterBenchmark("attention_tile", BM_AttentionTile)
      ->ArgNames({"keys", "head_dim", "rows"})
      ->Args({4096, 64, 96})
      ->Args({4096, 128, 96})
      ->Args({4096, 64, 3})
      ->Args({4096, 128, 8});
  benchmark::RegisterBenchmark("attention_depth", BM_AttentionDepth)
      ->ArgNames({"keys", "layers", "order"})
      ->Args({2048, 30, 0})
      ->Args({2048, 30, 1})

      ->Args({2048, 1, 1});
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0, GgmlType::Q4_1,
                        GgmlType::Q8_0, GgmlType::MXFP4}) {
    const std::string name = std::string("prompt/") + hypura::gguf::type_name(type);
    auto* p = benchmark::RegisterBenchmark(name.c_str(), BM_Prompt, type);
    p->ArgNames({"cols", "rows", "tokens", "threads"})
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
    p->Args({4096, 14336, 512, 1})->Args({4096, 14336, 512, 2});
    // A small real model's rows (SmolLM2-135M's FFN: 576 columns, 1536 rows).
    p->Args({576, 1536, 512, 1});
  }
  benchmark::Initialize(&argc, argv);
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
