// `hypura bench [MODEL] [-p N] [-n N] [-r N] [--json]`: prompt and generation speed.
//
// Like llama-bench: "pp N" processes N random tokens as one prompt from an empty cache,
// "tg N" generates N tokens one at a time from an empty cache; each test runs once to
// warm up, then -r times, and reports mean ± standard deviation of tok/s. -p takes a
// list (default 512,2048,4096); --depth D (a list too) runs every test with D random
// tokens already in the KV cache ("pp512 @ d4096"), put there untimed before each run. Beside the
// figures it prints a same-run reference: the memory read bandwidth measured just
// before, divided by the weight bytes one generated token must read (the memory-bound
// ceiling of tg). --prompt-file runs the speculation comparison instead (cli/spec_bench.h).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "cli/batch_bench.h"
#include "cli/command.h"
#include "cli/spec_bench.h"
#include "cli/sweep.h"
#include "common/atomic_file.h"
#include "common/size.h"
#include "compute/compute.h"
#include "compute/op_profile.h"
#include "eval/mmap_baseline.h"
#include "eval/tier_metrics.h"
#include "experts/expert_metrics.h"
#include "gguf/gguf.h"
#include "profiler/decode_rates.h"
#include "profiler/in_child.h"
#include "profiler/memory_bandwidth.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "runtime/tiered_weights.h"
#if HYPURA_HAVE_CUDA
#include "compute/cuda/device.h"
#endif

namespace hypura::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int> n_prompt = {512, 2048, 4096};
  int n_gen = 128;
  std::vector<int> depths = {0};
  int reps = 5;
  EngineFlags engine;
  bool json = false;
  bool no_reference = false;
  std::string trace;               // expert-streaming routing trace file
  int64_t context = 0;             // --context: KV cache length (0: just enough for the tests)
  bool baseline = false;           // also run the plain mmap way (tg only) and print the speed-up
  bool force = false;              // run --baseline even when the model exceeds RAM - 4 GiB
  std::vector<std::string> sweep;  // --sweep: RAM budgets, one child bench each (cli/sweep.h)
  std::string plot;                // --plot FILE: the sweep's SVG chart
  std::vector<int> batch;          // --batch: sequence counts decoded at once (cli/batch_bench.h)
  bool n_prompt_given = false;     // -p on the command line (else the defaults, clipped)
  std::string prompt_file;         // --prompt-file: generation after real text (cli/spec_bench.h)
  SpecFlags spec;                  // --lookup, --draft, --spec-max (with --prompt-file)
  bool profile_ops = false;        // --profile-ops: where each test's CPU time goes
};

struct Stats {
  double mean = 0, stddev = 0;
  double gflops = 0;          // 2 x matmul and attention MACs / timed seconds, mean over runs
  double jobs_per_token = 0;  // CPU pool jobs (Context::pool_jobs) per token, mean over runs
  // --profile-ops: the timed runs' operations (compute/op_profile.h) and their wall time.
  std::vector<compute::OpProfile::Entry> ops;
  double timed_seconds = 0;
};

