// ExpertProvider: the WeightProvider of expert-streaming mode (MoE models bigger than
// memory). Every tensor except the stacked experts (*_exps) is loaded resident with
// direct I/O; the experts stay in the model file, and only those the routers select are
// read, each expert's gate, up and down slices (three contiguous byte ranges) into one
// slot of an expert cache in RAM (docs/MOE.md):
//
//   observe_hidden(L, x) the router predictor: layer L+d's router (resident) applied to
//                        the last token's FFN input of layer L gives a guess of L+d's
//                        top-k, for d = 1..router_lookahead (the nearest guess wins);
//   route(L, selected)   router interception: every distinct expert of the batch is looked
//                        up (a hit touches it); reads start at once for the misses, in
//                        ascending id order, as far as slots can be freed; then the
//                        enabled predictors' guesses for layers L+1..L+lookahead that are
//                        not cached are read speculatively into further evictable slots
//                        as background reads (io::Priority: a demand read issued later
//                        overtakes them; one routed to is expedited), nearest layer first;
//   order_experts(L)     the batch's experts in the order they can be computed: cached
//                        ones first, then reads in the order the device serves them;
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

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experts/coactivation.h"
#include "experts/expert_cache.h"
#include "experts/prefetch_rule.h"
#include "experts/routing_trace.h"
#include "gguf/gguf.h"
#include "io/storage.h"
#include "model/hparams.h"
#include "model/weight_provider.h"
#include "tiers/memory_ledger.h"
#include "tiers/resident_loader.h"

