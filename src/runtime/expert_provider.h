// ExpertProvider: the WeightProvider of expert-streaming mode (MoE models bigger than
// memory). Every tensor except the stacked experts (*_exps) is loaded resident with
// direct I/O; the experts stay in the model file, and only those the routers select are
// read, each expert's gate, up and down slices (three contiguous byte ranges) into one
// slot of an expert cache in RAM (docs/MOE.md):
//
//   route(L, selected)   router interception: every distinct expert of the batch is looked
//                        up (a hit touches it); reads start at once for the misses, in
//                        ascending id order, as far as slots can be freed; then the
//                        co-activation predictor's experts for layer L+1 are read
//                        speculatively into further evictable slots (after the demand
//                        reads in the device queue, so they never delay them);
//   acquire_experts(L)   waits for that expert's reads only (its wait is the stall), pins
//                        its slot and unpins the layer's previous one, so the model
//                        computes each expert while the next ones are still arriving;
//   release(L)           unpins.
//
// A slot is evictable only when it is not pinned, has no read in flight and is not
// wanted by the batch being computed; among those the cache policy (expert_cache.h)
// picks. A cache of one slot still works (each expert is read, computed, then evicted).
// Bytes read from storage are exactly (misses + speculative reads) x the expert's bytes.
// A failed read empties its slot and acquire_experts returns the error (file, offset,
// errno text, layer, expert); nothing is computed on it.
//
// The co-activation statistics are loaded at create() from `stats_path` (when present)
// and written back by save_stats() (the engine calls it at exit).
//
// Thread-safety: driven by the forward-pass thread; Storage's I/O thread fills slots
// concurrently, and slot bytes are touched only after waiting for their reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "io/storage.h"
#include "runtime/coactivation.h"
#include "runtime/expert_cache.h"
#include "runtime/memory_ledger.h"
#include "runtime/resident_loader.h"
#include "runtime/routing_trace.h"
#include "runtime/weight_provider.h"

namespace hypura::runtime {

struct ExpertConfig {
  uint32_t cache_experts = 0;      // slots (>= 1), each one expert of one layer
  CachePolicy policy = kDefaultCachePolicy;
  bool speculate = true;           // co-activation prefetch into spare slots
  int max_speculative = 0;         // experts per layer; 0: n_expert_used
  double min_confidence = 0.5;     // predictor score needed to read speculatively
  std::string stats_path;          // co-activation statistics (load/save); empty: none
  bool lock_resident = true;
  io::StorageOptions storage;
  // Tests: builds the engine of each split file's Storage (e.g. fault-injecting).
  std::function<std::unique_ptr<io::IoEngine>()> make_engine;
};

struct ExpertStats {
  uint64_t lookups = 0;            // distinct experts routed (one per expert per batch and layer)
  uint64_t hits = 0;               // found in the cache (including speculatively read ones)
  uint64_t misses = 0;             // demand reads
  uint64_t speculative_reads = 0;
  uint64_t speculative_used = 0;   // speculative reads later routed to
  uint64_t wasted_bytes = 0;       // speculative reads evicted unused (+ unused now)
  uint64_t demand_bytes = 0, speculative_bytes = 0;
  uint64_t bytes_read = 0;         // demand_bytes + speculative_bytes
  uint64_t predicted = 0;          // experts predicted for a layer before its router ran
  uint64_t predicted_correct = 0;  // of those, routed to
  uint64_t routed_after_prediction = 0;  // distinct experts of layers that had a prediction
  uint64_t routed_tokens = 0;      // tokens through layer 0
  double stall_seconds = 0;        // acquire_experts waiting for reads
  uint64_t resident_bytes = 0;
  double load_seconds = 0;
  bool resident_locked = false;

  double hit_rate() const { return lookups ? static_cast<double>(hits) / lookups : 0; }
  double precision() const { return predicted ? static_cast<double>(predicted_correct) / predicted : 0; }
  double recall() const {
    return routed_after_prediction ? static_cast<double>(predicted_correct) / routed_after_prediction : 0;
  }
};

class ExpertProvider final : public WeightProvider {
 public:
  using Progress = std::function<void(uint64_t done, uint64_t total)>;  // resident bytes

  // `file` and `ledger` must outlive the provider. Errors: no stacked expert tensors, a
  // budget refusal (resident weights or cache slots), an unreadable file.
  static Result<std::unique_ptr<ExpertProvider>> create(const gguf::GgufFile& file,
                                                        ExpertConfig config, MemoryLedger& ledger,
                                                        const Progress& progress);
  ~ExpertProvider() override;

