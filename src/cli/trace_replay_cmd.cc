// `hypura trace-replay [TRACE] [--generate N | --uniform N] [--sizes F,F..] [--capacity N]
//                      [--warmup T] [--save FILE] [--json]`
//
// Replays a routing trace (recorded with `hypura run|bench --trace FILE`, or generated)
// against the expert-cache policies at several cache sizes and against Belady's optimal
// offline policy, and prints each policy's hit rate after warm-up and its ratio to
// Belady's. --generate makes a trace with locality calibrated to Qwen3-30B-A3B
// (routing_trace.h; its locality figures are printed too); --uniform one with random
// routing. Sizes are fractions of all (layer, expert) pairs; --capacity adds an absolute
// size (e.g. the planner's expert_cache_experts). Generated traces also get the
// distribution oracle's hit rate (trace_replay.h: an online cache that knows the
// generator's probabilities, the ceiling of online policies) and the rule that reached it.
//
// `hypura trace-replay --predictors MODEL [--tokens N]` instead measures the two
// next-layer expert predictors (layer L+1's router on layer L's hidden state, and the
// co-activation statistics) on a forward pass of N tokens through MODEL
// (runtime/expert_predictor_eval.h): precision, recall and the bytes wrong guesses waste.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/command.h"
#include "eval/expert_predictor_eval.h"
#include "eval/trace_replay.h"
#include "experts/routing_trace.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace hypura::cli {
namespace {

using experts::CachePolicy;

struct ReplayArgs {
  std::string trace_path, save_path;
  int generate = 0, uniform = 0;
  int n_layer = 48, n_expert = 128, n_expert_used = 8;
  uint64_t seed = 1;
  std::vector<double> sizes{0.1, 0.25, 0.4, 0.6};
  std::vector<uint32_t> capacities;
  int warmup = 64;
  bool json = false;
  std::string predictors_model;  // --predictors
  int predictor_tokens = 64;
};

// Token ids for the predictor pass: a fixed pseudo-random sequence (xorshift), so runs
// are comparable; ids 1..n_vocab-1.
std::vector<int32_t> predictor_tokens(int n, int64_t n_vocab, uint64_t seed) {
  std::vector<int32_t> out;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out.push_back(static_cast<int32_t>(1 + x % static_cast<uint64_t>(n_vocab - 1)));
  }
  return out;
}

int run_predictors(const ReplayArgs& a) {
  auto file = gguf::GgufFile::open(a.predictors_model);
  if (!file.is_ok()) {
    std::cerr << "hypura trace-replay: " << file.status().message() << "\n";
    return 1;
  }
  auto model = model::Model::create(*file);
  if (!model.is_ok()) {
    std::cerr << "hypura trace-replay: " << model.status().message() << "\n";
    return 1;
  }
  const std::vector<int32_t> tokens =
      predictor_tokens(a.predictor_tokens, (*model)->hparams().n_vocab, a.seed);
  auto ev = eval::evaluate_expert_predictors(*file, *model, tokens);
  if (!ev.is_ok()) {
    std::cerr << "hypura trace-replay: " << ev.status().message() << "\n";
    return 1;
  }
  const auto row = [](const eval::PredictorScore& s) {
    return nlohmann::json{{"predicted", s.predicted}, {"correct", s.correct},
                          {"chosen", s.chosen},       {"precision", s.precision()},
                          {"recall", s.recall()},     {"wasted_bytes", s.wasted_bytes}};
  };
  if (a.json) {
    std::cout << nlohmann::json{{"tokens", ev->n_tokens},    {"n_layer", ev->n_layer},
                                {"n_expert", ev->n_expert},  {"n_expert_used", ev->n_expert_used},
                                {"router", row(ev->router)}, {"coactivation", row(ev->coact)}}
                     .dump(2)
              << "\n";
    return 0;
  }
  std::printf("%lld tokens x %d layer pairs, %d experts (%d used): chance precision %.3f\n",
              static_cast<long long>(ev->n_tokens), ev->n_layer - 1, ev->n_expert,
              ev->n_expert_used, static_cast<double>(ev->n_expert_used) / ev->n_expert);
  std::printf("%-34s %10s %10s %9s %7s %16s\n", "predictor of layer L+1", "predicted", "precision",
              "recall", "", "wasted MiB/token");
  for (const auto& [label, s] : {std::pair<const char*, const eval::PredictorScore*>{
                                     "router(L+1) on hidden(L)", &ev->router},
                                 {"co-activation (online, >= 0.5)", &ev->coact}}) {
    std::printf("%-34s %10llu %9.1f%% %8.1f%% %7s %16.2f\n", label,
                static_cast<unsigned long long>(s->predicted), 100 * s->precision(),
                100 * s->recall(), "", s->wasted_bytes / 1048576.0 / ev->n_tokens);
  }
  return 0;
}

