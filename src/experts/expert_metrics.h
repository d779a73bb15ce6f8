// Expert-streaming figures for `hypura bench`, from two ExpertStats snapshots around a
// timed run of `tokens` generated tokens (after warm-up, so the cache is warm):
//
//   hit_rate              cache hits / distinct experts routed
//   bytes_per_token       storage bytes read (demand + speculative, less the cancelled
//                         reads' bytes never issued) / tokens
//   coact, router         per next-layer predictor (both are scored; `predictor` names the
//                         ones that read): precision (experts predicted for a layer that
//                         its router then chose / predicted), recall (/ chosen), the
//                         speculative reads it asked for per token and the share of them
//                         later routed to, and its wasted bytes (whole run, at the end)
//   router_at[d-1]        the router predictor's guesses made d layers ahead (d up to the
//                         lookahead): precision and recall of all top-k, and of those
//                         reaching its read threshold (confident; reads_per_token = how
//                         many such guesses per token)
//   prefetch rule         router reads per token admitted by probability and by the
//                         budgeted rule (prefetch_rule.h), its budget and threshold, and
//                         the precision it measured (whole run, with its prior) of
//                         uncached guesses by distance and rank
//   wasted_bytes          speculative reads evicted before use (whole run, at the end)
//   stall_s_per_token     time acquire_experts waited for reads / tokens, split into
//                         waits for misses and for prefetched experts still arriving
//                         (StallRunMetrics: waits per token, s per token, mean age of the
//                         read when it arrived, i.e. how long it took since its submit)
//   bound_tps             the bound with reads overlapped with compute: 1 / max(io_s,
//                         compute_s), io_s = bytes_per_token / the disk's best sequential
//                         direct-read rate measured in the same run (disk_read_bps: the
//                         profile's block x depth grid on the model file, before and after
//                         the tests, averaged), compute_s = the run's seconds per token not
//                         spent stalled on expert reads (measured: the planner's estimate,
//                         planned.compute_s, rests on the profile's RAM bandwidth and is
//                         reported beside it); tg_bound_ratio = tg tok/s / bound_tps.
//                         Beside it, pattern_read_bps: the provider's own pattern with no
//                         compute (ExpertProvider::measure_io_only_bps, random experts
//                         into the cache's slots), which says how much of the gap to the
//                         disk is the small scattered reads themselves
//   planned               the planner's same-run figures for the same quantities (hit
//                         rate, misses and stall per token, compute): where a prediction
//                         misses, the line beside the measured one says which part
//
// Thread-safety: plain functions over snapshots.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "experts/expert_provider.h"

namespace hypura::experts {

// What the planner predicted for the run (scheduler::Prediction on the same-run profile),
// printed beside the measured figures so a prediction's error has a visible cause.
struct PlannedExperts {
  double compute_s = 0;         // seconds per token of compute, stalls excluded
  double stall_s = 0;           // seconds per token waited for expert misses
  double hit_rate = 0;          // expert cache hit rate
  double misses_per_token = 0;  // experts read on demand per token
};

struct PredictorRunMetrics {
  double precision = 0, recall = 0;
  double reads_per_token = 0, used_fraction = 0;
  uint64_t wasted_bytes = 0;
};

struct StallRunMetrics {
  double waits_per_token = 0, s_per_token = 0, mean_read_s = 0;
};

struct ExpertRunMetrics {
  double hit_rate = 0;
  double bytes_per_token = 0;
  double misses_per_token = 0;
  double speculative_per_token = 0;
  std::string predictor;  // expert_predictor_name of the reading predictors
  int router_lookahead = 0;
  PredictorRunMetrics coact, router;
  std::array<PredictorRunMetrics, kMaxRouterLookahead> router_at, router_confident_at;
  double prob_reads_per_token = 0, budget_reads_per_token = 0, cancelled_per_token = 0;
  uint64_t prefetch_budget_bytes = 0;
  double prefetch_min_precision = 0;
  // [d - 1][rank], rank < n_expert_used (at most kMaxPrefetchRank)
  std::array<std::vector<double>, kMaxRouterLookahead> rank_precision;
  uint64_t wasted_bytes = 0;
  double stall_s_per_token = 0;
  StallRunMetrics stall_miss, stall_prefetched;
  uint32_t cache_experts = 0;
  uint64_t slot_bytes = 0;
  double tg_tps = 0, disk_read_bps = 0, pattern_read_bps = 0;
  double io_bound_tps = 0, bound_tps = 0, tg_bound_ratio = 0;
  double compute_s_per_token = 0;  // measured: 1 / tg_tps - stall_s_per_token
  PlannedExperts planned;          // the planner's same-run estimates of the same figures
};

// Fills the bound figures (see above). REQUIRES: m from expert_run_metrics (stall known).
void set_expert_bound(ExpertRunMetrics& m, double tg_tps, double disk_read_bps,
                      double pattern_read_bps, const PlannedExperts& planned);

ExpertRunMetrics expert_run_metrics(const ExpertProvider& p, const ExpertStats& before,
                                    const ExpertStats& after, int tokens);
nlohmann::json expert_run_json(const ExpertRunMetrics& m);
std::string expert_run_text(const ExpertRunMetrics& m);

}  // namespace hypura::experts