  Status acquire(int layer, std::span<const TensorId> ids,
                 std::span<compute::WeightView> out) override;
  void route(int layer, std::span<const int32_t> selected, int n_expert_used) override;
  Status acquire_experts(int layer, std::span<const ExpertRequest> requests,
                         std::span<compute::WeightView> out) override;
  void release(int layer) override;
  uint64_t bytes_read() const override { return stats_.bytes_read; }
  std::string name() const override { return "expert-streaming"; }

  // Records routing into `trace` (nullptr: stop). The trace must outlive the recording.
  void record_trace(RoutingTrace* trace);
  Status save_stats() const;  // to config.stats_path; ok when that is empty

  ExpertStats stats() const;
  uint32_t cache_experts() const { return static_cast<uint32_t>(slots_.size()); }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // The resident load (its memory and file ranges).
  const ResidentTensors& resident() const { return resident_; }
  // Bench's same-run load reference (resident_loader.h). REQUIRES: no forward pass running.
  Result<double> reload_resident_bps() { return runtime::reload_resident_bps(storages_, resident_); }
  // Bytes of one expert (gate + up + down slices) of `layer`.
  uint64_t expert_bytes(int layer) const { return layers_[layer].expert_bytes; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  // Bytes requested from Storage since load (all files): tests compare with stats().
  uint64_t storage_bytes_since_load() const;

 private:
  enum class SlotState { kEmpty, kReading, kReady };
  struct PendingRead {
    uint32_t file_index = 0;
    io::ReadId id = 0;
  };
  struct Slot {
    SlotState state = SlotState::kEmpty;
    bool pinned = false;
    bool wanted = false;        // routed in the current batch, not yet acquired
    bool speculative = false;   // read speculatively and not routed to since
    std::vector<PendingRead> reads;
  };
  // The stacked expert tensors of one layer: ids, bytes per expert slice, and where each
  // slice goes inside a slot (part_offset + the slice's file offset modulo 4096).
  struct ExpertLayer {
    TensorId tensors[3] = {-1, -1, -1};  // gate, up, down
    uint64_t slice_bytes[3] = {0, 0, 0};
    uint64_t part_offset[3] = {0, 0, 0};
    uint64_t expert_bytes = 0;
  };

  ExpertProvider(const gguf::GgufFile& file, MemoryLedger& ledger) : file_(file), ledger_(ledger) {}
  Status build_layout();
  Status load_resident(bool lock, const Progress& progress);
  uint64_t slice_offset(int layer, int part, int expert) const;

  bool evictable(int slot) const;
  bool start_read(int layer, int expert, bool speculative);
  Status wait_slot(int slot);
  bool finish_speculative();
  Status ensure(int layer, int expert, int* slot_out);
  void start_wanted(int layer);
  void speculate(int layer, std::span<const int32_t> experts);
  void check_prediction(int layer, std::span<const int32_t> experts);
  void unpin(int layer);
  compute::WeightView expert_view(int slot, int layer, int part, int expert) const;

  const gguf::GgufFile& file_;
  MemoryLedger& ledger_;
  ExpertConfig config_;
  int n_expert_ = 0;
  std::vector<std::unique_ptr<io::Storage>> storages_;  // one per split file
  std::vector<ExpertLayer> layers_;                     // (n_layer)
  std::vector<int> part_of_tensor_;                     // (n_tensors): 0..2, or -1
  std::vector<int> layer_of_tensor_;                    // (n_tensors): expert tensors' layer
  ResidentTensors resident_;                            // .data (n_tensors): null for experts
  LedgerBuffer cache_memory_;                           // (n_slots * slot_bytes_)
  uint64_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<CoactivationStats> coact_;
  std::vector<std::vector<int32_t>> predicted_;         // (n_layer): prediction made for it
  std::vector<std::vector<int32_t>> wanted_;            // (n_layer): routed, not yet started
  std::vector<int> pinned_;                             // slots pinned, any layer
  std::vector<int32_t> distinct_, scratch_;
  RoutingTrace* trace_ = nullptr;
  uint32_t pass_ = 0;
  int last_routed_layer_ = -1;
  uint64_t resident_storage_bytes_ = 0;                 // Storage bytes of the resident load
  ExpertStats stats_;
};

}  // namespace hypura::runtime