Stats stats(const std::vector<double>& v) {
  Stats s;
  if (v.empty()) return s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

// Weight bytes one generated token reads: every tensor except the embedding table (one row)
// and, in MoE models, only n_expert_used / n_expert of the stacked expert tensors.
double bytes_per_token(const gguf::GgufFile& file) {
  const std::string arch = file.architecture();
  const auto n_expert = file.metadata().get_u64(arch + ".expert_count").value_or(0);
  const auto n_used = file.metadata().get_u64(arch + ".expert_used_count").value_or(0);
  const bool tied = file.find_tensor("output.weight") == nullptr;
  double total = 0;
  for (const auto& t : file.tensors()) {
    if (t.name == "token_embd.weight" && !tied) continue;
    double b = static_cast<double>(t.n_bytes);
    if (n_expert > 0 && t.name.find("_exps") != std::string::npos) {
      b *= static_cast<double>(n_used) / static_cast<double>(n_expert);
    }
    total += b;
  }
  return total;
}

using Clock = std::chrono::steady_clock;

// A same-run reference figure, or 0 (printed as such) when its reads failed.
double reference_or_zero(const Result<double>& bps) {
  if (bps.is_ok()) return bps.value();
  spdlog::warn("bench reference not measured: {}", bps.status().message());
  return 0;
}

struct RunFigures {
  double tps = 0, gflops = 0, jobs_per_token = 0, seconds = 0;
};

// One timed run: tok/s of processing `tokens` as a prompt (pp) or one by one (tg) after
// the session's first `depth` cached tokens, and the GFLOP/s of its matmuls and attention
// (counted by the compute context, when the engine has one).
Result<RunFigures> time_run(runtime::Engine& engine, runtime::Session& session, int64_t depth,
                            const std::vector<int32_t>& tokens, bool tg) {
  session.truncate(depth);
  std::vector<float> logits;
  const compute::Context* ctx = engine.compute_context();
  const uint64_t macs0 = ctx != nullptr ? ctx->macs() : 0;
  const uint64_t jobs0 = ctx != nullptr ? ctx->pool_jobs() : 0;
  const auto t0 = Clock::now();
  // Only the last position's logits, as generate() and llama-bench compute them.
  if (tg) {
    for (int32_t id : tokens) HYPURA_RETURN_IF_ERROR(session.prefill({id}, &logits));
  } else {
    HYPURA_RETURN_IF_ERROR(session.prefill(tokens, &logits));
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double macs = ctx != nullptr ? static_cast<double>(ctx->macs() - macs0) : 0;
  const double jobs = ctx != nullptr ? static_cast<double>(ctx->pool_jobs() - jobs0) : 0;
  const auto n = static_cast<double>(tokens.size());
  return RunFigures{n / s, 2 * macs / s / 1e9, jobs / n, s};
}

std::vector<int32_t> random_tokens(const runtime::Engine& engine, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(engine.n_vocab() - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

// profile (may be null): times the operations of the runs after the warm-up.
Result<Stats> run_test(runtime::Engine& engine, runtime::Session& session, int n, bool tg,
                       int depth, int reps, compute::OpProfile* profile,
                       const std::function<void()>& after_warmup = nullptr) {
  const std::vector<int32_t> tokens = random_tokens(engine, n, 1234);
  // The depth is filled once (untimed); every run starts from it (Session::truncate).
  session.reset();
  std::vector<float> logits;
  if (depth > 0)
    HYPURA_RETURN_IF_ERROR(session.prefill(random_tokens(engine, depth, 4321), &logits));
  // The warm-up faults the weights in and warms the caches: every weight is read for
  // any number of tokens, so a CPU pp warm-up needs only a short prompt (as llama-bench's);
  // tg keeps the whole sequence, which also warms an expert cache as the test will see it.
  // On the GPU the warm-up runs the test's own shape: kernels load on first use (CUDA's lazy
  // module loading) and cuBLAS picks its kernels per shape, which a 32-token prompt (the
  // batched-matvec path) never reaches.
  const bool gpu = engine.device() != "cpu";
  const size_t n_warm = tg || gpu ? tokens.size() : std::min<size_t>(tokens.size(), 32);
  const std::vector<int32_t> warm(tokens.begin(),
                                  tokens.begin() + static_cast<std::ptrdiff_t>(n_warm));
  HYPURA_RETURN_IF_ERROR(time_run(engine, session, depth, warm, tg).status());
  if (after_warmup) after_warmup();
  compute::Context* ctx = profile != nullptr ? engine.compute_context() : nullptr;
  if (ctx != nullptr) {
    profile->clear();
    ctx->set_op_profile(profile);
  }
  struct Detach {  // however the runs end: the context outlives this test's profile
    compute::Context* ctx;
    ~Detach() {
      if (ctx != nullptr) ctx->set_op_profile(nullptr);
    }
  } detach{ctx};
  std::vector<double> tps;
  double gflops = 0, jobs = 0, seconds = 0;
  for (int r = 0; r < reps; ++r) {
    HYPURA_ASSIGN_OR_RETURN(RunFigures v, time_run(engine, session, depth, tokens, tg));
    tps.push_back(v.tps);
    gflops += v.gflops / reps;
    jobs += v.jobs_per_token / reps;
    seconds += v.seconds;
  }
  Stats s = stats(tps);
  s.gflops = gflops;
  s.jobs_per_token = jobs;
  if (ctx != nullptr) {
    s.ops = profile->entries();
    s.timed_seconds = seconds;
  }
  return s;
}

// The arguments a sweep's child bench gets: this run's, generation only.
std::vector<std::string> sweep_child_args(const BenchArgs& a, const std::string& path) {
  std::vector<std::string> c = {path,
                                "-p",
                                "0",
                                "-n",
                                std::to_string(a.n_gen),
                                "-r",
                                std::to_string(a.reps),
                                "--device",
                                a.engine.device,
                                "--kv-type",
                                a.engine.kv_type};
  if (a.engine.threads > 0) c.insert(c.end(), {"-t", std::to_string(a.engine.threads)});
  if (!a.engine.profile.empty()) c.insert(c.end(), {"--profile", a.engine.profile});
  if (a.context > 0) c.insert(c.end(), {"--context", std::to_string(a.context)});
  if (a.no_reference) c.push_back("--no-reference");
  if (a.baseline) c.push_back("--baseline");
  if (a.force) c.push_back("--force");
  return c;
}

int run_sweep_bench(const BenchArgs& a, const std::string& path) {
  std::vector<uint64_t> budgets;
  for (const auto& text : a.sweep) {
    auto b = parse_size(text);
    if (!b.is_ok()) {
      std::cerr << "hypura bench: --sweep: " << b.status().message() << "\n";
      return 2;
    }
    budgets.push_back(*b);
  }
  std::sort(budgets.begin(), budgets.end());
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) {
    std::cerr << "hypura bench: --sweep: cannot find this program (/proc/self/exe)\n";
    return 1;
  }
  const std::vector<SweepPoint> points =
      run_sweep(std::string(exe, static_cast<size_t>(n)), sweep_child_args(a, path), budgets);
  std::cout << sweep_table(points);
  if (!a.plot.empty()) {
    const std::string title = path.substr(path.find_last_of('/') + 1) + ": tg" +
                              std::to_string(a.n_gen) + " against the RAM budget";
    if (Status st = write_file_atomically(a.plot, sweep_svg(points, title)); !st.is_ok()) {
      std::cerr << "hypura bench: --plot: " << st.message() << "\n";
      return 1;
    }
    std::cerr << "hypura bench: wrote " << a.plot << "\n";
  }
  const bool any_ran = std::any_of(points.begin(), points.end(),
                                   [](const SweepPoint& p) { return p.error.empty(); });
  return any_ran ? 0 : 1;
}

// --batch: the batched tests only, with a KV cache per sequence of the largest batch.
int run_batched_bench(const BenchArgs& a, const std::string& path) {
  BatchBenchOptions o;
  o.batches = a.batch;
  o.n_prompt = a.n_prompt.front();
  o.n_gen = a.n_gen;
  o.reps = a.reps;
  runtime::EngineOptions eo =
      engine_options(a.engine, path, a.context > 0 ? a.context : o.n_prompt + o.n_gen + 1);
  eo.n_ctx_past_trained = true;
  eo.n_parallel = *std::max_element(o.batches.begin(), o.batches.end());
  auto engine = runtime::Engine::load(eo);
  if (!engine.is_ok()) {
    std::cerr << "hypura bench: " << path << ": " << engine.status().message() << "\n";
    return 1;
  }
  auto rows = run_batch_bench(**engine, o);
  if (!rows.is_ok()) {
    std::cerr << "hypura bench: --batch: " << rows.status().message() << "\n";
    return 1;
  }
  runtime::Engine& e = **engine;
  if (a.json) {
    nlohmann::json j = {{"model", path},
                        {"arch", e.architecture()},
                        {"mode", e.mode()},
                        {"device", e.device()},
                        {"batch", batch_json(*rows, o)}};
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::printf("%s: %s, %s on %s\n\n%s", path.c_str(), e.architecture().c_str(), e.mode().c_str(),
              e.device().c_str(), batch_table(*rows, o).c_str());
  return 0;
}

int run_speculation_bench(const BenchArgs& a, const std::string& path) {
  SpecBenchOptions o;
  {
    std::ifstream in(a.prompt_file, std::ios::binary);
    if (!in) {
      std::cerr << "hypura bench: cannot read --prompt-file " << a.prompt_file << "\n";
      return 2;
    }
    o.text.assign(std::istreambuf_iterator<char>(in), {});
  }
  o.n_gen = a.n_gen;
  o.reps = a.reps;
  o.speculation = speculation_options(a.spec);
  runtime::EngineOptions eo = engine_options(a.engine, path, a.context > 0 ? a.context : 4096);
  eo.draft_model = a.spec.draft;
  auto engine = runtime::Engine::load(eo);
  if (!engine.is_ok()) {
    std::cerr << "hypura bench: " << path << ": " << engine.status().message() << "\n";
    return 1;
  }
  runtime::Engine& e = **engine;
  auto rows = run_spec_bench(e, o);
  if (!rows.is_ok()) {
    std::cerr << "hypura bench: --prompt-file: " << rows.status().message() << "\n";
    return 1;
  }
  if (a.json) {
    nlohmann::json j = {{"model", path},         {"arch", e.architecture()},
                        {"mode", e.mode()},      {"device", e.device()},
                        {"draft", a.spec.draft}, {"speculation", spec_json(*rows)}};
    std::cout << j.dump(1) << "\n";
    return 0;
  }
  std::printf("%s: %s, %s on %s; tg%d after %s\n\n%s", path.c_str(), e.architecture().c_str(),
              e.mode().c_str(), e.device().c_str(), a.n_gen, a.prompt_file.c_str(),
              spec_table(*rows).c_str());
  return 0;
}

// A token's traffic per tier by the plan and the memory-bound ceiling it implies
// (scheduler::traffic_bound), at this run's figures where it measured them (the memory
// read bandwidth, the GPU's copy bandwidth, the disk grid), else the profile's.
struct TrafficBoundFigures {
  scheduler::TierTraffic traffic;
  scheduler::TrafficRates rates;
  scheduler::TrafficBound bound;
};

TrafficBoundFigures traffic_bound_figures(const runtime::TieredWeights& tiers, double ram_bps,
                                          double gpu_copy_bps, double h2d_bps,
                                          const eval::StorageReferences& refs) {
  const profiler::HardwareProfile& p = tiers.profile();
  TrafficBoundFigures f;
  f.traffic = scheduler::tier_traffic(tiers.planned().tensors, tiers.plan());
  f.rates.ram_bps = ram_bps > 0 ? ram_bps : p.memory.read_bandwidth_bps;
  f.rates.storage_bps = refs.disk_read_bps() > 0 ? refs.disk_read_bps() : p.storage.seq_read_bps;
  f.rates.gpu_bps = gpu_copy_bps;
  f.rates.bus_bps = h2d_bps;
  if (!p.gpus.empty()) {
    if (f.rates.gpu_bps <= 0) f.rates.gpu_bps = p.gpus.front().memory_bandwidth_bps;
    if (f.rates.bus_bps <= 0) f.rates.bus_bps = p.gpus.front().h2d_pinned_bps;
  }
  f.bound = scheduler::traffic_bound(f.traffic, f.rates);
  return f;
}

nlohmann::json traffic_bound_json(const TrafficBoundFigures& f, double tg_tps) {
  const scheduler::TrafficBound& b = f.bound;
  return {{"gpu_bps", f.rates.gpu_bps},
          {"ram_bps", f.rates.ram_bps},
          {"storage_bps", f.rates.storage_bps},
          {"bus_bps", f.rates.bus_bps},
          {"gpu_s", b.gpu_s},
          {"ram_s", b.ram_s},
          {"storage_s", b.storage_s},
          {"bus_s", b.bus_s},
          {"tps", b.tok_s},
          {"limit", b.limit},
          {"tg_share", b.tok_s > 0 ? tg_tps / b.tok_s : 0}};
}

std::string traffic_bound_text(const TrafficBoundFigures& f, double tg_tps) {
  const auto mib = [](uint64_t bytes) { return static_cast<double>(bytes) / 1048576.0; };
  const scheduler::TrafficBound& b = f.bound;
  char line[512];
  std::snprintf(line, sizeof line,
                "reference: a token reads %.1f MiB from the GPU, %.1f MiB from RAM, %.1f MiB from "
                "storage and moves %.1f KiB over the bus; ",
                mib(f.traffic.gpu_bytes), mib(f.traffic.ram_bytes), mib(f.traffic.storage_bytes),
                static_cast<double>(f.traffic.bus_bytes_per_token) / 1024.0);
  std::string s = line;
  if (b.tok_s <= 0) return s + "bound unknown (a tier's bandwidth is not measured)\n";
  std::snprintf(line, sizeof line,
                "at %.0f / %.1f / %.2f / %.1f GB/s that is %.3f + %.3f + %.3f ms (storage %.3f ms "
                "under them): bound %.2f tok/s (%s); tg %.2f = %.1f%% of it\n",
                f.rates.gpu_bps / 1e9, f.rates.ram_bps / 1e9, f.rates.storage_bps / 1e9,
                f.rates.bus_bps / 1e9, 1e3 * b.gpu_s, 1e3 * b.ram_s, 1e3 * b.bus_s,
                1e3 * b.storage_s, b.tok_s, b.limit.c_str(), tg_tps, 100 * tg_tps / b.tok_s);
  return s + line;
}

// With --context: every test must fit the KV cache (depth + its tokens). Default prompt
// lengths that do not are dropped with a note, as llama-bench clips them; lengths the user
// asked for are an error before anything runs.
Status fit_tests_to_context(BenchArgs& a) {
  if (a.context <= 0) return Status::ok();
  const int max_depth = *std::max_element(a.depths.begin(), a.depths.end());
  const auto fits = [&](int n) { return max_depth + n <= a.context; };
  if (!fits(a.n_gen)) {
    return invalid_argument("tg" + std::to_string(a.n_gen) + " at depth " +
                            std::to_string(max_depth) + " exceeds --context " +
                            std::to_string(a.context));
  }
  std::vector<int> kept;
  for (int p : a.n_prompt) {
    if (fits(p)) {
      kept.push_back(p);
    } else if (a.n_prompt_given) {
      return invalid_argument("pp" + std::to_string(p) + " at depth " + std::to_string(max_depth) +
                              " exceeds --context " + std::to_string(a.context));
    } else {
      std::cerr << "hypura bench: pp" << p << " skipped: it exceeds --context " << a.context
                << "\n";
    }
  }
  if (kept.empty()) kept.push_back(0);
  a.n_prompt = kept;
  return Status::ok();
}

// Everything one bench invocation measured, captured while the engine is alive (the
// --baseline run frees it before the report is rendered).
struct BenchReport {
  std::string path, arch, mode, device, simd;
  int threads = 0, reps = 1;
  uint64_t file_bytes = 0;
  double bytes_per_token = 0;
  double bandwidth = 0;  // memory read bandwidth, before the load (0: not measured)
  double int8_peak = 0;  // MAC/s
  double gpu_copy_bps = 0, h2d_bps = 0;
  struct Row {
    std::string test;
    Stats s;
  };
  std::vector<Row> rows;
  double tg_tps = 0;
  eval::StorageReferences refs;
  std::optional<eval::TierMetrics> tier;
  std::optional<experts::ExpertRunMetrics> experts;
  std::optional<TrafficBoundFigures> traffic;
  scheduler::GpuSplit gpu;
  std::optional<eval::BaselineResult> baseline;
  std::string baseline_refused;

  double tg_memory_bound() const { return bandwidth > 0 ? bandwidth / bytes_per_token : 0; }
};

// The tests in order: per depth every pp size, then tg (so the tg test is the last one,
// which the tier and expert counters span).
struct Test {
  int n, depth;
  bool tg;
};
std::vector<Test> bench_tests(const BenchArgs& a) {
  std::vector<Test> tests;
  for (int depth : a.depths) {
    for (int p : a.n_prompt) {
      if (p > 0) tests.push_back({p, depth, false});
    }
    if (a.n_gen > 0) tests.push_back({a.n_gen, depth, true});
  }
  return tests;
}

// The references measured before the tests: the CPU's int8 peak, the decode probe of the
// model's types, the reload bandwidth of the resident tensors.
void measure_references_before(const BenchArgs& a, runtime::Engine& engine, BenchReport& r) {
  compute::Context* ctx = engine.compute_context();
  r.simd = ctx != nullptr ? ctx->simd_name() : "";
  // The int8 dot-product ceiling of these cores, on the pool the tests use (pp yardstick).
  if (!a.no_reference && ctx != nullptr) r.int8_peak = ctx->int8_peak_macs_per_second(0.5);
  r.refs.memory_read_bps = r.bandwidth;
  runtime::TieredWeights* tiers = engine.mutable_tiers();
  if (a.no_reference || tiers == nullptr) return;
  // The CPU's decode rate of each weight type the model has, in a child (the same-run
  // prediction's compute figure).
  r.refs.decode_rates = profiler::measure_decode_rates_in_child(
      profiler::matrix_shapes(engine.file()), r.threads, profiler::kDecodeProbeSeconds);
  r.refs.load_reference_bps = reference_or_zero(tiers->reload_resident_bps());
}

// The disk's best sequential direct read (the profile's grid, on the model file) and the
// provider's own I/O-only passes, just before and just after the tests, averaged: the
// disk's speed drifts, and this brackets the runs they are compared with.
void measure_storage_references(const BenchArgs& a, runtime::Engine& engine, BenchReport& r) {
  runtime::TieredWeights* tiers = engine.mutable_tiers();
  if (a.no_reference || tiers == nullptr) return;
  if (tiers->experts() == nullptr && tiers->streamed_bytes_per_pass() == 0) return;
  if (Status st = eval::measure_disk_reference(engine.file().paths().front(), r.refs);
      !st.is_ok()) {
    spdlog::warn("bench disk reference not measured: {}", st.message());
  }
  if (const double bps = reference_or_zero(tiers->io_only_stream_bps(2.0)); bps > 0)
    r.refs.pattern_runs.push_back(bps);
}

// On the GPU: its copy bandwidth in this run, the yardstick of tg (docs/GPU.md), and the
// bus's, for the traffic bound of a split (its rows and logits cross it every token).
void measure_gpu_references(const BenchArgs& a, runtime::Engine& engine, BenchReport& r) {
#if HYPURA_HAVE_CUDA
  if (r.device != "cuda" || a.no_reference) return;
  r.gpu_copy_bps = reference_or_zero(compute::cuda::measure_copy_bandwidth(size_t{1} << 30, 5));
  const runtime::TieredWeights* tiers = engine.tiers();
  if (tiers != nullptr && tiers->plan().gpu.any())
    r.h2d_bps = reference_or_zero(compute::cuda::measure_h2d_bandwidth(size_t{256} << 20, 3));
#else
  (void)a, (void)engine, (void)r;
#endif
}

// Runs the pp and tg tests, with the tier and expert counters spanning the timed tg runs.
Status measure_tests(const BenchArgs& a, runtime::Engine& engine, runtime::Session& session,
                     BenchReport& r) {
  const runtime::TieredWeights* tiers = engine.tiers();
  const experts::ExpertProvider* experts = tiers != nullptr ? tiers->experts() : nullptr;
  experts::ExpertStats experts_before;
  eval::TierCounters tier_before;
  Clock::time_point tier_t0;
  for (const Test& test : bench_tests(a)) {
    const auto snapshot = [&] {
      if (!test.tg) return;
      if (experts != nullptr) experts_before = experts->stats();
      if (tiers != nullptr) {
        tier_before = eval::TierCounters::take(*tiers);
        tier_t0 = Clock::now();
      }
    };
    compute::OpProfile profile;
    HYPURA_ASSIGN_OR_RETURN(Stats s, run_test(engine, session, test.n, test.tg, test.depth, a.reps,
                                              a.profile_ops ? &profile : nullptr, snapshot));
    r.rows.push_back({(test.tg ? "tg" : "pp") + std::to_string(test.n) +
                          (test.depth > 0 ? " @ d" + std::to_string(test.depth) : ""),
                      s});
  }
  if (a.n_gen <= 0) return Status::ok();
  r.tg_tps = r.rows.back().s.mean;
  if (tiers != nullptr) {
    const double secs = std::chrono::duration<double>(Clock::now() - tier_t0).count();
    const eval::TierCounters tier_after = eval::TierCounters::take(*tiers);
    if (!r.refs.disk_runs.empty() || !r.refs.pattern_runs.empty())
      measure_storage_references(a, engine, r);
    r.tier = eval::tier_metrics(*tiers, tier_before, tier_after, a.n_gen * a.reps, secs, r.refs);
  }
  if (experts != nullptr) {
    experts::ExpertRunMetrics m =
        experts::expert_run_metrics(*experts, experts_before, experts->stats(), a.n_gen * a.reps);
    const scheduler::Prediction pr = tiers->predict_with(r.refs.same_run_profile(tiers->profile()));
    set_expert_bound(m, r.tg_tps, r.refs.disk_read_bps(), r.refs.pattern_read_bps(),
                     {pr.compute_s, pr.seconds_per_token - pr.compute_s, pr.expert_hit_rate,
                      pr.expert_misses_per_token});
    r.experts = m;
  }
  return Status::ok();
}

// --baseline: the plain mmap run, after this engine's memory is given back.
void run_baseline(const BenchArgs& a, const std::string& path, int64_t n_ctx,
                  std::unique_ptr<runtime::Session>& session,
                  std::unique_ptr<runtime::Engine>& engine, BenchReport& r) {
  if (!a.baseline || a.n_gen <= 0) return;
  Status allowed = eval::mmap_baseline_allowed(engine->file(), a.force);
  if (!allowed.is_ok()) {
    r.baseline_refused = allowed.message();
    std::cerr << "hypura bench: " << r.baseline_refused << "\n";
    return;
  }
  auto plain_file = gguf::GgufFile::open(path);
  session.reset();
  engine.reset();
  if (!plain_file.is_ok()) {
    r.baseline_refused = plain_file.status().message();
    return;
  }
  auto b = eval::run_mmap_baseline(*plain_file, a.n_gen, r.threads, n_ctx);
  if (b.is_ok())
    r.baseline = *b;
  else
    r.baseline_refused = b.status().message();
}

// Loads the model, runs every test and measures the same-run references.
Result<BenchReport> measure_bench(const BenchArgs& a, const std::string& path) {
  BenchReport r;
  r.path = path;
  const int max_prompt = *std::max_element(a.n_prompt.begin(), a.n_prompt.end());
  const int max_depth = *std::max_element(a.depths.begin(), a.depths.end());
  runtime::EngineOptions eo = engine_options(
      a.engine, path, a.context > 0 ? a.context : max_depth + std::max(max_prompt, a.n_gen) + 1);
  eo.n_ctx_past_trained = true;  // pp4096 on a 2048-token model, as llama-bench runs it
  eo.trace_path = a.trace;
  r.threads = a.engine.threads > 0 ? a.engine.threads : runtime::physical_cores();
  r.reps = a.reps;
  // The memory reference first, in a child process: its 1 GiB buffer must not count in
  // this process's peak RSS, which bench compares with --ram-budget.
  if (!a.no_reference) {
    profiler::MemoryBandwidthOptions mo;
    mo.n_threads = r.threads;
    if (profiler::child_fits(profiler::memory_probe_bytes(mo), "the memory bandwidth reference"))
      r.bandwidth = profiler::measure_memory_read_bandwidth_in_child(mo).read_bytes_per_second;
  }
  auto loaded = runtime::Engine::load(eo);
  if (!loaded.is_ok()) return loaded.status().with_context(path);
  std::unique_ptr<runtime::Engine> engine = std::move(loaded).value();
  std::unique_ptr<runtime::Session> session = engine->new_session();
  const gguf::GgufFile& file = engine->file();
  r.arch = engine->architecture();
  r.mode = engine->mode();
  r.device = engine->device();
  r.file_bytes = file.total_bytes();
  r.bytes_per_token = bytes_per_token(file);
  measure_references_before(a, *engine, r);
  measure_storage_references(a, *engine, r);
  HYPURA_RETURN_IF_ERROR(measure_tests(a, *engine, *session, r));
  measure_gpu_references(a, *engine, r);
  if (const runtime::TieredWeights* tiers = engine->tiers(); tiers != nullptr) {
    r.gpu = tiers->plan().gpu;
    if (a.n_gen > 0)
      r.traffic = traffic_bound_figures(*tiers, r.bandwidth, r.gpu_copy_bps, r.h2d_bps, r.refs);
  }
  run_baseline(a, path, eo.n_ctx, session, engine, r);
  return r;
}

double baseline_speedup(const BenchReport& r) {
  return r.baseline && r.baseline->tg_tok_s > 0 && r.tier ? r.tier->tok_s / r.baseline->tg_tok_s
                                                          : 0;
}

nlohmann::json ops_json(const Stats& s) {
  nlohmann::json ops = nlohmann::json::array();
  for (const compute::OpProfile::Entry& e : s.ops) {
    ops.push_back({{"op", e.key.op},
                   {"type", e.key.n_cols > 0 ? gguf::type_name(e.key.type) : ""},
                   {"n_cols", e.key.n_cols},
                   {"n_rows", e.key.n_rows},
                   {"calls", e.stats.calls},
                   {"seconds", e.stats.seconds},
                   {"macs", e.stats.macs}});
  }
  return ops;
}

nlohmann::json bench_json(const BenchArgs& a, const BenchReport& r) {
  nlohmann::json j;
  j["model"] = r.path;
  j["arch"] = r.arch;
  j["mode"] = r.mode;
  j["size_bytes"] = r.file_bytes;
  j["threads"] = r.threads;
  j["kv_type"] = a.engine.kv_type;
  j["reps"] = a.reps;
  j["bytes_per_token"] = r.bytes_per_token;
  j["memory_read_bandwidth_bps"] = r.bandwidth;
  j["tg_memory_bound_tps"] = r.tg_memory_bound();
  j["int8_peak_gmacs"] = r.int8_peak / 1e9;
  for (const profiler::DecodeRate& d : r.refs.decode_rates) {
    j["decode_bps"][profiler::decode_shape_name(d)] = d.bps;
    j["decode_overhead_s"][profiler::decode_shape_name(d)] = d.overhead_s;
  }
  j["simd"] = r.simd;
  j["device"] = r.device;
  if (r.gpu_copy_bps > 0) {
    j["gpu_copy_bandwidth_bps"] = r.gpu_copy_bps;
    j["tg_share_of_gpu_copy_bandwidth"] = r.tg_tps * r.bytes_per_token / r.gpu_copy_bps;
  }
  if (r.experts) j["experts"] = experts::expert_run_json(*r.experts);
  if (r.tier) j["tiers"] = eval::tier_metrics_json(*r.tier);
  if (r.traffic) {
    const scheduler::TierTraffic& t = r.traffic->traffic;
    j["traffic_per_token"] = {{"gpu_bytes", t.gpu_bytes},
                              {"ram_bytes", t.ram_bytes},
                              {"storage_bytes", t.storage_bytes},
                              {"bus_bytes", t.bus_bytes_per_token},
                              {"prompt_batch_bus_bytes", t.prompt_bus_bytes},
                              {"gpu_layers", r.gpu.layers},
                              {"gpu_head", r.gpu.head},
                              {"bound", traffic_bound_json(*r.traffic, r.tg_tps)}};
  }
  if (r.baseline) {
    j["baseline"] = {{"method", "mmap"},
                     {"tg_tps", r.baseline->tg_tok_s},
                     {"tokens", r.baseline->tokens},
                     {"peak_rss_bytes", r.baseline->peak_rss},
                     {"speedup", baseline_speedup(r)}};
  } else if (!r.baseline_refused.empty()) {
    j["baseline"] = {{"refused", r.baseline_refused}};
  }
  for (const auto& row : r.rows) {
    j["tests"].push_back(
        {{"test", row.test},
         {"tps_mean", row.s.mean},
         {"tps_stddev", row.s.stddev},
         {"gflops", row.s.gflops},
         {"pool_jobs_per_token", row.s.jobs_per_token},
         {"share_of_int8_peak", r.int8_peak > 0 ? row.s.gflops * 1e9 / (2 * r.int8_peak) : 0}});
    if (row.s.timed_seconds > 0) {
      j["tests"].back()["ops"] = ops_json(row.s);
      j["tests"].back()["timed_seconds"] = row.s.timed_seconds;
    }
  }
  return j;
}

// --profile-ops: one test's operations, most time first, as a share of its timed runs
// (ops under half a percent folded into one line; "outside the blocks" is the rest of the
// wall time: the forward's bookkeeping, logits and session work).
void print_ops_table(const BenchReport::Row& row, int reps) {
  if (row.s.timed_seconds <= 0) return;
  const double total = row.s.timed_seconds;
  std::printf("\n%s: where the time goes (exclusive time per run)\n", row.test.c_str());
  std::printf("| share | ms | GFLOP/s | calls | op |\n| ---: | ---: | ---: | ---: | --- |\n");
  const auto line = [&](double seconds, double macs, double calls, const std::string& op) {
    char gflops[16] = "";
    if (macs > 0) std::snprintf(gflops, sizeof gflops, "%.1f", 2 * macs / seconds / 1e9);
    std::printf("| %.1f%% | %.2f | %s | %.0f | %s |\n", 100 * seconds / total, 1e3 * seconds / reps,
                gflops, calls / reps, op.c_str());
  };
  double small = 0, counted = 0;
  int n_small = 0;
  for (const compute::OpProfile::Entry& e : row.s.ops) {
    counted += e.stats.seconds;
    if (e.stats.seconds < 0.005 * total) {
      small += e.stats.seconds;
      ++n_small;
      continue;
    }
    line(e.stats.seconds, e.stats.macs, static_cast<double>(e.stats.calls), e.key.label());
  }
  if (n_small > 0) line(small, 0, 0, fmt::format("{} smaller ops", n_small));
  line(std::max(0.0, total - counted), 0, 0, "outside the blocks");
}

void print_bench_table(const BenchReport& r) {
  std::printf("device: %s\n", r.device.c_str());
  std::printf("| model | arch | size | mode | threads | test | t/s | GFLOP/s | of int8 peak |\n");
  std::printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
  const double file_gib = static_cast<double>(r.file_bytes) / (1 << 30);
  for (const auto& row : r.rows) {
    // Without the peak probe (--no-reference) the share is unknown, not zero.
    char share[16] = "-";
    if (r.int8_peak > 0)
      std::snprintf(share, sizeof share, "%.0f%%", 100 * row.s.gflops * 1e9 / (2 * r.int8_peak));
    std::printf("| %s | %s | %.2f GiB | %s | %d | %s | %.2f ± %.2f | %.1f | %s |\n", r.path.c_str(),
                r.arch.c_str(), file_gib, r.mode.c_str(), r.threads, row.test.c_str(), row.s.mean,
                row.s.stddev, row.s.gflops, share);
  }
  // The fan-outs a token costs on the CPU pool: the overhead that small models' steps pay.
  std::string jobs;
  for (const auto& row : r.rows) {
    if (row.s.jobs_per_token > 0)
      jobs +=
          (jobs.empty() ? "" : ", ") + row.test + " " + fmt::format("{:.1f}", row.s.jobs_per_token);
  }
  if (!jobs.empty()) std::printf("CPU pool jobs per token: %s\n", jobs.c_str());
}

void print_bench_references(const BenchReport& r) {
  if (r.int8_peak > 0) {
    std::printf(
        "\nreference: int8 dot-product peak %.1f GMAC/s = %.1f GFLOP/s on %d threads (%s, "
        "register-only %s loop)\n",
        r.int8_peak / 1e9, 2 * r.int8_peak / 1e9, r.threads, r.simd.c_str(),
        r.simd == "amx" ? "TDPBUSD" : "maddubs/madd");
  }
  const double mib_per_token = r.bytes_per_token / 1048576.0;
  if (r.gpu_copy_bps > 0) {
    std::printf(
        "\nreference: GPU copy bandwidth %.0f GB/s (1 GiB device-to-device, read + written); "
        "tg reads %.1f MiB of weights per token: %.2f tok/s = %.0f GB/s = %.1f%% of it\n",
        r.gpu_copy_bps / 1e9, mib_per_token, r.tg_tps, r.tg_tps * r.bytes_per_token / 1e9,
        100 * r.tg_tps * r.bytes_per_token / r.gpu_copy_bps);
  }
  if (r.traffic) std::printf("\n%s", traffic_bound_text(*r.traffic, r.tg_tps).c_str());
  if (!r.refs.decode_rates.empty()) {
    std::printf("\nreference: decode probe (one token's products from RAM, %d threads):",
                r.threads);
    for (const profiler::DecodeRate& d : r.refs.decode_rates)
      std::printf(" %s %.1f GB/s + %.1f us", profiler::decode_shape_name(d).c_str(), d.bps / 1e9,
                  1e6 * std::max(0.0, d.overhead_s));
    std::printf("\n");
  }
  if (r.bandwidth > 0) {
    std::printf(
        "\nreference: memory read bandwidth %.2f GB/s / %.1f MiB read per token = "
        "%.2f tok/s (tg ceiling)\n",
        r.bandwidth / 1e9, mib_per_token, r.tg_memory_bound());
  }
}

void print_bench_text(const BenchReport& r) {
  print_bench_table(r);
  for (const auto& row : r.rows) print_ops_table(row, r.reps);
  if (r.experts) std::printf("\n%s", experts::expert_run_text(*r.experts).c_str());
  if (r.tier) std::printf("\n%s", eval::tier_metrics_text(*r.tier).c_str());
  if (r.baseline) {
    std::printf("baseline (plain mmap): tg %.3f tok/s over %d tokens; hypura is %.2fx faster\n",
                r.baseline->tg_tok_s, r.baseline->tokens, baseline_speedup(r));
  }
  print_bench_references(r);
}

int run_bench(const BenchArgs& a) {
  const std::string path = resolve_model_path(a.model);
  if (path.empty()) {
    std::cerr << "hypura bench: no model given and no default model in test-models/\n";
    return 2;
  }
  if (!a.sweep.empty()) return run_sweep_bench(a, path);
  if (!a.batch.empty()) return run_batched_bench(a, path);
  if (!a.prompt_file.empty()) return run_speculation_bench(a, path);
  if (a.spec.lookup || !a.spec.draft.empty()) {
    std::cerr << "hypura bench: --lookup and --draft measure generation after real text: give "
                 "--prompt-file FILE\n";
    return 2;
  }
  BenchArgs clipped = a;
  if (Status st = fit_tests_to_context(clipped); !st.is_ok()) {
    std::cerr << "hypura bench: " << st.message() << "\n";
    return 2;
  }
  auto report = measure_bench(clipped, path);
  if (!report.is_ok()) {
    std::cerr << "hypura bench: " << report.status().message() << "\n";
    return 1;
  }
  if (a.json)
    std::cout << bench_json(a, *report).dump(1) << "\n";
  else
    print_bench_text(*report);
  return 0;
}

std::function<int()> setup_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  app.add_option("model", a->model, "GGUF file; default: the default test model");
  auto* n_prompt = app.add_option("-p,--n-prompt", a->n_prompt,
                                  "prompt tokens of the pp tests, a list (0: skip)")
                       ->delimiter(',')
                       ->capture_default_str()
                       ->check(CLI::Range(0, 1 << 20));
  app.add_option("-d,--depth", a->depths,
                 "tokens already in the KV cache before each test, a list (like llama-bench -d)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("-n,--n-gen", a->n_gen, "generated tokens (tg test; 0: skip)")
      ->capture_default_str();
  app.add_option("-r,--repetitions", a->reps, "timed runs per test")->capture_default_str();
  add_engine_flags(app, &a->engine);
  app.add_flag("--json", a->json, "one JSON record instead of the table");
  app.add_option("--trace", a->trace, "expert-streaming mode: record the routing trace to FILE");
  app.add_flag("--no-reference", a->no_reference,
               "skip the memory bandwidth, disk grid and I/O-only pass measurements");
  app.add_option("--context", a->context, "KV cache length (default: just enough for the tests)")
      ->check(CLI::Range(int64_t{0}, kMaxContextTokens));
  app.add_flag(
      "--baseline", a->baseline,
      "also generate the plain way (weights through mmap, no planner) and print the speed-up");
  app.add_flag("--force", a->force, "run --baseline even when the model exceeds RAM minus 4 GiB");
  auto* sweep = app.add_option("--sweep", a->sweep,
                               "run the tg test under each RAM budget of a list (e.g. 1G,2G,3G), "
                               "each in a fresh process, and print tok/s against the budget")
                    ->delimiter(',');
  app.add_option("--plot", a->plot, "with --sweep: write an SVG chart of the sweep to FILE")
      ->needs(sweep);
  auto* batch =
      app.add_option("--batch", a->batch,
                     "decode this many sequences at once, a list (e.g. 1,2,4,8): aggregate and "
                     "per-sequence tok/s, like llama-batched-bench; uses the first -p and -n")
          ->delimiter(',')
          ->check(CLI::Range(1, 32));
  batch->excludes(sweep);
  add_spec_flags(app, &a->spec);
  app.add_flag("--profile-ops", a->profile_ops,
               "time every operation of the CPU's forward pass (products by weight format and "
               "shape, attention, norms, ...) and print where each test's time goes");
  app.add_option("--prompt-file", a->prompt_file,
                 "generate -n tokens greedily after this file's text (the user's turn of the chat "
                 "template), without and with --lookup or --draft: tok/s, guesses kept, tokens "
                 "per pass (docs/SPECULATIVE.md)")
      ->check(CLI::ExistingFile)
      ->excludes(batch)
      ->excludes(sweep);
  sweep->excludes(app.get_option("--ram-budget"));
  sweep->excludes(
      app.get_option("--json"));  // a sweep prints its table (its children's JSON is read)
  return [a, n_prompt] {
    a->n_prompt_given = n_prompt->count() > 0;
    return run_bench(*a);
  };
}

const Registrar kRegistrar({"bench", "measure prompt and generation speed", 40, setup_bench});

}  // namespace
}  // namespace hypura::cli
