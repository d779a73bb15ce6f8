#include "runtime/tiered_weights.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/size.h"
#include "model/cuda_blocks.h"
#include "model/hparams.h"
#include "runtime/engine.h"

namespace hypura::runtime {

std::string ledger_dry_run(const scheduler::MemoryPlan& m) {
  tiers::MemoryLedger ledger(m.ram_limit);
  const std::pair<tiers::MemoryKind, uint64_t> charges[] = {
      {tiers::MemoryKind::kProcess, m.overhead_ram},
      {tiers::MemoryKind::kKvCache, m.kv_ram},
      {tiers::MemoryKind::kWork, m.work_ram},
      {tiers::MemoryKind::kStreamPool, m.pool},
      {tiers::MemoryKind::kExpertCache, m.expert_cache},
      {tiers::MemoryKind::kResidentWeights, m.ram_weights}};
  std::vector<tiers::Reservation> held;
  for (const auto& [kind, bytes] : charges) {
    if (bytes == 0) continue;
    auto r = ledger.reserve(kind, bytes, tiers::memory_kind_name(kind));
    if (!r.is_ok()) return "would refuse: " + r.status().message();
    held.push_back(std::move(r).value());
  }
  return ledger.summary();
}

Result<std::unique_ptr<TieredWeights>> TieredWeights::load(const gguf::GgufFile& file,
                                                           const TierOptions& options) {
  std::unique_ptr<TieredWeights> w(new TieredWeights());
  HYPURA_ASSIGN_OR_RETURN(w->planned_, plan_weights(file, options.plan));
  const scheduler::Plan& plan = w->planned_.plan;
  const scheduler::ModelTensors& tensors = w->planned_.tensors;
  w->ledger_ = std::make_unique<tiers::MemoryLedger>(plan.memory.ram_limit);
  HYPURA_RETURN_IF_ERROR(w->charge_fixed());
  if (plan.mode == scheduler::Mode::kExpertStreaming) {
    HYPURA_RETURN_IF_ERROR(w->load_experts(file, options));
    return w;
  }

  tiers::StreamingConfig config;
  config.streamed.assign(file.tensors().size(), false);
  config.absent = w->on_gpu_only(file);
  for (size_t i = 0; i < tensors.tensors.size(); ++i) {
    const int32_t id = tensors.tensors[i].file_index;
    if (id >= 0 && plan.tiers[i] == scheduler::Tier::kStorage) config.streamed[id] = true;
  }
  config.n_slots = static_cast<int>(std::max<uint32_t>(plan.pool_slots, 2));
  config.prefetch_depth = std::max(1, plan.prefetch_depth);
  config.lock_resident = options.lock_resident;
  if (plan.io_queue_depth > 0) config.storage.queue_depth = plan.io_queue_depth;
  if (plan.io_request_bytes > 0) config.storage.request_bytes = plan.io_request_bytes;
  HYPURA_ASSIGN_OR_RETURN(
      w->provider_,
      tiers::StreamingProvider::create(file, std::move(config), *w->ledger_, options.progress));
  spdlog::info(
      "mode {}: {} resident, {} streamed per token through {} slots of {} "
      "(prefetch {}); ledger {}",
      w->mode(), format_size(w->provider_->stats().resident_bytes),
      format_size(w->provider_->bytes_per_pass()), w->provider_->n_slots(),
      format_size(w->provider_->slot_bytes()), w->provider_->prefetch_depth(),
      w->ledger_->summary());
  return w;
}

uint64_t prefetch_budget_for(const scheduler::PlannedModel& planned) {
  const double bps = planned.profile.storage.seq_read_bps;
  const double compute_s = planned.plan.prediction.compute_s;
  if (!(bps > 0) || !(compute_s > 0)) return 0;
  return static_cast<uint64_t>(bps * compute_s);
}

// Expert-streaming: every non-expert tensor resident, the experts read on demand into a
// cache of the plan's size (expert_provider.h).
Status TieredWeights::load_experts(const gguf::GgufFile& file, const TierOptions& options) {
  const scheduler::Plan& plan = planned_.plan;
  experts::ExpertConfig config;
  config.cache_experts = std::max<uint32_t>(plan.expert_cache_experts, 1);
  config.lock_resident = options.lock_resident;
  config.absent = on_gpu_only(file);
  config.predictor = options.expert_predictor;
  config.router_lookahead = options.expert_lookahead;
  config.prefetch_budget_bytes = options.expert_prefetch_budget == UINT64_MAX
                                     ? prefetch_budget_for(planned_)
                                     : options.expert_prefetch_budget;
  config.prefetch_min_precision = options.expert_prefetch_precision;
  config.cancel_wrong_reads = options.expert_cancel;
  config.stats_path =
      experts::CoactivationStats::default_path(file.paths().front(), file.total_bytes());
  if (plan.io_queue_depth > 0) config.storage.queue_depth = plan.io_queue_depth;
  if (plan.io_request_bytes > 0) config.storage.request_bytes = plan.io_request_bytes;
  HYPURA_ASSIGN_OR_RETURN(experts_, experts::ExpertProvider::create(file, std::move(config),
                                                                    *ledger_, options.progress));
  if (!options.trace_path.empty()) {
    trace_path_ = options.trace_path;
    experts_->record_trace(&trace_);
  }
  spdlog::info("mode {}: {} resident, expert cache of {} experts x {} ({} policy); ledger {}",
               mode(), format_size(experts_->stats().resident_bytes), experts_->cache_experts(),
               format_size(experts_->slot_bytes()),
               experts::cache_policy_name(experts::kDefaultCachePolicy), ledger_->summary());
  return Status::ok();
}

std::string TieredWeights::mode() const {
  const scheduler::Plan& p = planned_.plan;
  const std::string cpu_mode = scheduler::mode_name(p.mode);
  if (!p.gpu.any()) return cpu_mode;
  if (p.gpu.host_experts > 0) return "expert split";
  if (p.gpu.head && p.gpu.layers >= planned_.tensors.n_layer) return "gpu";
  return p.mode == scheduler::Mode::kFullResident ? "gpu+cpu split" : "gpu+cpu split, " + cpu_mode;
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

scheduler::PlanRequest plan_request(const EngineOptions& o) {
  scheduler::PlanRequest r;
  r.profile_file = o.profile_path;
  if (o.ram_budget > 0) r.budgets.ram_bytes = o.ram_budget;
  if (o.gpu_budget > 0) r.budgets.gpu_bytes = o.gpu_budget;
  r.budgets.max_gpu_layers = o.gpu_layers;
  r.budgets.min_host_expert_layers = o.cpu_moe_layers;
  r.budgets.n_ctx = o.n_ctx > 0 ? o.n_ctx : 4096;
  r.budgets.n_seq = o.n_parallel;
  r.cap_context = !o.n_ctx_past_trained;
  r.budgets.n_batch = kMaxBatch;
  r.budgets.kv_bytes_per_element = o.kv_f32 ? 4 : 2;
  return r;
}

scheduler::PlanRequest plan_request(const EngineOptions& o, const DeviceChoice& device) {
  scheduler::PlanRequest r = plan_request(o);
  if (device.kind != DeviceKind::kCuda) return r;
  r.budgets.use_gpu = true;
  r.budgets.gpu_bytes = device.gpu_bytes;
  profiler::GpuProfile g;
  g.name = device.gpu_name;
  g.total_bytes = device.total_bytes;
  g.free_bytes = device.free_bytes;
  g.memory_bandwidth_bps = device.copy_bps;
  r.gpu = g;
  return r;
}

std::vector<bool> gpu_tensors(const scheduler::PlannedModel& pm, const gguf::GgufFile& file) {
  std::vector<bool> on(file.tensors().size(), false);
  const scheduler::Plan& plan = pm.plan;
  if (!plan.gpu.any()) return on;
  for (size_t i = 0; i < pm.tensors.tensors.size(); ++i) {
    const scheduler::TensorDesc& t = pm.tensors.tensors[i];
    if (t.file_index < 0) continue;
    const bool copy = (plan.gpu.tied_head_copy && t.role == model::TensorRole::kTokenEmbedding) ||
                      t.role == model::TensorRole::kRopeFreqs;
    if (plan.tiers[i] == scheduler::Tier::kGpu || copy)
      on[static_cast<size_t>(t.file_index)] = true;
  }
  return on;
}

Result<scheduler::PlannedModel> plan_weights(const gguf::GgufFile& file,
                                             scheduler::PlanRequest request) {
  if (request.budgets.use_gpu && request.gpu) {
    // What the GPU blocks allocate beside the weights (rows, prefill tile, BLAS workspace).
    HYPURA_ASSIGN_OR_RETURN(const model::HParams hp, model::read_hparams(file));
    request.budgets.gpu_work_bytes =
        model::cuda_blocks_bytes(hp, file, request.budgets.n_batch, request.budgets.n_ctx);
  }
  if (request.expert_frequency.empty()) {
    HYPURA_ASSIGN_OR_RETURN(scheduler::ModelTensors shape,
                            scheduler::model_tensors_from_gguf(file));
    if (shape.n_expert > 0) {
      request.expert_frequency = experts::CoactivationStats::recorded_frequency(
          file.paths().front(), file.total_bytes(), shape.n_layer,
          static_cast<int>(shape.n_expert));
    }
  }
  return scheduler::plan_model(file, request);
}

// What the host does not hold: the plan's GPU tensors (a tied embedding stays: it is
// kRam, the CPU's embedding reads it) and the tensors the plan leaves out (NextN layers).
std::vector<bool> TieredWeights::on_gpu_only(const gguf::GgufFile& file) const {
  std::vector<bool> absent(file.tensors().size(), true);
  const scheduler::Plan& plan = planned_.plan;
  for (size_t i = 0; i < planned_.tensors.tensors.size(); ++i) {
    const int32_t id = planned_.tensors.tensors[i].file_index;
    if (id >= 0) absent[static_cast<size_t>(id)] = plan.tiers[i] == scheduler::Tier::kGpu;
  }
  return absent;
}

scheduler::Prediction TieredWeights::predict_with(const profiler::HardwareProfile& profile) const {
  scheduler::Plan plan = planned_.plan;
  scheduler::ModelTensors tensors = planned_.tensors;
  if (experts_) {
    // The expert cache's hit rate from the routing seen up to now rather than at load: a
    // first run of a model has no recorded routing and plans for uniform routing.
    if (std::vector<double> seen = experts_->routing_frequency(); !seen.empty())
      tensors.expert_frequency = std::move(seen);
  }
  scheduler::evaluate(tensors, profile, planned_.budgets, planned_.cost, plan);
  return plan.prediction;
}

// The process overhead, one session's KV cache and work buffers, as the plan sized them
// (so plan and ledger agree); the process overhead is computed from the model
// (scheduler::process_overhead_bytes), and bench checks it against the peak RSS.
Status TieredWeights::charge_fixed() {
  const scheduler::MemoryPlan& m = planned_.plan.memory;
  if (const uint64_t rss = tiers::current_rss_bytes(); rss > m.overhead_ram) {
    spdlog::debug(
        "RSS before the weights load {} exceeds the planned process overhead {} (earlier "
        "allocations of this process)",
        format_size(rss), format_size(m.overhead_ram));
  }
  HYPURA_ASSIGN_OR_RETURN(
      process_, ledger_->reserve(tiers::MemoryKind::kProcess, m.overhead_ram, "process overhead"));
  HYPURA_ASSIGN_OR_RETURN(kv_, ledger_->reserve(tiers::MemoryKind::kKvCache, m.kv_ram, "KV cache"));
  HYPURA_ASSIGN_OR_RETURN(work_,
                          ledger_->reserve(tiers::MemoryKind::kWork, m.work_ram, "work buffers"));
  return Status::ok();
}

}  // namespace hypura::runtime
