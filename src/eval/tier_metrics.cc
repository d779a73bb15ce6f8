#include "eval/tier_metrics.h"

#include <algorithm>
#include <cstdio>

#include "common/size.h"
#include "profiler/storage_bench.h"

namespace hypura::eval {
namespace {

double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / static_cast<double>(v.size());
}

// The plan's RAM in the ledger's kinds, for the two to be read side by side.
std::string planned_text(const scheduler::MemoryPlan& m) {
  std::string out = format_size(m.ram_total()) + ": process " + format_size(m.overhead_ram) +
                    ", resident_weights " + format_size(m.ram_weights);
  if (m.pool > 0) out += ", stream_pool " + format_size(m.pool);
  if (m.expert_cache > 0) out += ", expert_cache " + format_size(m.expert_cache);
  return out + ", kv_cache " + format_size(m.kv_ram) + ", work_buffers " + format_size(m.work_ram);
}

// The streaming counters, or in expert-streaming mode the expert provider's equivalents
// (passes: tokens through the first MoE layer).
tiers::StreamingStats streaming_stats(const runtime::TieredWeights& w) {
  if (w.experts() == nullptr) return w.streaming().stats();
  const experts::ExpertStats e = w.experts()->stats();
  tiers::StreamingStats s;
  s.bytes_read = e.bytes_read;
  s.stall_seconds = e.stall_seconds;
  s.passes = e.routed_tokens;
  s.resident_bytes = e.resident_bytes;
  s.load_seconds = e.load_seconds;
  s.resident_locked = e.resident_locked;
  return s;
}

}  // namespace

TierCounters TierCounters::take(const runtime::TieredWeights& w) {
  const tiers::StreamingStats s = streaming_stats(w);
  return TierCounters{s.bytes_read, s.stall_seconds, s.passes};
}

double StorageReferences::disk_read_bps() const {
  return mean(disk_runs);
}
double StorageReferences::pattern_read_bps() const {
  return mean(pattern_runs);
}

profiler::HardwareProfile StorageReferences::same_run_profile(
    const profiler::HardwareProfile& base) const {
  profiler::HardwareProfile p = base;
  // The higher of the two memory readings: other processes' traffic only ever lowers a
  // probe, so on a shared machine the lower reading is the contention, not the machine.
  p.memory.read_bandwidth_bps = std::max(p.memory.read_bandwidth_bps, memory_read_bps);
  for (const profiler::DecodeRate& r : decode_rates) p.cpu.set_decode(r);
  if (disk_runs.empty()) return p;
  p.storage.sequential = disk_grid;
  p.storage.seq_read_bps = disk_read_bps();
  return p;
}

Status measure_disk_reference(const std::string& path, StorageReferences& refs) {
  profiler::StorageBenchOptions o;  // the profile's grid, point length and in-flight cap
  HYPURA_ASSIGN_OR_RETURN(refs.disk_grid,
                          profiler::measure_sequential_grid_in_child(path, o, &refs.disk_cursor));
  refs.disk_runs.push_back(profiler::fastest_point(refs.disk_grid).bps);
  return Status::ok();
}