namespace hypura::experts {

// Which next-layer predictors drive speculative reads (both are always scored):
//   kCoactivation  co-activation statistics (coactivation.h), one layer ahead
//   kRouter        layer L+d's router on layer L's FFN input (observe_hidden)
enum class ExpertPredictor : uint8_t { kNone, kCoactivation, kRouter, kBoth };
const char* expert_predictor_name(ExpertPredictor p);
// "none", "coact", "router", "both"; false for anything else.
bool parse_expert_predictor(const std::string& s, ExpertPredictor* out);
// Defaults chosen by measurement on the "moe" synthetic model (docs/MOE.md): both
// predictors, the router one a layer ahead and only for guesses of probability >= 0.3
// (reading every guess, or guessing 2-3 layers ahead, wasted more disk time than the
// misses it saved); no cap on speculative reads in flight; speculative reads at background
// priority, and cached experts computed first, then the rest by arrival (docs/MOE.md).
inline constexpr ExpertPredictor kDefaultExpertPredictor = ExpertPredictor::kBoth;
inline constexpr int kDefaultRouterLookahead = 1;
inline constexpr double kDefaultRouterMinProb = 0.3;
inline constexpr int kDefaultMaxSpeculativeInflight = 1 << 20;
inline constexpr int kMaxRouterLookahead = kMaxPrefetchDistance;  // router_lookahead: 1..this
// The budgeted rule (prefetch_rule.h): a router guess that misses router_min_prob is still
// read when guesses of its distance and rank that were not cached turned out right at least
// this often, within prefetch_budget_bytes per token.
inline constexpr double kDefaultPrefetchMinPrecision = 0.5;
// The router predictor guesses the experts of up to this many sequences of a step (one
// row each: WeightProvider::observe_hidden).
inline constexpr int64_t kMaxPredictedRows = 8;
inline constexpr bool kDefaultBackgroundSpeculation = true;
inline constexpr bool kDefaultOrderByArrival = true;

struct ExpertConfig {
  uint32_t cache_experts = 0;  // slots (>= 1), each one expert of one layer
  CachePolicy policy = kDefaultCachePolicy;
  bool speculate = true;  // speculative prefetch into spare slots at all
  // `--expert-predictor none|coact|router|both` and `--expert-lookahead N` of run, bench,
  // serve and perplexity (EngineOptions); the rest below are fixed (tests set them).
  ExpertPredictor predictor = kDefaultExpertPredictor;
  int router_lookahead = kDefaultRouterLookahead;  // layers ahead the router predictor guesses
  // A router guess is read when its gating probability reaches this (all top-k guesses
  // are scored), or when the budgeted rule admits it (prefetch_rule.h).
  double router_min_prob = kDefaultRouterMinProb;
  // `--expert-prefetch-budget` and `--expert-prefetch-precision`: the budgeted rule's bytes
  // per token (0: off; TieredWeights defaults it to what the disk reads while a token
  // computes, from the plan) and its precision threshold.
  uint64_t prefetch_budget_bytes = 0;
  double prefetch_min_precision = kDefaultPrefetchMinPrecision;
  // `--no-expert-cancel` turns it off: a speculative read still queued when its layer
  // routes elsewhere is cancelled (io::Storage::cancel).
  bool cancel_wrong_reads = true;
  // Speculative reads in flight at most (each one started takes a slot that could hold a
  // cached expert until it arrives or is evicted).
  int max_speculative_inflight = kDefaultMaxSpeculativeInflight;
  // Speculative reads as io::Priority::kBackground (demand reads overtake them); false
  // makes them normal reads.
  bool background_speculation = kDefaultBackgroundSpeculation;
  // order_experts() puts cached experts first, then reads by arrival; false keeps
  // ascending ids.
  bool order_by_arrival = kDefaultOrderByArrival;
  int max_speculative = 0;      // co-activation experts per layer; 0: n_expert_used
  double min_confidence = 0.5;  // co-activation score needed to read speculatively
  std::string stats_path;       // co-activation statistics (load/save); empty: none
  bool lock_resident = true;
  // (n_tensors, or empty: none) tensors a GPU holds and computes (the GPU tier's last
  // layers and head): neither loaded nor cached here, and their layers are neither
  // predicted nor read ahead. They must be whole layers at the end of the stack.
  std::vector<bool> absent;
  io::StorageOptions storage;
  // Tests: builds the read queue of each split file's Storage (e.g. fault-injecting).
  std::function<std::unique_ptr<io::ReadQueue>()> make_queue;
};

// One next-layer predictor's record. A prediction for a layer is scored when its router
// runs (the router predictor's nearest guess only).
struct PredictorStats {
  uint64_t predicted = 0;   // experts predicted for a layer before its router ran
  uint64_t correct = 0;     // of those, routed to
  uint64_t routed = 0;      // distinct experts of layers that had a prediction
  uint64_t reads = 0;       // speculative reads it asked for (a read both asked for counts in both)
  uint64_t reads_used = 0;  // of those, routed to before eviction
  uint64_t wasted_bytes = 0;  // of those, evicted unused (+ unused now)
  double precision() const { return predicted ? static_cast<double>(correct) / predicted : 0; }
  double recall() const { return routed ? static_cast<double>(correct) / routed : 0; }
};

struct StallStats {
  uint64_t waits = 0;       // acquire_experts calls that had to wait
  double seconds = 0;       // time waited
  double read_seconds = 0;  // sum over those waits of submit-to-arrival time
};

struct ExpertStats {
  uint64_t lookups = 0;  // distinct experts routed (one per expert per batch and layer)
  uint64_t hits = 0;     // found in the cache (including speculatively read ones)
  uint64_t misses = 0;   // demand reads
  uint64_t speculative_reads = 0;
  uint64_t speculative_used = 0;  // speculative reads later routed to
  // Router reads by the test that admitted them (prefetch_rule.h): probability, budgeted.
  uint64_t router_prob_reads = 0, router_budget_reads = 0;
  // Speculative reads still queued when their layer routed elsewhere: the bytes not yet
  // issued are dropped (io::Storage::cancel). cancelled_bytes is part of bytes_read (which
  // counts what was requested) but never came from the device.
  uint64_t cancelled_reads = 0, cancelled_bytes = 0;
  uint64_t wasted_bytes = 0;  // speculative reads evicted unused (+ unused now)
  uint64_t demand_bytes = 0, speculative_bytes = 0;
  uint64_t bytes_read = 0;       // demand_bytes + speculative_bytes
  PredictorStats coact, router;  // per predictor
  // The router predictor's guesses by distance d (index d - 1): made from layer L - d's
  // hidden state for layer L, all top-k / only those reaching router_min_prob (scores only).
  std::array<PredictorStats, kMaxRouterLookahead> router_at{}, router_confident_at{};
  uint64_t routed_tokens = 0;  // tokens through layer 0
  double stall_seconds = 0;    // acquire_experts waiting for reads (= the two below)
  // The stall by what was waited for: a demand read (a miss), or a speculative read that
  // was routed to before it arrived; with how many waits, and the reads' ages (submit to
  // arrival) of those waits.
  StallStats stall_miss, stall_prefetched;
  uint64_t resident_bytes = 0;
  double load_seconds = 0;
  bool resident_locked = false;

  double hit_rate() const { return lookups ? static_cast<double>(hits) / lookups : 0; }
};

class ExpertProvider final : public model::WeightProvider, public model::ExpertRouting {
 public:
  using Progress = std::function<void(uint64_t done, uint64_t total)>;  // resident bytes

  // `file` and `ledger` must outlive the provider. Errors: no stacked expert tensors, a
  // budget refusal (resident weights or cache slots), an unreadable file.
  static Result<std::unique_ptr<ExpertProvider>> create(const gguf::GgufFile& file,
                                                        ExpertConfig config,
                                                        tiers::MemoryLedger& ledger,
                                                        const Progress& progress);
  ~ExpertProvider() override;