experts::TraceGenerator generator_of(const ReplayArgs& a) {
  experts::TraceGenerator g;
  g.n_layer = a.n_layer;
  g.n_expert = a.n_expert;
  g.n_expert_used = a.n_expert_used;
  g.seed = a.seed;
  if (a.uniform > 0) {  // the generator's mixture with only random draws: uniform routing
    g.p_previous = 0;
    g.p_recent = 0;
    g.p_cold = 1;
  }
  return g;
}

Result<experts::RoutingTrace> obtain_trace(const ReplayArgs& a) {
  if (a.generate > 0) return generator_of(a).generate(a.generate);
  if (a.uniform > 0)
    return experts::uniform_trace(a.n_layer, a.n_expert, a.n_expert_used, a.uniform, a.seed);
  if (a.trace_path.empty())
    return invalid_argument("give a trace file, --generate N or --uniform N");
  return experts::RoutingTrace::read(a.trace_path);
}

// The distribution oracle's three rules; the best is the ceiling.
nlohmann::json oracle_row(const experts::RoutingTrace& t, const experts::TraceGenerator& gen,
                          uint32_t cap, int warmup, double best) {
  using eval::OracleRule;
  nlohmann::json row;
  double top = -1;
  for (const auto& [rule, name] : {std::pair{OracleRule::kExpectedWait, "expected-wait"},
                                   std::pair{OracleRule::kNextToken, "next-token"},
                                   std::pair{OracleRule::kPerLayer, "per-layer"}}) {
    const double h = eval::replay_oracle(t, gen, cap, warmup, rule).hit_rate();
    row["rules"][name] = h;
    if (h > top) {
      top = h;
      row["rule"] = name;
    }
  }
  row["hit_rate"] = top;
  row["ratio_to_belady"] = best > 0 ? top / best : 0;
  return row;
}

