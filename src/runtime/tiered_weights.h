// TieredWeights: a model's weights placed by the planner, with the memory ledger that
// accounts for them.
//
// load() makes the plan (scheduler::place over the hardware profile and the budgets),
// opens a ledger whose budget is the plan's RAM limit, charges the process baseline,
// one session's KV cache and work buffers, then builds the StreamingProvider: tensors the
// plan put in RAM (the planner is run without its GPU tier: a model that fits the GPU is
// uploaded whole by runtime::DeviceWeights after this load, see device_choice.h) are loaded with
// direct I/O, tensors on storage stream through the pool. A model that fits gets a plan
// with nothing on storage and the same provider serves it from RAM.
//
// Profile: with no budget flag and a model far below usable memory, the plan does not
// depend on storage speed, so no storage benchmark runs (a cached profile is used when
// present); otherwise profiler::load_or_measure (cached after the first run).
//
// Thread-safety: load() once; afterwards provider() is driven by one forward pass at a
// time and the accessors are safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "gguf/gguf.h"
#include "profiler/hardware_profile.h"
#include "runtime/expert_provider.h"
#include "runtime/memory_ledger.h"
#include "runtime/routing_trace.h"
#include "runtime/streaming_provider.h"
#include "scheduler/model_tensors.h"
#include "scheduler/plan.h"

namespace hypura::runtime {

struct TierOptions {
  uint64_t ram_budget = 0;     // bytes; 0: the profile's usable memory (cgroup-aware)
  int64_t n_ctx = 4096;
  int64_t n_batch = 512;       // prompt tokens per forward pass
  bool kv_f32 = false;
  std::string profile_path;    // --profile FILE; empty: cache or measurement
  bool lock_resident = true;
  std::function<void(uint64_t done, uint64_t total)> progress;  // resident bytes loaded
  // Expert-streaming mode (expert_provider.h): record the routing to this file, written
  // when the weights are destroyed; empty: no trace.
  std::string trace_path;
};

// `inspect --plan`'s ledger figures: the plan's RAM allocations charged, in load order,
// to a MemoryLedger with the plan's budget (the same ledger that refuses at load time),
// without allocating. Returns the ledger's summary, or its refusal. A dry run: the real
// load adds a little alignment slack per resident run.
std::string ledger_dry_run(const scheduler::MemoryPlan& plan);

class TieredWeights {
 public:
  static Result<std::unique_ptr<TieredWeights>> load(const gguf::GgufFile& file,
                                                     const TierOptions& options);

  WeightProvider& provider() { return experts_ ? static_cast<WeightProvider&>(*experts_) : *provider_; }
  // Expert-streaming mode: the expert provider (resident non-expert tensors, expert cache);
  // streaming() is then not available. Null in the other modes.
  const ExpertProvider* experts() const { return experts_.get(); }
  ~TieredWeights();
  const StreamingProvider& streaming() const { return *provider_; }
  // Bench's same-run references (REQUIRE: no forward pass running): the resident load
  // read again into its memory, and the provider's own reads with no compute (dense-
  // streaming passes, or random experts into expert slots; 0 in resident modes). Bytes
  // per second.
  Result<double> reload_resident_bps() {
    return experts_ ? experts_->reload_resident_bps() : provider_->reload_resident_bps();
  }
  Result<double> io_only_stream_bps(double seconds) {
    return experts_ ? experts_->measure_io_only_bps(seconds) : provider_->measure_io_only_bps(seconds);
  }
  // The tensors loaded into RAM at start, whichever provider holds them.
  const ResidentTensors& resident() const { return experts_ ? experts_->resident() : provider_->resident(); }
  const scheduler::Plan& plan() const { return plan_; }
  // The plan's prediction again (same tiers, pool and depth) with other storage figures:
  // bench re-predicts with the disk grid it measured in the same run, since the cached
  // profile's figures may be hours old on a disk whose speed drifts.
  scheduler::Prediction predict_with_storage(const profiler::StorageProfile& storage) const;
  const profiler::HardwareProfile& profile() const { return profile_; }
  const MemoryLedger& ledger() const { return *ledger_; }
  std::string mode() const { return scheduler::mode_name(plan_.mode); }
  // Streamed bytes one forward pass reads (the plan's dense streamed tensors).
  uint64_t streamed_bytes_per_pass() const { return provider_ ? provider_->bytes_per_pass() : 0; }

 private:
  TieredWeights() = default;
  Status make_plan(const gguf::GgufFile& file, const TierOptions& options);
  Status charge_fixed(const TierOptions& options);
  Status load_experts(const gguf::GgufFile& file, const TierOptions& options);

  profiler::HardwareProfile profile_;
  scheduler::ModelTensors tensors_;
  scheduler::Plan plan_;
  scheduler::Budgets budgets_;
  scheduler::CostModel cost_;
  std::unique_ptr<MemoryLedger> ledger_;
  Reservation process_, kv_, work_;
  std::unique_ptr<StreamingProvider> provider_;
  std::unique_ptr<ExpertProvider> experts_;  // expert-streaming mode instead of provider_
  RoutingTrace trace_;
  std::string trace_path_;
};

}  // namespace hypura::runtime