  Status acquire(int layer, std::span<const model::TensorId> ids,
                 std::span<compute::WeightView> out) override;
  Status acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                         std::span<compute::WeightView> out) override;
  void release(int layer) override;
  model::ExpertRouting* routing() override { return this; }
  // ExpertRouting: the cache learns the routing (reads start at route()).
  void observe_hidden(int layer, std::span<const float> x, int64_t n_rows) override;
  void route(int layer, std::span<const int32_t> selected, int n_expert_used) override;
  void order_experts(int layer, std::span<int32_t> experts) override;
  uint64_t bytes_read() const override { return stats_.bytes_read; }
  std::string name() const override { return "expert-streaming"; }

  // Records routing into `trace` (nullptr: stop). The trace must outlive the recording.
  void record_trace(RoutingTrace* trace);
  Status save_stats() const;  // to config.stats_path; ok when that is empty

  ExpertStats stats() const;
  // The routing seen so far: what earlier runs saved plus this run's, per (layer, expert),
  // layer-major (CoactivationStats::frequencies).
  std::vector<double> routing_frequency() const { return coact_->frequencies(); }
  ExpertPredictor predictor() const {
    return config_.speculate ? config_.predictor : ExpertPredictor::kNone;
  }
  int router_lookahead() const { return config_.router_lookahead; }
  uint32_t cache_experts() const { return static_cast<uint32_t>(slots_.size()); }
  // The router reads' rule and its measured precision by distance and rank.
  const PrefetchRule& prefetch_rule() const { return *rule_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  // The resident load (its memory and file ranges).
  const tiers::ResidentTensors& resident() const { return resident_; }
  // Bench's same-run load reference (resident_loader.h). REQUIRES: no forward pass running.
  Result<double> reload_resident_bps() { return tiers::reload_resident_bps(storages_, resident_); }
  // Bench's same-run I/O reference for the bound: random experts read into two emptied
  // slots (two in flight, like a layer's misses) for `seconds`, nothing computed; bytes
  // per second. Not counted in stats() or storage_bytes_since_load(). REQUIRES: no
  // forward pass running.
  Result<double> measure_io_only_bps(double seconds);
  // Bytes of one expert (gate + up + down slices) of `layer`.
  uint64_t expert_bytes(int layer) const { return layers_[layer].expert_bytes; }
  int n_layer() const { return static_cast<int>(layers_.size()); }
  bool is_absent(size_t id) const { return id < config_.absent.size() && config_.absent[id]; }
  // Bytes requested from Storage since load (all files): tests compare with stats().
  uint64_t storage_bytes_since_load() const;

 private:
  enum class SlotState { kEmpty, kReading, kReady };
  struct Slot {
    SlotState state = SlotState::kEmpty;
    bool pinned = false;
    bool wanted = false;               // routed in the current batch, not yet acquired
    bool speculative = false;          // read speculatively and not routed to since
    uint8_t sources = 0;               // speculative: kFromCoact | kFromRouter
    bool read_as_speculative = false;  // the read in flight was started speculatively
    bool cancelled = false;            // its reads were cancelled: never hand its bytes out
    uint64_t read_seq = 0;             // start order of the read (reads arrive in about this order)
    std::chrono::steady_clock::time_point submitted;
    std::vector<io::PendingRead> reads;
  };
  // The stacked expert tensors of one layer: ids, bytes per expert slice, and where each
  // slice goes inside a slot (part_offset + the slice's file offset modulo 4096).
  struct ExpertLayer {
    model::TensorId tensors[3] = {-1, -1, -1};  // gate, up, down
    uint64_t slice_bytes[3] = {0, 0, 0};
    uint64_t part_offset[3] = {0, 0, 0};
    uint64_t expert_bytes = 0;
  };

  ExpertProvider(const gguf::GgufFile& file, tiers::MemoryLedger& ledger)
      : file_(file), ledger_(ledger) {}
  Status build_layout();
  void find_routers();
  Status load_resident(bool lock, const Progress& progress);
  uint64_t slice_offset(int layer, int part, int expert) const;

  bool evictable(int slot) const;
  static constexpr uint8_t kFromCoact = 1, kFromRouter = 2;

  bool start_read(int layer, int expert, uint8_t speculative_sources);
  Status wait_slot(int slot);
  bool finish_speculative();
  int reap_speculative();
  // Cancels the speculative reads of `layer` still in flight that the batch did not route to.
  void cancel_unrouted(int layer);
  // Waits for a cancelled slot's reads in flight and empties it (its read counts as wasted).
  void drop_cancelled(int slot);
  // cache_->lookup, with a cancelled slot dropped first (-1 then).
  int lookup_live(int layer, int expert);
  Status ensure(int layer, int expert, int* slot_out);
  void start_wanted(int layer);
  void speculate(int layer, std::span<const int32_t> experts);
  enum class GuessRead : uint8_t { kStarted, kCached, kNoSlot };
  GuessRead read_guess(int layer, int32_t expert, uint8_t source);
  void speculate_coact(int layer);
  void speculate_router(int layer);
  void check_predictions(int layer, std::span<const int32_t> experts);
  // The router guesses for the layers after `layer` from rows x (n_rows, n_embd): the
  // union of each row's top experts, taken row by row in rank order (the best of every
  // row first).
  void predict_router(int layer, const float* x, int64_t n_rows);
  void count_speculative(const Slot& s, bool used, uint64_t bytes);
  void count_eviction(int slot);
  void submit_expert(int slot, int layer, int expert, io::Priority priority);
  void unpin(int layer);
  compute::WeightView expert_view(int slot, int layer, int part, int expert) const;

  const gguf::GgufFile& file_;
  tiers::MemoryLedger& ledger_;
  ExpertConfig config_;
  int n_expert_ = 0;
  int n_expert_used_ = 0;  // from the file's metadata; 0: router predictor off
  int64_t n_embd_ = 0;
  std::vector<std::unique_ptr<io::Storage>> storages_;  // one per split file
  std::vector<ExpertLayer> layers_;                     // (n_layer)
  std::vector<int> moe_layers_;                         // the layers with experts, ascending
  std::vector<int> part_of_tensor_;                     // (n_tensors): 0..2, or -1
  std::vector<int> layer_of_tensor_;                    // (n_tensors): expert tensors' layer
  tiers::ResidentTensors resident_;                     // .data (n_tensors): null for experts
  tiers::LedgerBuffer cache_memory_;                    // (n_slots * slot_bytes_)
  uint64_t slot_bytes_ = 0;
  std::vector<Slot> slots_;
  std::unique_ptr<ExpertCache> cache_;
  std::unique_ptr<CoactivationStats> coact_;
  std::vector<std::vector<int32_t>> coact_pred_;   // (n_layer): co-activation guess for it
  std::vector<std::vector<int32_t>> router_pred_;  // (n_layer): nearest router guess for it
  // One router guess: its expert, the distance and rank it was made at, its probability.
  struct Guess {
    int32_t expert = 0;
    int distance = 0, rank = 0;
    float prob = 0;
  };
  std::vector<std::vector<Guess>> router_guess_;  // (n_layer): the nearest guess, ranked
  std::unique_ptr<PrefetchRule> rule_;
  // [d - 1][layer]: (expert, rank) of the guesses for `layer` made d layers before it
  // that were not cached then: the budgeted rule's precision is theirs.
  std::array<std::vector<std::vector<std::pair<int32_t, int>>>, kMaxRouterLookahead> uncached_at_;
  // [d - 1][layer]: the guess for `layer` made d layers before it, all / confident.
  std::array<std::vector<std::vector<int32_t>>, kMaxRouterLookahead> router_at_,
      router_confident_at_;
  std::vector<model::TensorId> routers_;          // (n_layer): ffn_gate_inp, or -1
  std::vector<model::TensorId> router_biases_;    // (n_layer): exp_probs_b, or -1
  std::unique_ptr<model::HParams> routing_hp_;    // the model's routing; null: softmax top-k
  std::vector<float> route_scratch_, route_w_;    // route_row's (n_expert), (n_expert_used)
  std::unique_ptr<compute::Context> router_ctx_;  // one thread: the router products
  std::vector<float> router_logits_;              // (kMaxPredictedRows, n_expert)
  std::vector<int32_t> router_top_;               // (kMaxPredictedRows, n_expert_used)
  std::vector<std::vector<int32_t>> wanted_;      // (n_layer): routed, not yet started
  std::vector<int> pinned_;                       // slots pinned, any layer
  std::vector<int32_t> distinct_, scratch_;
  RoutingTrace* trace_ = nullptr;
  uint32_t pass_ = 0;
  int last_routed_layer_ = -1;
  int spec_in_flight_ = 0;                // as of the last route(), plus those started
  uint64_t reads_started_ = 0;            // Slot::read_seq source
  uint64_t resident_storage_bytes_ = 0;   // Storage bytes of the resident load
  uint64_t reference_storage_bytes_ = 0;  // Storage bytes of measure_io_only_bps
  ExpertStats stats_;
};

}  // namespace hypura::experts