TierMetrics tier_metrics(const runtime::TieredWeights& w, const TierCounters& before,
                         const TierCounters& after, int tokens, double seconds,
                         const StorageReferences& refs) {
  const double direct_read_bps = refs.disk_read_bps();
  TierMetrics m;
  const tiers::StreamingStats s = streaming_stats(w);
  const scheduler::Plan& plan = w.plan();
  m.mode = w.mode();
  m.streamed_bytes_per_token = w.streamed_bytes_per_pass();
  const double n = tokens > 0 ? tokens : 1;
  const double bytes = static_cast<double>(after.bytes_read - before.bytes_read);
  m.bytes_read_per_token = bytes / n;
  // Expert streaming reads what routing and the cache decide: its bound uses the bytes
  // actually read per token.
  if (w.experts() != nullptr)
    m.streamed_bytes_per_token = static_cast<uint64_t>(m.bytes_read_per_token);
  m.read_bps = ratio(bytes, seconds);
  m.disk_read_bps = direct_read_bps;
  m.disk_runs = refs.disk_runs;
  const profiler::SeqReadPoint fastest = profiler::fastest_point(refs.disk_grid);
  m.disk_block_bytes = fastest.block_bytes;
  m.disk_queue_depth = fastest.queue_depth;
  m.read_ratio = ratio(m.read_bps, direct_read_bps);
  const double per_token = static_cast<double>(m.streamed_bytes_per_token);
  m.storage_bound_tok_s = per_token > 0 ? ratio(direct_read_bps, per_token) : 0;
  m.tok_s = ratio(tokens, seconds);
  m.tg_bound_ratio = ratio(m.tok_s, m.storage_bound_tok_s);
  m.pattern_read_bps = refs.pattern_read_bps();
  m.pattern_bound_tok_s = per_token > 0 ? ratio(m.pattern_read_bps, per_token) : 0;
  m.tg_pattern_ratio = ratio(m.tok_s, m.pattern_bound_tok_s);
  m.stall_s_per_token = (after.stall_seconds - before.stall_seconds) / n;
  m.predicted_at_load_tok_s = plan.prediction.tok_per_s;
  m.predicted_tok_s = w.predict_with(refs.same_run_profile(w.profile())).tok_per_s;
  m.prediction_ratio = ratio(m.tok_s, m.predicted_tok_s);
  m.peak_rss = tiers::peak_rss_bytes();
  const tiers::LedgerSnapshot l = w.ledger().snapshot();
  m.budget = l.budget;
  m.ledger_peak = l.peak;
  m.ledger_by_kind = w.ledger().summary();
  const scheduler::MemoryPlan& mp = plan.memory;
  m.planned_ram = mp.ram_total();
  m.planned_by_kind = planned_text(mp);
  m.resident_bytes = s.resident_bytes;
  m.load_bps = ratio(static_cast<double>(s.resident_bytes), s.load_seconds);
  m.load_reference_bps = refs.load_reference_bps;
  m.load_seconds = s.load_seconds;
  m.load_populate_seconds = w.resident().populate_seconds;
  m.load_ratio = ratio(m.load_bps, refs.load_reference_bps);
  if (w.experts() != nullptr) {  // the pool is the expert cache
    m.pool_slots = static_cast<int>(w.experts()->cache_experts());
    m.slot_bytes = w.experts()->slot_bytes();
  } else {
    m.pool_slots = w.streaming().n_slots();
    m.slot_bytes = w.streaming().slot_bytes();
    m.prefetch_depth = w.streaming().prefetch_depth();
  }
  m.resident_locked = s.resident_locked;
  return m;
}

nlohmann::json tier_metrics_json(const TierMetrics& m) {
  return nlohmann::json{
      {"mode", m.mode},
      {"streamed_bytes_per_token", m.streamed_bytes_per_token},
      {"bytes_read_per_token", m.bytes_read_per_token},
      {"read_bps", m.read_bps},
      {"disk_read_bps", m.disk_read_bps},
      {"disk_read_bps_runs", m.disk_runs},
      {"disk_best_block_bytes", m.disk_block_bytes},
      {"disk_best_queue_depth", m.disk_queue_depth},
      {"read_ratio", m.read_ratio},
      {"storage_bound_tps", m.storage_bound_tok_s},
      {"tg_tps", m.tok_s},
      {"tg_bound_ratio", m.tg_bound_ratio},
      {"pattern_read_bps", m.pattern_read_bps},
      {"pattern_bound_tps", m.pattern_bound_tok_s},
      {"tg_pattern_ratio", m.tg_pattern_ratio},
      {"stall_s_per_token", m.stall_s_per_token},
      {"predicted_tps", m.predicted_tok_s},
      {"predicted_at_load_tps", m.predicted_at_load_tok_s},
      {"prediction_ratio", m.prediction_ratio},
      {"peak_rss_bytes", m.peak_rss},
      {"ram_budget_bytes", m.budget},
      {"ledger_peak_bytes", m.ledger_peak},
      {"planned_ram_bytes", m.planned_ram},
      {"ledger", m.ledger_by_kind},
      {"planned", m.planned_by_kind},
      {"resident_bytes", m.resident_bytes},
      {"load_bps", m.load_bps},
      {"load_ratio", m.load_ratio},
      {"load_reference_bps", m.load_reference_bps},
      {"load_seconds", m.load_seconds},
      {"load_populate_seconds", m.load_populate_seconds},
      {"pool_slots", m.pool_slots},
      {"pool_slot_bytes", m.slot_bytes},
      {"prefetch_depth", m.prefetch_depth},
      {"resident_locked", m.resident_locked},
  };
}

