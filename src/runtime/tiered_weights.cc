#include "runtime/tiered_weights.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/size.h"
#include "profiler/profiler.h"
#include "profiler/system_info.h"

namespace hypura::runtime {
namespace {

// A model this far below usable memory is resident whatever the storage speed.
constexpr uint64_t kComfortBytes = uint64_t{2} << 30;

// The profile when storage speed cannot change the plan: the cached one if present, else
// system facts only (no benchmark), with a nominal storage figure the plan ignores.
profiler::HardwareProfile quick_profile() {
  const std::string cache = profiler::default_cache_path();
  if (std::filesystem::exists(cache)) {
    auto cached = profiler::load_profile_file(cache);
    if (cached.is_ok()) return std::move(cached).value();
  }
  profiler::HardwareProfile p;
  p.source = "system facts (no storage benchmark: the model fits)";
  p.cpu = profiler::probe_cpu();
  p.memory = profiler::probe_memory(profiler::kDefaultReserveBytes);
  p.storage.seq_read_bps = 1e9;
  return p;
}

}  // namespace

std::string ledger_dry_run(const scheduler::MemoryPlan& m) {
  MemoryLedger ledger(m.ram_limit);
  const std::pair<MemoryKind, uint64_t> charges[] = {
      {MemoryKind::kProcess, m.overhead_ram},     {MemoryKind::kKvCache, m.kv_ram},
      {MemoryKind::kWork, m.work_ram},            {MemoryKind::kStreamPool, m.pool},
      {MemoryKind::kExpertCache, m.expert_cache}, {MemoryKind::kResidentWeights, m.ram_weights}};
  std::vector<Reservation> held;
  for (const auto& [kind, bytes] : charges) {
    if (bytes == 0) continue;
    auto r = ledger.reserve(kind, bytes, memory_kind_name(kind));
    if (!r.is_ok()) return "would refuse: " + r.status().message();
    held.push_back(std::move(r).value());
  }
  return ledger.summary();
}

Result<std::unique_ptr<TieredWeights>> TieredWeights::load(const gguf::GgufFile& file,
                                                           const TierOptions& options) {
  std::unique_ptr<TieredWeights> w(new TieredWeights());
  HYPURA_RETURN_IF_ERROR(w->make_plan(file, options));
  w->ledger_ = std::make_unique<MemoryLedger>(w->plan_.memory.ram_limit);
  HYPURA_RETURN_IF_ERROR(w->charge_fixed(options));
  if (w->plan_.mode == scheduler::Mode::kExpertStreaming) {
    HYPURA_RETURN_IF_ERROR(w->load_experts(file, options));
    return w;
  }

  StreamingConfig config;
  config.streamed.assign(file.tensors().size(), false);
  for (size_t i = 0; i < w->tensors_.tensors.size(); ++i) {
    const int32_t id = w->tensors_.tensors[i].file_index;
    if (id < 0 || w->plan_.tiers[i] != scheduler::Tier::kStorage) continue;
    // A forward pass reads only its tokens' rows of the embedding, but the provider
    // cannot know which before the pass: it stays resident (a small excess the ledger sees).
    if (w->tensors_.tensors[i].role == model::TensorRole::kTokenEmbedding) {
      spdlog::info("keeping {} resident (the plan streams it)", w->tensors_.tensors[i].name);
      continue;
    }
    config.streamed[id] = true;
  }
  config.n_slots = static_cast<int>(std::max<uint32_t>(w->plan_.pool_slots, 2));
  config.prefetch_depth = std::max(1, w->plan_.prefetch_depth);
  config.lock_resident = options.lock_resident;
  if (w->plan_.io_queue_depth > 0) config.storage.queue_depth = w->plan_.io_queue_depth;
  if (w->plan_.io_request_bytes > 0) config.storage.request_bytes = w->plan_.io_request_bytes;
  HYPURA_ASSIGN_OR_RETURN(w->provider_, StreamingProvider::create(file, std::move(config),
                                                                 *w->ledger_, options.progress));
  spdlog::info("mode {}: {} resident, {} streamed per token through {} slots of {} "
               "(prefetch {}); ledger {}",
               w->mode(), format_size(w->provider_->stats().resident_bytes),
               format_size(w->provider_->bytes_per_pass()), w->provider_->n_slots(),
               format_size(w->provider_->slot_bytes()), w->provider_->prefetch_depth(),
               w->ledger_->summary());
  return w;
}

// Expert-streaming: every non-expert tensor resident, the experts read on demand into a
// cache of the plan's size (expert_provider.h).
Status TieredWeights::load_experts(const gguf::GgufFile& file, const TierOptions& options) {
  ExpertConfig config;
  config.cache_experts = std::max<uint32_t>(plan_.expert_cache_experts, 1);
  config.lock_resident = options.lock_resident;
  config.stats_path = CoactivationStats::default_path(file.paths().front(), file.total_bytes());
  if (plan_.io_queue_depth > 0) config.storage.queue_depth = plan_.io_queue_depth;
  if (plan_.io_request_bytes > 0) config.storage.request_bytes = plan_.io_request_bytes;
  HYPURA_ASSIGN_OR_RETURN(experts_, ExpertProvider::create(file, std::move(config), *ledger_, options.progress));
  if (!options.trace_path.empty()) {
    trace_path_ = options.trace_path;
    experts_->record_trace(&trace_);
  }
  spdlog::info("mode {}: {} resident, expert cache of {} experts x {} ({} policy); ledger {}", mode(),
               format_size(experts_->stats().resident_bytes), experts_->cache_experts(),
               format_size(experts_->slot_bytes()), cache_policy_name(kDefaultCachePolicy), ledger_->summary());
  return Status::ok();
}

TieredWeights::~TieredWeights() {
  if (!experts_) return;
  if (Status st = experts_->save_stats(); !st.is_ok()) spdlog::warn("{}", st.message());
  if (!trace_path_.empty()) {
    Status st = trace_.write(trace_path_);
    if (st.is_ok()) {
      spdlog::info("routing trace ({} records) written to {}", trace_.records.size(), trace_path_);
    } else {
      spdlog::warn("{}", st.message());
    }
  }
}

Status TieredWeights::make_plan(const gguf::GgufFile& file, const TierOptions& options) {
  HYPURA_ASSIGN_OR_RETURN(tensors_, scheduler::model_tensors_from_gguf(file));
  scheduler::Budgets budgets;
  if (options.ram_budget > 0) budgets.ram_bytes = options.ram_budget;
  budgets.n_ctx = options.n_ctx;
  budgets.n_batch = options.n_batch;
  budgets.kv_bytes_per_element = options.kv_f32 ? 4 : 2;
  budgets.use_gpu = false;  // no GPU provider yet
  if (!options.profile_path.empty()) {
    HYPURA_ASSIGN_OR_RETURN(profile_, profiler::load_profile_file(options.profile_path));
  } else {
    const profiler::MemoryProfile mem = profiler::probe_memory(profiler::kDefaultReserveBytes);
    const bool comfortable = options.ram_budget == 0 && file.total_bytes() + kComfortBytes < mem.usable_bytes;
    if (comfortable) {
      profile_ = quick_profile();
    } else {
      profiler::ProfileOptions po;
      po.model_path = file.paths().front();
      HYPURA_ASSIGN_OR_RETURN(profile_, profiler::load_or_measure(po));
    }
  }
  // The ledger charges the process as what it holds now when that exceeds the planned
  // overhead (charge_fixed); plan with the same figure so plan and ledger agree.
  scheduler::CostModel cost;
  cost.runtime_overhead_bytes = std::max(cost.runtime_overhead_bytes, current_rss_bytes());
  tensors_.expert_frequency = CoactivationStats::recorded_frequency(
      file.paths().front(), file.total_bytes(), tensors_.n_layer, static_cast<int>(tensors_.n_expert));
  HYPURA_ASSIGN_OR_RETURN(plan_, scheduler::place(tensors_, profile_, budgets, cost));
  budgets_ = budgets;
  cost_ = cost;
  return Status::ok();
}

scheduler::Prediction TieredWeights::predict_with_storage(const profiler::StorageProfile& storage) const {
  profiler::HardwareProfile p = profile_;
  p.storage = storage;
  scheduler::Plan plan = plan_;
  scheduler::evaluate(tensors_, p, budgets_, cost_, plan);
  return plan.prediction;
}

// The process baseline, one session's KV cache and work buffers, as the plan sized them;
// the baseline is what the process holds now when that is more than the plan assumed.
Status TieredWeights::charge_fixed(const TierOptions& options) {
  const scheduler::MemoryPlan& m = plan_.memory;
  HYPURA_ASSIGN_OR_RETURN(process_, ledger_->reserve(MemoryKind::kProcess,
                                                      std::max(m.overhead_ram, current_rss_bytes()),
                                                      "process baseline"));
  HYPURA_ASSIGN_OR_RETURN(kv_, ledger_->reserve(MemoryKind::kKvCache, m.kv_ram, "KV cache"));
  HYPURA_ASSIGN_OR_RETURN(work_, ledger_->reserve(MemoryKind::kWork, m.work_ram, "work buffers"));
  return Status::ok();
}

}  // namespace hypura::runtime