int run_replay(const ReplayArgs& a) {
  auto trace = obtain_trace(a);
  if (!trace.is_ok()) {
    std::cerr << "hypura trace-replay: " << trace.status().message() << "\n";
    return trace.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const experts::RoutingTrace& t = *trace;
  if (!a.save_path.empty()) {
    if (Status st = t.write(a.save_path); !st.is_ok()) {
      std::cerr << "hypura trace-replay: " << st.message() << "\n";
      return 1;
    }
  }
  const uint64_t all = static_cast<uint64_t>(t.n_layer) * t.n_expert;
  std::vector<uint32_t> caps = a.capacities;
  for (double f : a.sizes) caps.push_back(static_cast<uint32_t>(std::max(1.0, f * all)));
  const experts::TraceLocality loc = experts::measure_locality(t, 8);
  nlohmann::json out;
  out["trace"] = {{"n_layer", t.n_layer},
                  {"n_expert", t.n_expert},
                  {"n_expert_used", t.n_expert_used},
                  {"records", t.records.size()},
                  {"tokens", loc.tokens},
                  {"repeat_next", loc.repeat_next},
                  {"recur_within_8", loc.recur_within}};
  out["warmup_tokens"] = a.warmup;
  out["results"] = nlohmann::json::array();
  const CachePolicy policies[] = {CachePolicy::kLru,     CachePolicy::kLfu,
                                  CachePolicy::kAgedLfu, CachePolicy::kLayerAware,
                                  CachePolicy::kLearned, CachePolicy::kAdaptive};
  // Generated traces also get the distribution oracle (trace_replay.h): the ceiling of
  // online policies, its best rule reported.
  const bool oracle = a.generate > 0 || a.uniform > 0;
  const experts::TraceGenerator gen = generator_of(a);
  for (uint32_t cap : caps) {
    nlohmann::json row;
    row["capacity"] = cap;
    row["fraction"] = static_cast<double>(cap) / all;
    const double best = eval::replay(t, cap, std::nullopt, a.warmup).hit_rate();
    row["belady"] = best;
    for (CachePolicy p : policies) {
      const double h = eval::replay(t, cap, p, a.warmup).hit_rate();
      row[experts::cache_policy_name(p)] = {{"hit_rate", h},
                                            {"ratio_to_belady", best > 0 ? h / best : 0}};
    }
    if (oracle) row["oracle"] = oracle_row(t, gen, cap, a.warmup, best);
    out["results"].push_back(row);
  }
  if (a.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf(
      "trace: %d layers, %d experts, %d used, %llu tokens; repeat at next token %.1f%%, "
      "recur within 8 tokens %.1f%%; hits counted after %d tokens\n",
      t.n_layer, t.n_expert, t.n_expert_used, static_cast<unsigned long long>(loc.tokens),
      100 * loc.repeat_next, 100 * loc.recur_within, a.warmup);
  std::printf("%10s %7s | %8s |", "capacity", "of all", "belady");
  for (CachePolicy p : policies) {
    std::printf(" %-17s", (std::string(experts::cache_policy_name(p)) + " (ratio)").c_str());
  }
  if (oracle) std::printf(" %-17s", "oracle (ratio)");
  std::printf("\n");
  for (const auto& row : out["results"]) {
    std::printf("%10u %6.1f%% | %7.2f%% |", row["capacity"].get<uint32_t>(),
                100 * row["fraction"].get<double>(), 100 * row["belady"].get<double>());
    for (CachePolicy p : policies) {
      const auto& r = row[experts::cache_policy_name(p)];
      std::printf(" %6.2f%% (%.3f)  ", 100 * r["hit_rate"].get<double>(),
                  r["ratio_to_belady"].get<double>());
    }
    if (oracle) {
      const auto& r = row["oracle"];
      std::printf(" %6.2f%% (%.3f) %s", 100 * r["hit_rate"].get<double>(),
                  r["ratio_to_belady"].get<double>(), r["rule"].get<std::string>().c_str());
    }
    std::printf("\n");
  }
  return 0;
}

std::function<int()> setup_replay(CLI::App& app) {
  auto a = std::make_shared<ReplayArgs>();
  app.add_option("trace", a->trace_path, "routing trace file (hypura run|bench --trace FILE)");
  app.add_option("--generate", a->generate,
                 "generate N tokens of a trace calibrated to Qwen3-30B-A3B locality");
  app.add_option("--uniform", a->uniform, "generate N tokens of uniformly random routing");
  app.add_option("--layers", a->n_layer, "generated traces: MoE layers (default 48)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--experts", a->n_expert, "generated traces: experts per layer (default 128)")
      ->check(CLI::Range(2, 4096));
  app.add_option("--used", a->n_expert_used, "generated traces: experts per token (default 8)")
      ->check(CLI::Range(1, 64));
  app.add_option("--seed", a->seed, "generated traces: random seed");
  app.add_option("--sizes", a->sizes,
                 "cache sizes as fractions of all experts (default 0.1 0.25 0.4 0.6)")
      ->delimiter(',');
  app.add_option("--capacity", a->capacities, "cache sizes in experts (e.g. the planner's)")
      ->delimiter(',');
  app.add_option("--warmup", a->warmup, "tokens before hits are counted (default 64)");
  app.add_option("--save", a->save_path, "write the (generated) trace to FILE");
  app.add_flag("--json", a->json, "print JSON");
  app.add_option("--predictors", a->predictors_model,
                 "measure the next-layer expert predictors on a forward pass of MODEL instead");
  app.add_option("--tokens", a->predictor_tokens, "--predictors: tokens in the pass (default 64)")
      ->check(CLI::Range(1, 4096));
  return [a] {
    if (a->n_expert_used > a->n_expert) {
      std::cerr << "hypura trace-replay: --used must not exceed --experts\n";
      return 2;
    }
    if (!a->predictors_model.empty()) return run_predictors(*a);
    return run_replay(*a);
  };
}

const Registrar kRegistrar(
    {"trace-replay", "replay a routing trace against expert-cache policies and Belady's optimum",
     75, setup_replay});

}  // namespace
}  // namespace hypura::cli
