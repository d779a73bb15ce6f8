#include "cli/batch_bench.h"

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "eval/tier_metrics.h"
#include "runtime/sampler.h"
#include "runtime/tiered_weights.h"

namespace hypura::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::vector<int32_t> random_prompt(int64_t n_vocab, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(n_vocab - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

uint64_t bytes_read(const runtime::Engine& e) {
  return e.tiers() != nullptr ? eval::TierCounters::take(*e.tiers()).bytes_read : 0;
}

// One run of B sequences: the prompts at once, a barrier, then the decode loops.
struct RunTimes {
  double pp_s = 0, tg_s = 0, tg_tps_per_seq = 0;
  runtime::StepCounts steps;  // of the generation
  uint64_t bytes = 0;         // read during the generation
};

// Prompts differ between sequences and runs (seed), so no run replays an earlier one's
// routing into a warm expert cache.
Result<RunTimes> run_once(runtime::Engine& engine,
                          std::vector<std::unique_ptr<runtime::Session>>& sessions, int batch,
                          const BatchBenchOptions& o, int n_gen, uint32_t seed) {
  RunTimes t;
  Clock::time_point t0, t1;
  runtime::StepCounts steps0;
  uint64_t bytes0 = 0;
  std::barrier start(batch, [&]() noexcept { t0 = Clock::now(); });
  std::barrier prompted(batch, [&]() noexcept {
    t1 = Clock::now();
    steps0 = engine.step_counts();
    bytes0 = bytes_read(engine);
  });
  std::vector<Clock::time_point> ends(static_cast<size_t>(batch));
  std::vector<Status> status(static_cast<size_t>(batch));
  std::vector<std::thread> threads;
  for (int i = 0; i < batch; ++i) {
    threads.emplace_back([&, i] {
      runtime::Session& s = *sessions[static_cast<size_t>(i)];
      s.reset();
      const auto prompt =
          random_prompt(engine.n_vocab(), o.n_prompt, seed + static_cast<uint32_t>(i));
      std::vector<float> logits;
      start.arrive_and_wait();
      Status st = s.prefill(prompt, &logits);
      prompted.arrive_and_wait();  // every thread arrives, failed or not
      s.set_batch_member(true);
      for (int k = 0; k < n_gen && st.is_ok(); ++k)
        st = s.prefill({runtime::Sampler::argmax(logits.data(), engine.n_vocab())}, &logits);
      s.set_batch_member(false);
      ends[static_cast<size_t>(i)] = Clock::now();
      status[static_cast<size_t>(i)] = st;
    });
  }
  for (auto& th : threads) th.join();
  for (const Status& st : status) HYPURA_RETURN_IF_ERROR(st);
  const runtime::StepCounts steps1 = engine.step_counts();
  t.pp_s = seconds(t1 - t0);
  t.tg_s = seconds(*std::max_element(ends.begin(), ends.end()) - t1);
  for (const auto& end : ends) t.tg_tps_per_seq += n_gen / seconds(end - t1) / batch;
  t.steps = {steps1.steps - steps0.steps, steps1.rows - steps0.rows, steps1.seqs - steps0.seqs,
             steps1.pass_s - steps0.pass_s};
  t.bytes = bytes_read(engine) - bytes0;
  return t;
}

}  // namespace

Result<std::vector<BatchRow>> run_batch_bench(runtime::Engine& engine, const BatchBenchOptions& o) {
  if (o.n_prompt < 1) return invalid_argument("--batch needs a prompt of at least one token (-p)");
  if (o.n_gen < 1) return invalid_argument("--batch needs tokens to generate (-n)");
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  std::vector<std::unique_ptr<runtime::Session>> sessions;
  for (int i = 0; i < max_batch; ++i) sessions.push_back(engine.new_session());
  // Warm-up: faults the weights in (and warms an expert cache) once for every size.
  uint32_t seed = 1234;
  HYPURA_RETURN_IF_ERROR(run_once(engine, sessions, 1, o, std::min(o.n_gen, 8), seed).status());
  std::vector<BatchRow> rows;
  for (int b : o.batches) {
    BatchRow row;
    row.batch = b;
    std::vector<double> tg;
    runtime::StepCounts steps;
    uint64_t bytes = 0;
    for (int r = 0; r < o.reps; ++r) {
      seed += 100;
      HYPURA_ASSIGN_OR_RETURN(RunTimes t, run_once(engine, sessions, b, o, o.n_gen, seed));
      row.pp_tps += static_cast<double>(b) * o.n_prompt / t.pp_s / o.reps;
      tg.push_back(static_cast<double>(b) * o.n_gen / t.tg_s);
      row.tg_tps_per_seq += t.tg_tps_per_seq / o.reps;
      steps.steps += t.steps.steps;
      steps.seqs += t.steps.seqs;
      row.pass_share += t.steps.pass_s / t.tg_s / o.reps;
      bytes += t.bytes;
    }
    for (double v : tg) row.tg_tps += v / static_cast<double>(tg.size());
    if (tg.size() > 1) {
      double ss = 0;
      for (double v : tg) ss += (v - row.tg_tps) * (v - row.tg_tps);
      row.tg_tps_stddev = std::sqrt(ss / static_cast<double>(tg.size() - 1));
    }
    row.seqs_per_step =
        steps.steps > 0 ? static_cast<double>(steps.seqs) / static_cast<double>(steps.steps) : 0;
    row.read_bytes_per_token =
        static_cast<double>(bytes) / (static_cast<double>(b) * o.n_gen * o.reps);
    rows.push_back(row);
  }
  return rows;
}

namespace {
double single_tps(const std::vector<BatchRow>& rows) {
  for (const auto& r : rows) {
    if (r.batch == 1) return r.tg_tps;
  }
  return 0;
}
}  // namespace

std::string batch_table(const std::vector<BatchRow>& rows, const BatchBenchOptions& o) {
  const double one = single_tps(rows);
  std::string out =
      "| B | pp" + std::to_string(o.n_prompt) + " t/s (all) | tg" + std::to_string(o.n_gen) +
      " t/s (all) | tg t/s per sequence | vs B=1 | sequences per step | in passes | read per "
      "token |\n"
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
  char line[256];
  for (const auto& r : rows) {
    char speedup[16] = "-";
    if (one > 0) std::snprintf(speedup, sizeof speedup, "%.2fx", r.tg_tps / one);
    std::snprintf(line, sizeof line,
                  "| %d | %.2f | %.2f ± %.2f | %.2f | %s | %.2f | %.0f%% | %.1f MiB |\n", r.batch,
                  r.pp_tps, r.tg_tps, r.tg_tps_stddev, r.tg_tps_per_seq, speedup, r.seqs_per_step,
                  100 * r.pass_share, r.read_bytes_per_token / 1048576.0);
    out += line;
  }
  return out;
}

nlohmann::json batch_json(const std::vector<BatchRow>& rows, const BatchBenchOptions& o) {
  const double one = single_tps(rows);
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows) {
    j.push_back({{"batch", r.batch},
                 {"n_prompt", o.n_prompt},
                 {"n_gen", o.n_gen},
                 {"pp_tps", r.pp_tps},
                 {"tg_tps", r.tg_tps},
                 {"tg_tps_stddev", r.tg_tps_stddev},
                 {"tg_tps_per_seq", r.tg_tps_per_seq},
                 {"speedup_vs_1", one > 0 ? r.tg_tps / one : 0},
                 {"seqs_per_step", r.seqs_per_step},
                 {"pass_share", r.pass_share},
                 {"read_bytes_per_token", r.read_bytes_per_token}});
  }
  return j;
}

}  // namespace hypura::cli