std::string tier_metrics_text(const TierMetrics& m) {
  char buf[1024];
  const double gib = 1024.0 * 1024.0 * 1024.0;
  std::string out;
  // Expert streaming has its own figures (expert_metrics.h): cache, hits, bound.
  const bool dense = m.mode != "expert-streaming";
  if (dense) {
    std::snprintf(buf, sizeof buf,
                  "mode %s: %.1f MiB streamed per token (read %.1f MiB/token), pool %d x %.1f MiB, "
                  "prefetch %d\n",
                  m.mode.c_str(), m.streamed_bytes_per_token / 1048576.0,
                  m.bytes_read_per_token / 1048576.0, m.pool_slots, m.slot_bytes / 1048576.0,
                  m.prefetch_depth);
    out += buf;
  }
  if (dense && m.streamed_bytes_per_token > 0) {
    std::snprintf(
        buf, sizeof buf,
        "storage: read %.2f GB/s = %.2f x the disk's same-run best sequential read %.2f GB/s "
        "(%.0f KiB x %u); bound %.3f tok/s, tg %.3f tok/s = %.2f x bound; stalled %.3f s/token\n",
        m.read_bps / 1e9, m.read_ratio, m.disk_read_bps / 1e9, m.disk_block_bytes / 1024.0,
        m.disk_queue_depth, m.storage_bound_tok_s, m.tok_s, m.tg_bound_ratio, m.stall_s_per_token);
    out += buf;
    std::snprintf(
        buf, sizeof buf,
        "         this provider's own reads with no compute %.2f GB/s (%.2f x disk): tg = %.2f x "
        "that pattern's bound %.3f tok/s\n",
        m.pattern_read_bps / 1e9, ratio(m.pattern_read_bps, m.disk_read_bps), m.tg_pattern_ratio,
        m.pattern_bound_tok_s);
    out += buf;
  }
  out += "memory: planned " + m.planned_by_kind + "\n        ledger " + m.ledger_by_kind + "\n";
  std::snprintf(buf, sizeof buf,
                "planner predicted %.3f tok/s at the same-run disk (measured/predicted %.2f; %.3f "
                "at load); peak RSS %.2f GiB of budget %.2f GiB (ledger peak %.2f GiB)\n",
                m.predicted_tok_s, m.prediction_ratio, m.predicted_at_load_tok_s, m.peak_rss / gib,
                m.budget / gib, m.ledger_peak / gib);
  out += buf;
  std::snprintf(buf, sizeof buf,
                "resident load: %.2f GiB at %.2f GB/s = %.2f x same-run replay of its reads "
                "%.2f GB/s%s; faulting in its fresh memory took %.2f of its %.2f s\n",
                m.resident_bytes / gib, m.load_bps / 1e9, m.load_ratio, m.load_reference_bps / 1e9,
                m.resident_locked ? " (locked)" : "", m.load_populate_seconds, m.load_seconds);
  out += buf;
  return out;
}

}  // namespace hypura::eval
