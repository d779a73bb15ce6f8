#include "experts/expert_metrics.h"

#include <algorithm>
#include <cstdio>

namespace hypura::experts {
namespace {
double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

PredictorRunMetrics predictor_metrics(const PredictorStats& before, const PredictorStats& after,
                                      double tokens) {
  PredictorRunMetrics m;
  const auto correct = static_cast<double>(after.correct - before.correct);
  m.precision = ratio(correct, static_cast<double>(after.predicted - before.predicted));
  m.recall = ratio(correct, static_cast<double>(after.routed - before.routed));
  m.reads_per_token = static_cast<double>(after.reads - before.reads) / tokens;
  m.used_fraction = ratio(static_cast<double>(after.reads_used - before.reads_used),
                          static_cast<double>(after.reads - before.reads));
  m.wasted_bytes = after.wasted_bytes;
  return m;
}

StallRunMetrics stall_metrics(const StallStats& before, const StallStats& after, double tokens) {
  StallRunMetrics m;
  const auto waits = static_cast<double>(after.waits - before.waits);
  m.waits_per_token = waits / tokens;
  m.s_per_token = (after.seconds - before.seconds) / tokens;
  m.mean_read_s = ratio(after.read_seconds - before.read_seconds, waits);
  return m;
}

nlohmann::json stall_json(const StallRunMetrics& m) {
  return nlohmann::json{{"waits_per_token", m.waits_per_token},
                        {"s_per_token", m.s_per_token},
                        {"mean_read_s", m.mean_read_s}};
}

nlohmann::json predictor_json(const PredictorRunMetrics& m) {
  return nlohmann::json{{"precision", m.precision},
                        {"recall", m.recall},
                        {"reads_per_token", m.reads_per_token},
                        {"reads_used_fraction", m.used_fraction},
                        {"wasted_bytes", m.wasted_bytes}};
}

// [{"layers_ahead", "precision", "recall", "confident_per_token", "confident_precision"}]
nlohmann::json router_distance_json(const ExpertRunMetrics& m) {
  nlohmann::json out = nlohmann::json::array();
  for (int d = 0; d < m.router_lookahead && d < kMaxRouterLookahead; ++d) {
    out.push_back({{"layers_ahead", d + 1},
                   {"precision", m.router_at[d].precision},
                   {"recall", m.router_at[d].recall},
                   {"confident_per_token", m.router_confident_at[d].reads_per_token},
                   {"confident_precision", m.router_confident_at[d].precision}});
  }
  return out;
}
}  // namespace

ExpertRunMetrics expert_run_metrics(const ExpertProvider& p, const ExpertStats& before,
                                    const ExpertStats& after, int tokens) {
  ExpertRunMetrics m;
  const double n = tokens > 0 ? tokens : 1;
  m.hit_rate = ratio(static_cast<double>(after.hits - before.hits),
                     static_cast<double>(after.lookups - before.lookups));
  // What the device read: cancelled reads' dropped bytes were requested, never read.
  m.bytes_per_token = static_cast<double>((after.bytes_read - after.cancelled_bytes) -
                                          (before.bytes_read - before.cancelled_bytes)) /
                      n;
  m.cancelled_per_token = static_cast<double>(after.cancelled_reads - before.cancelled_reads) / n;
  m.misses_per_token = static_cast<double>(after.misses - before.misses) / n;
  m.speculative_per_token =
      static_cast<double>(after.speculative_reads - before.speculative_reads) / n;
  m.predictor = expert_predictor_name(p.predictor());
  m.router_lookahead = p.router_lookahead();
  m.coact = predictor_metrics(before.coact, after.coact, n);
  m.router = predictor_metrics(before.router, after.router, n);
  for (int d = 0; d < kMaxRouterLookahead; ++d) {
    m.router_at[d] = predictor_metrics(before.router_at[d], after.router_at[d], n);
    m.router_confident_at[d] =
        predictor_metrics(before.router_confident_at[d], after.router_confident_at[d], n);
    // Guesses per token, not reads: these are scores only.
    m.router_confident_at[d].reads_per_token =
        static_cast<double>(after.router_confident_at[d].predicted -
                            before.router_confident_at[d].predicted) /
        n;
  }
  m.prob_reads_per_token =
      static_cast<double>(after.router_prob_reads - before.router_prob_reads) / n;
  m.budget_reads_per_token =
      static_cast<double>(after.router_budget_reads - before.router_budget_reads) / n;
  const PrefetchRule& rule = p.prefetch_rule();
  m.prefetch_budget_bytes = rule.config().budget_bytes;
  m.prefetch_min_precision = rule.config().min_precision;
  const int ranks = std::min(rule.config().n_expert_used, kMaxPrefetchRank);
  for (int d = 0; d < m.router_lookahead && d < kMaxRouterLookahead; ++d) {
    for (int r = 0; r < ranks; ++r) m.rank_precision[d].push_back(rule.precision(d + 1, r));
  }
  m.wasted_bytes = after.wasted_bytes;
  m.stall_s_per_token = (after.stall_seconds - before.stall_seconds) / n;
  m.stall_miss = stall_metrics(before.stall_miss, after.stall_miss, n);
  m.stall_prefetched = stall_metrics(before.stall_prefetched, after.stall_prefetched, n);
  m.cache_experts = p.cache_experts();
  m.slot_bytes = p.slot_bytes();
  return m;
}

void set_expert_bound(ExpertRunMetrics& m, double tg_tps, double disk_read_bps,
                      double pattern_read_bps, const PlannedExperts& planned) {
  m.tg_tps = tg_tps;
  m.disk_read_bps = disk_read_bps;
  m.pattern_read_bps = pattern_read_bps;
  m.planned = planned;
  m.compute_s_per_token = std::max(0.0, ratio(1.0, tg_tps) - m.stall_s_per_token);
  const double io_s = ratio(m.bytes_per_token, disk_read_bps);
  m.io_bound_tps = ratio(1.0, io_s);
  m.bound_tps = ratio(1.0, std::max(io_s, m.compute_s_per_token));
  m.tg_bound_ratio = ratio(tg_tps, m.bound_tps);
}

nlohmann::json expert_run_json(const ExpertRunMetrics& m) {
  return nlohmann::json{{"expert_hit_rate", m.hit_rate},
                        {"expert_bytes_per_token", m.bytes_per_token},
                        {"expert_misses_per_token", m.misses_per_token},
                        {"speculative_reads_per_token", m.speculative_per_token},
                        {"prefetch_predictor", m.predictor},
                        {"router_lookahead", m.router_lookahead},
                        {"coactivation_prediction", predictor_json(m.coact)},
                        {"router_prediction", predictor_json(m.router)},
                        {"router_prediction_by_distance", router_distance_json(m)},
                        {"router_prob_reads_per_token", m.prob_reads_per_token},
                        {"router_budget_reads_per_token", m.budget_reads_per_token},
                        {"cancelled_reads_per_token", m.cancelled_per_token},
                        {"prefetch_budget_bytes", m.prefetch_budget_bytes},
                        {"prefetch_min_precision", m.prefetch_min_precision},
                        {"uncached_guess_precision_by_distance_rank", m.rank_precision},
                        {"prefetch_wasted_bytes", m.wasted_bytes},
                        {"expert_stall_s_per_token", m.stall_s_per_token},
                        {"stall_on_misses", stall_json(m.stall_miss)},
                        {"stall_on_prefetched", stall_json(m.stall_prefetched)},
                        {"expert_cache_experts", m.cache_experts},
                        {"expert_slot_bytes", m.slot_bytes},
                        {"disk_read_bps", m.disk_read_bps},
                        {"pattern_read_bps", m.pattern_read_bps},
                        {"io_bound_tps", m.io_bound_tps},
                        {"compute_s_per_token", m.compute_s_per_token},
                        {"planned_compute_s_per_token", m.planned.compute_s},
                        {"planned_stall_s_per_token", m.planned.stall_s},
                        {"planned_expert_hit_rate", m.planned.hit_rate},
                        {"planned_expert_misses_per_token", m.planned.misses_per_token},
                        {"bound_tps", m.bound_tps},
                        {"tg_tps", m.tg_tps},
                        {"tg_bound_ratio", m.tg_bound_ratio}};
}

std::string expert_run_text(const ExpertRunMetrics& m) {
  char buf[512];
  std::snprintf(
      buf, sizeof buf,
      "experts: cache %u x %.2f MiB, hit rate %.1f%%, %.1f misses + %.2f speculative reads = "
      "%.1f MiB/token, wasted %.1f MiB; stalled %.3f s/token\n",
      m.cache_experts, m.slot_bytes / 1048576.0, 100 * m.hit_rate, m.misses_per_token,
      m.speculative_per_token, m.bytes_per_token / 1048576.0, m.wasted_bytes / 1048576.0,
      m.stall_s_per_token);
  std::string out = buf;
  std::snprintf(buf, sizeof buf,
                "planned: hit rate %.1f%%, %.2f misses/token, stalled %.3f s/token, compute %.4f "
                "s/token\n",
                100 * m.planned.hit_rate, m.planned.misses_per_token, m.planned.stall_s,
                m.planned.compute_s);
  out += buf;
  std::snprintf(
      buf, sizeof buf,
      "stall: %.3f s/token in %.2f waits for misses (reads arrived %.1f ms after submit), "
      "%.3f s/token in %.2f waits for prefetched experts (%.1f ms)\n",
      m.stall_miss.s_per_token, m.stall_miss.waits_per_token, 1e3 * m.stall_miss.mean_read_s,
      m.stall_prefetched.s_per_token, m.stall_prefetched.waits_per_token,
      1e3 * m.stall_prefetched.mean_read_s);
  out += buf;
  std::snprintf(buf, sizeof buf, "prefetch by %s (router lookahead %d):\n", m.predictor.c_str(),
                m.router_lookahead);
  out += buf;
  for (auto [label, p] :
       {std::pair{"co-activation", &m.coact}, std::pair{"router on hidden", &m.router}}) {
    std::snprintf(buf, sizeof buf,
                  "  %-16s precision %.1f%% recall %.1f%%; asked %.2f reads/token, %.0f%% used, "
                  "wasted %.1f MiB\n",
                  label, 100 * p->precision, 100 * p->recall, p->reads_per_token,
                  100 * p->used_fraction, p->wasted_bytes / 1048576.0);
    out += buf;
  }
  for (int d = 0; d < m.router_lookahead && d < kMaxRouterLookahead; ++d) {
    std::snprintf(
        buf, sizeof buf,
        "  router %d layer(s) ahead: precision %.1f%% recall %.1f%%; confident guesses %.2f/token, "
        "precision %.1f%%\n",
        d + 1, 100 * m.router_at[d].precision, 100 * m.router_at[d].recall,
        m.router_confident_at[d].reads_per_token, 100 * m.router_confident_at[d].precision);
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "  router reads: %.2f/token by probability, %.2f/token by the budgeted rule "
                "(%.1f MiB/token, precision >= %.2f); wrong guesses cancelled before fully "
                "issued %.2f/token; uncached guesses right by rank:",
                m.prob_reads_per_token, m.budget_reads_per_token,
                m.prefetch_budget_bytes / 1048576.0, m.prefetch_min_precision,
                m.cancelled_per_token);
  out += buf;
  for (int d = 0; d < m.router_lookahead && d < kMaxRouterLookahead; ++d) {
    out += d == 0 ? " " : "; ";
    out += std::to_string(d + 1) + " ahead";
    for (double p : m.rank_precision[d]) {
      std::snprintf(buf, sizeof buf, " %.0f%%", 100 * p);
      out += buf;
    }
  }
  out += "\n";
  if (m.disk_read_bps > 0) {
    std::snprintf(
        buf, sizeof buf,
        "bound: same-run disk (best sequential direct read) %.2f GB/s -> %.3f tok/s I/O-bound "
        "(random experts into the cache's slots, no compute: %.2f GB/s); compute %.4f s/token "
        "(measured, unstalled; planner %.4f) -> %.3f tok/s with reads overlapped; tg %.3f tok/s = "
        "%.2f x bound\n",
        m.disk_read_bps / 1e9, m.io_bound_tps, m.pattern_read_bps / 1e9, m.compute_s_per_token,
        m.planned.compute_s, m.bound_tps, m.tg_tps, m.tg_bound_ratio);
    out += buf;
  }
  return out;
}

}  // namespace hypura::experts
