#include "scheduler/render.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "common/size.h"

namespace hypura::scheduler {
namespace {

constexpr Tier kTiers[] = {Tier::kGpu, Tier::kRam, Tier::kStorage};

struct TierTotals {
  uint64_t bytes = 0;
  size_t tensors = 0;
};

std::map<Tier, TierTotals> totals(const Plan& plan, const ModelTensors& m) {
  std::map<Tier, TierTotals> out;
  for (size_t i = 0; i < plan.tiers.size(); ++i) {
    out[plan.tiers[i]].bytes += m.tensors[i].bytes;
    ++out[plan.tiers[i]].tensors;
  }
  return out;
}

// "ram" / "gpu" / "storage" / "mixed(...)" for the tensors of one layer and group.
std::string layer_line(const Plan& plan, const ModelTensors& m, int layer) {
  std::map<std::string, std::map<Tier, uint64_t>> groups;  // group -> tier -> bytes
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorDesc& t = m.tensors[i];
    if (t.layer != layer) continue;
    std::string g = layer < 0                      ? std::string(model::role_name(t.role))
                    : model::is_moe_expert(t.role) ? "experts"
                    : model::is_dense_ffn(t.role) || t.role == model::TensorRole::kSharedExpert
                        ? "ffn"
                    : model::is_attention(t.role) ? "attn"
                                                  : "other";
    groups[g][plan.tiers[i]] += t.bytes;
  }
  std::ostringstream out;
  for (const auto& [g, tiers] : groups) {
    out << "  " << g << "=";
    bool first = true;
    for (const auto& [tier, bytes] : tiers) {
      out << (first ? "" : "+") << tier_name(tier);
      first = false;
    }
  }
  return out.str();
}

std::string f2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

std::string plan_to_text(const Plan& plan, const ModelTensors& m) {
  std::ostringstream out;
  const Prediction& pr = plan.prediction;
  const MemoryPlan& mem = plan.memory;
  out << "Placement plan: " << mode_name(plan.mode) << "  (" << m.name << ", context " << plan.n_ctx
      << ")\n";
  out << "  tier       tensors      bytes\n";
  auto t = totals(plan, m);
  for (Tier tier : kTiers) {
    char line[128];
    std::snprintf(line, sizeof line, "  %-8s %9zu %10s\n", tier_name(tier), t[tier].tensors,
                  format_size(t[tier].bytes).c_str());
    out << line;
  }
  out << "Memory (host " << format_size(mem.ram_total()) << " of " << format_size(mem.ram_limit);
  if (mem.gpu_total() > 0)
    out << ", GPU " << format_size(mem.gpu_total()) << " of " << format_size(mem.gpu_limit);
  out << "):\n";
  out << "  weights ram " << format_size(mem.ram_weights) << ", gpu "
      << format_size(mem.gpu_weights) << "; KV ram " << format_size(mem.kv_ram) << ", gpu "
      << format_size(mem.kv_gpu) << "; work " << format_size(mem.work_ram + mem.work_gpu)
      << "; pool " << format_size(mem.pool) << "; expert cache " << format_size(mem.expert_cache)
      << "; runtime " << format_size(mem.overhead_ram + mem.overhead_gpu) << "\n";
  if (plan.mode == Mode::kExpertStreaming) {
    out << "Experts: cache " << plan.expert_cache_experts << " x "
        << format_size(plan.expert_slot_bytes)
        << (pr.expert_hit_rate_recorded ? ", hit rate (recorded routing) "
                                        : ", uniform-routing hit rate ")
        << f2(100 * pr.expert_hit_rate) << "%, " << f2(pr.expert_misses_per_token)
        << " experts read per token, reads of " << format_size(plan.io_request_bytes) << " x"
        << plan.io_queue_depth << "\n";
  } else {
    out << "Streaming: pool " << plan.pool_slots << " x " << format_size(plan.pool_slot_bytes)
        << ", prefetch depth " << plan.prefetch_depth << " layers, expert cache "
        << plan.expert_cache_experts << " experts, reads of " << format_size(plan.io_request_bytes)
        << " x" << plan.io_queue_depth << "\n";
  }
  out << "Prediction: " << f2(pr.tok_per_s) << " tok/s, " << format_size(pr.storage_bytes_per_token)
      << " read from storage per token";
  if (pr.storage_bound_tok_s > 0)
    out << " (storage bound " << f2(pr.storage_bound_tok_s) << " tok/s)";
  out << ", " << (pr.io_bound ? "storage-bound" : "compute-bound") << "\n";
  out << "Why:\n";
  for (const auto& line : plan.explanation) out << "  - " << line << "\n";
  out << "Layers:\n";
  for (int l = 0; l < m.n_layer; ++l) {
    char head[32];
    std::snprintf(head, sizeof head, "  blk.%-3d", l);
    out << head << layer_line(plan, m, l) << "\n";
  }
  out << "  global  " << layer_line(plan, m, -1) << "\n";
  return out.str();
}

nlohmann::json plan_to_json(const Plan& plan, const ModelTensors& m, bool tensors) {
  using nlohmann::json;
  const Prediction& pr = plan.prediction;
  const MemoryPlan& mem = plan.memory;
  json tiers = json::object();
  auto t = totals(plan, m);
  for (Tier tier : kTiers)
    tiers[tier_name(tier)] = {{"tensors", t[tier].tensors}, {"bytes", t[tier].bytes}};
  json layers = json::array();
  for (int l = 0; l < m.n_layer; ++l) {
    json layer = json::object();
    for (Tier tier : kTiers) layer[tier_name(tier)] = 0;
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      if (m.tensors[i].layer == l)
        layer[tier_name(plan.tiers[i])] =
            layer[tier_name(plan.tiers[i])].get<uint64_t>() + m.tensors[i].bytes;
    }
    layers.push_back(layer);
  }
  json j = {
      {"mode", mode_name(plan.mode)},
      {"n_ctx", plan.n_ctx},
      {"tiers", tiers},
      {"layers_bytes", layers},
      {"memory",
       {{"ram_limit", mem.ram_limit},
        {"gpu_limit", mem.gpu_limit},
        {"ram_total", mem.ram_total()},
        {"gpu_total", mem.gpu_total()},
        {"ram_weights", mem.ram_weights},
        {"gpu_weights", mem.gpu_weights},
        {"kv_ram", mem.kv_ram},
        {"kv_gpu", mem.kv_gpu},
        {"work_ram", mem.work_ram},
        {"work_gpu", mem.work_gpu},
        {"pool", mem.pool},
        {"expert_cache", mem.expert_cache},
        {"overhead_ram", mem.overhead_ram},
        {"overhead_gpu", mem.overhead_gpu},
        {"unified", mem.unified}}},
      {"pool", {{"slots", plan.pool_slots}, {"slot_bytes", plan.pool_slot_bytes}}},
      {"prefetch_depth", plan.prefetch_depth},
      {"expert_cache",
       {{"experts", plan.expert_cache_experts}, {"expert_bytes", plan.expert_slot_bytes}}},
      {"io", {{"request_bytes", plan.io_request_bytes}, {"queue_depth", plan.io_queue_depth}}},
      {"prediction",
       {{"tok_per_s", pr.tok_per_s},
        {"seconds_per_token", pr.seconds_per_token},
        {"compute_s", pr.compute_s},
        {"io_s", pr.io_s},
        {"io_demand_s", pr.io_demand_s},
        {"storage_bytes_per_token", pr.storage_bytes_per_token},
        {"expert_hit_rate", pr.expert_hit_rate},
        {"expert_hit_rate_recorded", pr.expert_hit_rate_recorded},
        {"expert_misses_per_token", pr.expert_misses_per_token},
        {"storage_bound_tok_s", pr.storage_bound_tok_s},
        {"stream_read_bps", pr.stream_read_bps},
        {"io_bound", pr.io_bound}}},
      {"explanation", plan.explanation},
  };
  if (tensors) {
    json list = json::array();
    for (size_t i = 0; i < m.tensors.size(); ++i) {
      list.push_back({{"name", m.tensors[i].name},
                      {"tier", tier_name(plan.tiers[i])},
                      {"bytes", m.tensors[i].bytes}});
    }
    j["tensors"] = list;
  }
  return j;
}

}  // namespace hypura::scheduler
