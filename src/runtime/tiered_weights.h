// TieredWeights: a model's weights placed by the planner, with the memory ledger that
// accounts for them.
//
// load() makes the plan (plan_weights: the one planning call, which `inspect --plan`
// prints too), opens a ledger whose budget is the plan's RAM limit, charges the process
// overhead, one session's KV cache and work buffers as the plan sized them, then builds
// the StreamingProvider: tensors the plan put in RAM are loaded with direct I/O, tensors
// on storage stream through the pool (expert-streaming plans get the ExpertProvider). A
// model that fits gets a plan with nothing on storage and the same provider serves it
// from RAM. The plan has no GPU tier yet: a model that fits the GPU is uploaded whole
// from this host copy by tiers::DeviceWeights after the load (device_choice.h).
//
// Thread-safety: load() once; afterwards provider() is driven by one forward pass at a
// time and the accessors are safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "experts/expert_provider.h"
#include "experts/routing_trace.h"
#include "gguf/gguf.h"
#include "profiler/hardware_profile.h"
#include "runtime/device_choice.h"
#include "runtime/session.h"
#include "scheduler/model_tensors.h"
#include "scheduler/plan.h"
#include "scheduler/plan_request.h"
#include "tiers/memory_ledger.h"
#include "tiers/streaming_provider.h"

namespace hypura::runtime {

struct TierOptions {
  // Budgets, context, profile (scheduler/plan_request.h). The runtime's own figures:
  // budgets.n_batch is the prompt tokens per forward pass.
  scheduler::PlanRequest plan;
  bool lock_resident = true;
  std::function<void(uint64_t done, uint64_t total)> progress;  // resident bytes loaded
  // Expert-streaming mode (expert_provider.h): record the routing to this file, written
  // when the weights are destroyed; empty: no trace.
  std::string trace_path;
  // Expert-streaming mode: the speculative-read predictor and the router's lookahead
  // (ExpertConfig).
  experts::ExpertPredictor expert_predictor = experts::kDefaultExpertPredictor;
  int expert_lookahead = experts::kDefaultRouterLookahead;
  // The budgeted prefetch rule's bytes per token (UINT64_MAX: prefetch_budget_for(plan))
  // and precision threshold.
  uint64_t expert_prefetch_budget = UINT64_MAX;
  double expert_prefetch_precision = experts::kDefaultPrefetchMinPrecision;
  bool expert_cancel = true;  // ExpertConfig::cancel_wrong_reads
};

// The budgeted prefetch rule's default bytes per token: what the profile's disk reads in
// the plan's compute time per token, the time a disk that only serves misses sits idle.
uint64_t prefetch_budget_for(const scheduler::PlannedModel& planned);

// The plan request of an engine's options (budget, context, KV type, profile; the
// runtime's prompt batch; no GPU tier until a device decision sets one): what
// Engine::load plans with and what `inspect --plan` prints, so the two agree.
scheduler::PlanRequest plan_request(const EngineOptions& options);
// The same with the device decision's GPU tier when it has one (budgets.use_gpu, the
// GPU's memory as the planner's budget).
scheduler::PlanRequest plan_request(const EngineOptions& options, const DeviceChoice& device);

// Tensors the plan gives the GPU (by file tensor id), to read into device memory: its tiers'
// GPU tensors, the tied embedding when the GPU's head multiplies by it, and the RoPE
// factors every stage reads.
std::vector<bool> gpu_tensors(const scheduler::PlannedModel& planned, const gguf::GgufFile& file);

// The one planning call: scheduler::plan_model with the routing that earlier runs of this
// model recorded (coactivation.h), so the expert cache's predicted hit rate is the one
// the runtime will see. `inspect --plan` prints its result; TieredWeights::load runs it.
Result<scheduler::PlannedModel> plan_weights(const gguf::GgufFile& file,
                                             scheduler::PlanRequest request);

// `inspect --plan`'s ledger figures: the plan's RAM allocations charged, in load order,
// to a MemoryLedger with the plan's budget (the same ledger that refuses at load time),
// without allocating. Returns the ledger's summary, or its refusal. A dry run: the real
// load adds a little alignment slack per resident run.
std::string ledger_dry_run(const scheduler::MemoryPlan& plan);

class TieredWeights {
 public:
  static Result<std::unique_ptr<TieredWeights>> load(const gguf::GgufFile& file,
                                                     const TierOptions& options);

  model::WeightProvider& provider() {
    return experts_ ? static_cast<model::WeightProvider&>(*experts_) : *provider_;
  }
  // Expert-streaming mode: the expert provider (resident non-expert tensors, expert cache);
  // streaming() is then not available. Null in the other modes.
  const experts::ExpertProvider* experts() const { return experts_.get(); }
  ~TieredWeights();
  const tiers::StreamingProvider& streaming() const { return *provider_; }
  // Bench's same-run references (REQUIRE: no forward pass running): the resident load
  // read again into its memory, and the provider's own reads with no compute (dense-
  // streaming passes, or random experts into expert slots; 0 in resident modes). Bytes
  // per second.
  Result<double> reload_resident_bps() {
    return experts_ ? experts_->reload_resident_bps() : provider_->reload_resident_bps();
  }
  Result<double> io_only_stream_bps(double seconds) {
    return experts_ ? experts_->measure_io_only_bps(seconds)
                    : provider_->measure_io_only_bps(seconds);
  }
  // The tensors loaded into RAM at start, whichever provider holds them.
  const tiers::ResidentTensors& resident() const {
    return experts_ ? experts_->resident() : provider_->resident();
  }
  const scheduler::Plan& plan() const { return planned_.plan; }
  const scheduler::PlannedModel& planned() const { return planned_; }
  // The plan's prediction again (same tiers, pool and depth) on another profile: bench
  // re-predicts with the disk grid and memory bandwidth it measured in the same run, since
  // the cached profile's figures may be hours old on a shared machine whose disk and
  // memory speeds drift. Expert streaming also takes the routing seen so far (earlier
  // runs' and this one's), as inspect --plan will after this run saves it.
  scheduler::Prediction predict_with(const profiler::HardwareProfile& profile) const;
  const profiler::HardwareProfile& profile() const { return planned_.profile; }
  const tiers::MemoryLedger& ledger() const { return *ledger_; }
  // The placement in a word or two: "gpu" (every layer and the head on the GPU), "expert
  // split" (the GPU with some layers' routed experts on the CPU), "gpu+cpu split" (the
  // last layers on the GPU, the rest on the CPU, streamed or not), else the CPU's mode
  // ("full-resident", "expert-streaming", "dense-ffn-streaming", "full-streaming").
  std::string mode() const;
  // Streamed bytes one forward pass reads (the plan's dense streamed tensors).
  uint64_t streamed_bytes_per_pass() const { return provider_ ? provider_->bytes_per_pass() : 0; }

 private:
  TieredWeights() = default;
  Status charge_fixed();
  std::vector<bool> on_gpu_only(const gguf::GgufFile& file) const;
  Status load_experts(const gguf::GgufFile& file, const TierOptions& options);

  scheduler::PlannedModel planned_;
  std::unique_ptr<tiers::MemoryLedger> ledger_;
  tiers::Reservation process_, kv_, work_;
  std::unique_ptr<tiers::StreamingProvider> provider_;
  std::unique_ptr<experts::ExpertProvider> experts_;  // expert-streaming mode instead of provider_
  experts::RoutingTrace trace_;
  std::string trace_path_;
};

}  // namespace hypura::runtime
