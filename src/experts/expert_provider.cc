#include "experts/expert_provider.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <random>

#include "common/size.h"
#include "io/aligned_buffer.h"
#include "model/routing.h"
#include "tiers/tensor_view.h"

namespace hypura::experts {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kAlign = io::kDirectAlignment;
const char* const kPartNames[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "blk.12.ffn_up_exps.weight" -> (12, 1); (-1, -1) for any other tensor.
std::pair<int, int> expert_tensor(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return {-1, -1};
  size_t i = 4;
  int layer = 0;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])))
    layer = layer * 10 + (name[i++] - '0');
  if (i == 4 || i >= name.size() || name[i] != '.') return {-1, -1};
  const std::string rest = name.substr(i + 1);
  for (int p = 0; p < 3; ++p) {
    if (rest == std::string(kPartNames[p]) + ".weight") return {layer, p};
  }
  return {-1, -1};
}

}  // namespace

const char* expert_predictor_name(ExpertPredictor p) {
  switch (p) {
    case ExpertPredictor::kNone:
      return "none";
    case ExpertPredictor::kCoactivation:
      return "coact";
    case ExpertPredictor::kRouter:
      return "router";
    case ExpertPredictor::kBoth:
      return "both";
  }
  return "?";
}

bool parse_expert_predictor(const std::string& s, ExpertPredictor* out) {
  for (ExpertPredictor p : {ExpertPredictor::kNone, ExpertPredictor::kCoactivation,
                            ExpertPredictor::kRouter, ExpertPredictor::kBoth}) {
    if (s == expert_predictor_name(p)) {
      *out = p;
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<ExpertProvider>> ExpertProvider::create(const gguf::GgufFile& file,
                                                               ExpertConfig config,
                                                               tiers::MemoryLedger& ledger,
                                                               const Progress& progress) {
  std::unique_ptr<ExpertProvider> p(new ExpertProvider(file, ledger));
  p->config_ = std::move(config);
  HYPURA_RETURN_IF_ERROR(p->build_layout());
  HYPURA_ASSIGN_OR_RETURN(p->storages_, io::Storage::open_all(p->file_.paths(), p->config_.storage,
                                                              p->config_.make_queue));
  const uint32_t n_slots = std::max<uint32_t>(p->config_.cache_experts, 1);
  // The cache first: a budget refusal should come before a long load.
  HYPURA_ASSIGN_OR_RETURN(
      p->cache_memory_, ledger.allocate(tiers::MemoryKind::kExpertCache, n_slots * p->slot_bytes_,
                                        "expert cache (" + std::to_string(n_slots) + " experts)"));
  p->slots_.resize(n_slots);
  const int n_layer = p->n_layer();
  p->cache_ = std::make_unique<ExpertCache>(n_slots, n_layer, p->n_expert_, p->config_.policy);
  p->coact_pred_.resize(static_cast<size_t>(n_layer));
  p->router_pred_.resize(static_cast<size_t>(n_layer));
  p->router_guess_.resize(static_cast<size_t>(n_layer));
  p->config_.router_lookahead = std::clamp(p->config_.router_lookahead, 1, kMaxRouterLookahead);
  for (int d = 0; d < kMaxRouterLookahead; ++d) {
    p->router_at_[d].resize(static_cast<size_t>(n_layer));
    p->router_confident_at_[d].resize(static_cast<size_t>(n_layer));
    p->uncached_at_[d].resize(static_cast<size_t>(n_layer));
  }
  PrefetchRuleConfig rule;
  rule.n_expert = p->n_expert_;
  rule.n_expert_used = p->n_expert_used_;
  rule.n_layers = static_cast<int>(p->moe_layers_.size());
  rule.min_prob = p->config_.router_min_prob;
  rule.budget_bytes = p->config_.prefetch_budget_bytes;
  rule.min_precision = p->config_.prefetch_min_precision;
  p->rule_ = std::make_unique<PrefetchRule>(rule);
  p->wanted_.resize(static_cast<size_t>(n_layer));
  p->coact_ = std::make_unique<CoactivationStats>(n_layer, p->n_expert_);
  if (!p->config_.stats_path.empty()) {
    auto loaded = CoactivationStats::load(p->config_.stats_path, n_layer, p->n_expert_);
    if (loaded.is_ok()) {
      *p->coact_ = std::move(loaded).value();
      spdlog::info("expert statistics of {} tokens loaded from {}", p->coact_->tokens(),
                   p->config_.stats_path);
    } else if (loaded.status().code() != StatusCode::kNotFound) {
      spdlog::warn("{} (starting without)", loaded.status().message());
    }
  }
  HYPURA_RETURN_IF_ERROR(p->load_resident(p->config_.lock_resident, progress));
  p->resident_storage_bytes_ = p->storage_bytes_since_load();
  spdlog::info(
      "expert prefetch: {} (router lookahead {} layers, min probability {}, else measured "
      "precision {} within {}/token; wrong guesses {}; {} in flight at most, {} priority); "
      "experts computed in {} order",
      expert_predictor_name(p->predictor()), p->config_.router_lookahead,
      p->config_.router_min_prob, p->config_.prefetch_min_precision,
      format_size(p->config_.prefetch_budget_bytes),
      p->config_.cancel_wrong_reads ? "cancelled" : "not cancelled",
      p->config_.max_speculative_inflight,
      p->config_.background_speculation ? "background" : "normal",
      p->config_.order_by_arrival ? "arrival" : "id");
  return p;
}

ExpertProvider::~ExpertProvider() {
  for (Slot& s : slots_) (void)io::wait_all(storages_, s.reads);
}

Status ExpertProvider::build_layout() {
  const auto& tensors = file_.tensors();
  part_of_tensor_.assign(tensors.size(), -1);
  layer_of_tensor_.assign(tensors.size(), -1);
  for (size_t id = 0; id < tensors.size(); ++id) {
    const auto [layer, part] = expert_tensor(tensors[id].name);
    if (layer < 0 || is_absent(id)) continue;
    const auto& t = tensors[id];
    if (t.ne.size() != 3 || t.ne[2] < 1) {
      return invalid_argument("'" + t.name +
                              "' is not a stacked (n_cols, n_rows, n_expert) tensor");
    }
    if (n_expert_ != 0 && t.ne[2] != n_expert_) {
      return invalid_argument("'" + t.name + "' has " + std::to_string(t.ne[2]) +
                              " experts, others " + std::to_string(n_expert_));
    }
    n_expert_ = static_cast<int>(t.ne[2]);
    if (layer >= static_cast<int>(layers_.size())) layers_.resize(static_cast<size_t>(layer) + 1);
    layers_[layer].tensors[part] = static_cast<model::TensorId>(id);
    layers_[layer].slice_bytes[part] = t.n_bytes / static_cast<uint64_t>(n_expert_);
    part_of_tensor_[id] = part;
    layer_of_tensor_[id] = layer;
  }
  if (layers_.empty())
    return invalid_argument("expert streaming needs stacked *_exps tensors; the model has none");
  find_routers();
  // A slot holds the three slices, each in a part of align_up(slice) + one spare block, at
  // the slice's file-offset residue, so Storage reads straight into place.
  for (size_t l = 0; l < layers_.size(); ++l) {
    ExpertLayer& el = layers_[l];
    uint64_t cursor = 0;
    // A layer without experts has a dense FFN (deepseek2's leading layers): resident.
    if (el.tensors[0] < 0 && el.tensors[1] < 0 && el.tensors[2] < 0) continue;
    moe_layers_.push_back(static_cast<int>(l));
    for (int p = 0; p < 3; ++p) {
      if (el.tensors[p] < 0) {
        return invalid_argument("layer " + std::to_string(l) + " lacks " + kPartNames[p]);
      }
      el.part_offset[p] = cursor;
      cursor += io::align_up(el.slice_bytes[p], kAlign) + kAlign;
      el.expert_bytes += el.slice_bytes[p];
    }
    slot_bytes_ = std::max(slot_bytes_, cursor);
  }
  return Status::ok();
}

// Each layer's router (ffn_gate_inp, (n_embd, n_expert), resident) and the model's
// n_expert_used, for the router predictor; without them that predictor stays off.
void ExpertProvider::find_routers() {
  routers_.assign(layers_.size(), -1);
  router_biases_.assign(layers_.size(), -1);
  const auto& tensors = file_.tensors();
  for (size_t l = 0; l < layers_.size(); ++l) {
    const gguf::TensorInfo* t =
        file_.find_tensor("blk." + std::to_string(l) + ".ffn_gate_inp.weight");
    if (t == nullptr || t->ne.size() < 2 || t->ne[1] != n_expert_ ||
        (n_embd_ != 0 && t->ne[0] != n_embd_))
      continue;
    routers_[l] = static_cast<model::TensorId>(t - tensors.data());
    n_embd_ = t->ne[0];
    const gguf::TensorInfo* b = file_.find_tensor("blk." + std::to_string(l) + ".exp_probs_b.bias");
    if (b != nullptr && b->type == gguf::GgmlType::F32 && b->ne[0] == n_expert_)
      router_biases_[l] = static_cast<model::TensorId>(b - tensors.data());
  }
  const auto k = file_.metadata().get_u64(file_.architecture() + ".expert_used_count");
  if (k && *k >= 1 && *k <= static_cast<uint64_t>(n_expert_)) n_expert_used_ = static_cast<int>(*k);
  if (n_embd_ > 0 && n_expert_used_ > 0) {
    router_ctx_ = std::make_unique<compute::Context>(1);
    router_ctx_->reserve(kMaxPredictedRows, n_embd_);
    router_logits_.resize(static_cast<size_t>(kMaxPredictedRows * n_expert_));
    router_top_.resize(static_cast<size_t>(kMaxPredictedRows * n_expert_used_));
    // The guess selects as the model routes (sigmoid gating, score bias, expert groups).
    auto hp = model::read_hparams(file_);
    if (hp.is_ok() && hp->n_expert == n_expert_ && hp->n_expert_used == n_expert_used_) {
      routing_hp_ = std::make_unique<model::HParams>(*hp);
      route_scratch_.resize(static_cast<size_t>(n_expert_));
      route_w_.resize(static_cast<size_t>(n_expert_used_));
    }
  }
}

// Every non-expert tensor, read once (resident_loader.h).
Status ExpertProvider::load_resident(bool lock, const Progress& progress) {
  std::vector<bool> wanted(file_.tensors().size());
  for (size_t id = 0; id < wanted.size(); ++id)
    wanted[id] = part_of_tensor_[id] < 0 && !is_absent(id);
  HYPURA_ASSIGN_OR_RETURN(resident_, tiers::load_resident_tensors(
                                         file_, wanted, storages_, ledger_,
                                         "resident weights (all but experts)", lock, progress));
  stats_.load_seconds = resident_.seconds;
  stats_.resident_bytes = resident_.bytes;
  stats_.resident_locked = resident_.locked;
  return Status::ok();
}

uint64_t ExpertProvider::storage_bytes_since_load() const {
  uint64_t n = 0;
  for (const auto& s : storages_) n += s->stats().bytes_requested;
  return n - resident_storage_bytes_ - reference_storage_bytes_;
}

uint64_t ExpertProvider::slice_offset(int layer, int part, int expert) const {
  const ExpertLayer& el = layers_[layer];
  return file_.tensors()[el.tensors[part]].offset +
         static_cast<uint64_t>(expert) * el.slice_bytes[part];
}

// ---- the cache ------------------------------------------------------------------------

bool ExpertProvider::evictable(int slot) const {
  const Slot& s = slots_[slot];
  return s.state == SlotState::kReady && !s.pinned && !s.wanted;
}

// Puts (layer, expert) into a slot the policy frees and starts its three reads. False
// when every slot is pinned, reading or wanted.
// `sources`: 0 for a demand read, else the predictors that asked for it.
bool ExpertProvider::start_read(int layer, int expert, uint8_t sources) {
  const int slot = cache_->victim([this](int s) { return evictable(s); });
  if (slot < 0) return false;
  Slot& s = slots_[slot];
  count_eviction(slot);
  cache_->assign(slot, layer, expert);
  const bool speculative = sources != 0;
  s.state = SlotState::kReading;
  s.speculative = speculative;
  s.read_as_speculative = speculative;
  s.read_seq = ++reads_started_;
  s.submitted = Clock::now();
  s.sources = sources;
  s.wanted = !speculative;
  if ((sources & kFromCoact) != 0) stats_.coact.reads++;
  if ((sources & kFromRouter) != 0) stats_.router.reads++;
  const ExpertLayer& el = layers_[layer];
  const bool background = speculative && config_.background_speculation;
  submit_expert(slot, layer, expert,
                background ? io::Priority::kBackground : io::Priority::kNormal);
  (speculative ? stats_.speculative_bytes : stats_.demand_bytes) += el.expert_bytes;
  (speculative ? stats_.speculative_reads : stats_.misses) += 1;
  stats_.bytes_read += el.expert_bytes;
  return true;
}

// Starts the three slice reads of (layer, expert) into `slot`'s memory (slots_[slot].reads).
void ExpertProvider::submit_expert(int slot, int layer, int expert, io::Priority priority) {
  const ExpertLayer& el = layers_[layer];
  uint8_t* base = cache_memory_.data() + static_cast<uint64_t>(slot) * slot_bytes_;
  for (int p = 0; p < 3; ++p) {
    const uint64_t off = slice_offset(layer, p, expert);
    const uint32_t fi = file_.tensors()[el.tensors[p]].file_index;
    std::span<uint8_t> dst(base + el.part_offset[p] + off % kAlign, el.slice_bytes[p]);
    slots_[slot].reads.push_back({fi, storages_[fi]->submit(off, dst, priority)});
  }
}

// Reads random experts (uniform over layers and experts) into two emptied slots, two in
// flight as a layer's misses are, and nothing is computed: the disk's rate for this
// provider's own reads, measured in the run it is compared with.
Result<double> ExpertProvider::measure_io_only_bps(double seconds) {
  std::vector<int> use;
  for (size_t i = 0; i < slots_.size() && use.size() < 2; ++i) {
    const int slot = static_cast<int>(i);
    if (slots_[i].state == SlotState::kReading || slots_[i].pinned) continue;
    count_eviction(slot);
    cache_->erase(slot);
    slots_[i] = Slot{};
    use.push_back(slot);
  }
  if (use.empty())
    return resource_exhausted("expert I/O reference: every slot is pinned or being read");
  const uint64_t storage_before = storage_bytes_since_load();
  std::mt19937_64 rng(static_cast<uint64_t>(slots_.size()) * 7919 + reads_started_);
  std::uniform_int_distribution<size_t> pick_layer(0, moe_layers_.size() - 1);
  std::uniform_int_distribution<int> pick_expert(0, n_expert_ - 1);
  uint64_t bytes = 0;
  const auto t0 = Clock::now();
  for (size_t i = 0; seconds_since(t0) < seconds || i % use.size() != 0; ++i) {
    const int slot = use[i % use.size()];
    HYPURA_RETURN_IF_ERROR(
        io::wait_all(storages_, slots_[slot].reads));  // this slot's previous read
    const int layer = moe_layers_[pick_layer(rng)];
    submit_expert(slot, layer, pick_expert(rng), io::Priority::kNormal);
    bytes += expert_bytes(layer);
  }
  for (int slot : use) HYPURA_RETURN_IF_ERROR(io::wait_all(storages_, slots_[slot].reads));
  const double elapsed = seconds_since(t0);
  reference_storage_bytes_ += storage_bytes_since_load() - storage_before;
  return static_cast<double>(bytes) / elapsed;
}

Status ExpertProvider::wait_slot(int slot) {
  Slot& s = slots_[slot];
  Status first = io::wait_all(storages_, s.reads);
  if (!first.is_ok()) {
    const int layer = cache_->layer_of(slot), expert = cache_->expert_of(slot);
    cache_->erase(slot);
    s = Slot{};
    return first.with_context("reading expert " + std::to_string(expert) + " of layer " +
                              std::to_string(layer));
  }
  s.state = SlotState::kReady;
  return Status::ok();
}

// Starts demand reads for the layer's routed experts still waiting for a slot, in order.
void ExpertProvider::start_wanted(int layer) {
  auto& w = wanted_[layer];
  size_t started = 0;
  while (started < w.size() && start_read(layer, w[started], 0)) ++started;
  w.erase(w.begin(), w.begin() + static_cast<std::ptrdiff_t>(started));
}

void ExpertProvider::drop_cancelled(int slot) {
  Slot& s = slots_[slot];
  (void)io::wait_all(storages_, s.reads);
  count_eviction(slot);
  cache_->erase(slot);
  s = Slot{};
}

int ExpertProvider::lookup_live(int layer, int expert) {
  const int slot = cache_->lookup(layer, expert);
  if (slot < 0 || !slots_[slot].cancelled) return slot;
  drop_cancelled(slot);
  return -1;
}

// A wrong guess whose read has not been fully issued yet would still take device time
// that the next layers' reads need: what is not yet issued is dropped.
void ExpertProvider::cancel_unrouted(int layer) {
  if (!config_.cancel_wrong_reads) return;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != SlotState::kReading || !s.speculative || s.wanted || s.cancelled ||
        cache_->layer_of(static_cast<int>(i)) != layer)
      continue;
    uint64_t dropped = 0;
    for (const io::PendingRead& r : s.reads) dropped += storages_[r.file_index]->cancel(r.id);
    if (dropped == 0) continue;
    s.cancelled = true;
    stats_.cancelled_reads++;
    stats_.cancelled_bytes += dropped;
  }
}

// Marks speculative reads that have completed ready (a failure or a cancelled read empties
// the slot), so a wrong guess's slot becomes evictable without anyone waiting on it.
// Returns the speculative reads still in flight.
int ExpertProvider::reap_speculative() {
  int in_flight = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != SlotState::kReading || !s.speculative) continue;
    const bool done = std::all_of(s.reads.begin(), s.reads.end(), [this](const io::PendingRead& r) {
      return storages_[r.file_index]->done(r.id);
    });
    if (done && s.cancelled) {
      drop_cancelled(static_cast<int>(i));
    } else if (done) {
      (void)wait_slot(static_cast<int>(i));
    } else {
      ++in_flight;
    }
  }
  return in_flight;
}

// Waits for one speculative read (a failure just empties its slot), so that its slot
// becomes evictable. False when no speculative read is in flight.
bool ExpertProvider::finish_speculative() {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state != SlotState::kReading || !s.speculative) continue;
    if (s.cancelled) {
      drop_cancelled(static_cast<int>(i));
    } else {
      (void)wait_slot(static_cast<int>(i));
    }
    return true;
  }
  return false;
}

// The entry in `slot` is about to be dropped: a speculative read never routed to is wasted.
void ExpertProvider::count_eviction(int slot) {
  if (!cache_->occupied(slot) || !slots_[slot].speculative) return;
  const uint64_t bytes = expert_bytes(cache_->layer_of(slot));
  stats_.wasted_bytes += bytes;
  count_speculative(slots_[slot], false, bytes);
}

// Resolves a speculative read of `bytes` for each predictor that asked for it: routed to
// (used) or evicted unused (wasted).
void ExpertProvider::count_speculative(const Slot& s, bool used, uint64_t bytes) {
  for (auto [bit, st] :
       {std::pair{kFromCoact, &stats_.coact}, std::pair{kFromRouter, &stats_.router}}) {
    if ((s.sources & bit) == 0) continue;
    if (used) {
      st->reads_used++;
    } else {
      st->wasted_bytes += bytes;
    }
  }
}

// Scores the guesses made for `layer` against its routed experts (sorted), then drops them.
void ExpertProvider::check_predictions(int layer, std::span<const int32_t> experts) {
  auto score = [&](std::vector<int32_t>& pred, PredictorStats& st) {
    if (pred.empty()) return;
    st.predicted += pred.size();
    st.routed += experts.size();
    for (int32_t e : pred) st.correct += std::binary_search(experts.begin(), experts.end(), e);
    pred.clear();
  };
  score(coact_pred_[layer], stats_.coact);
  score(router_pred_[layer], stats_.router);
  router_guess_[layer].clear();
  for (int d = 0; d < kMaxRouterLookahead; ++d) {
    for (auto [e, rank] : uncached_at_[d][layer])
      rule_->score(d + 1, rank, std::binary_search(experts.begin(), experts.end(), e));
    uncached_at_[d][layer].clear();
    score(router_at_[d][layer], stats_.router_at[d]);
    score(router_confident_at_[d][layer], stats_.router_confident_at[d]);
  }
}

// The router predictor: the experts layer L+d's router would select on `x` (one token's
// FFN input of layer L, (n_embd)), best first, lower id on ties, with the model's gating,
// score bias and expert groups (model/routing.h); those whose probability reaches
// router_min_prob are the ones to read.
void ExpertProvider::predict_router(int layer, const float* x, int64_t n_rows) {
  const int k = n_expert_used_;
  for (int d = 1; d <= config_.router_lookahead; ++d) {
    const int target = layer + d;
    if (target >= n_layer()) break;
    const model::TensorId id = routers_[target];
    if (id < 0) continue;
    const gguf::TensorInfo& t = file_.tensors()[id];
    const compute::WeightView router{resident_.data[id], t.type, t.ne[0], t.n_rows()};
    router_ctx_->matmul(router, x, n_rows, router_logits_.data());
    // Each row's top k (lower id on ties), in rank order.
    const model::TensorId bias = router_biases_[target];
    for (int64_t r = 0; r < n_rows; ++r) {
      float* probs = router_logits_.data() + r * n_expert_;
      if (routing_hp_ != nullptr) {
        model::route_row(*routing_hp_, probs,
                         bias >= 0 ? reinterpret_cast<const float*>(resident_.data[bias]) : nullptr,
                         route_scratch_.data(), router_top_.data() + r * k, route_w_.data());
        continue;
      }
      compute::softmax(probs, n_expert_);
      compute::top_k(probs, n_expert_, k, router_top_.data() + r * k);
    }
    // Their union, rank by rank: every row's best first, then every row's second, ...
    std::vector<int32_t>& pred = router_pred_[target];
    std::vector<Guess>& guess = router_guess_[target];
    std::vector<int32_t>& confident = router_confident_at_[d - 1][target];
    auto& uncached = uncached_at_[d - 1][target];
    pred.clear();
    guess.clear();
    confident.clear();
    uncached.clear();
    for (int slot = 0; slot < k; ++slot) {
      for (int64_t r = 0; r < n_rows; ++r) {
        const int32_t e = router_top_[r * k + slot];
        if (std::find(pred.begin(), pred.end(), e) != pred.end()) continue;
        pred.push_back(e);
        const float prob = router_logits_[r * n_expert_ + e];
        guess.push_back({e, d, slot, prob});
        if (prob >= config_.router_min_prob) confident.push_back(e);
        if (cache_->lookup(target, e) < 0) uncached.emplace_back(e, slot);
      }
    }
    router_at_[d - 1][target] = pred;
  }
}

// One row per sequence of the batch: each one's guesses are read (the first
// kMaxPredictedRows sequences of a larger step).
void ExpertProvider::observe_hidden(int layer, std::span<const float> x, int64_t n_rows) {
  if (router_ctx_ == nullptr || n_rows < 1 || layer < 0 || layer >= n_layer()) return;
  if (x.size() != static_cast<size_t>(n_rows * n_embd_)) return;
  predict_router(layer, x.data(), std::min(n_rows, kMaxPredictedRows));
}

// Starts a speculative read of (layer, expert) for `source` unless it is cached; one
// already being read speculatively is credited to this predictor too. kStarted, kCached,
// or kNoSlot when no slot could be freed.
ExpertProvider::GuessRead ExpertProvider::read_guess(int layer, int32_t expert, uint8_t source) {
  const int slot = lookup_live(layer, expert);
  if (slot >= 0) {
    Slot& s = slots_[slot];
    if (s.speculative && (s.sources & source) == 0) {
      s.sources |= source;
      (source == kFromCoact ? stats_.coact : stats_.router).reads++;
    }
    return GuessRead::kCached;
  }
  if (!start_read(layer, expert, source)) return GuessRead::kNoSlot;
  ++spec_in_flight_;
  rule_->charge(layers_[layer].expert_bytes);
  return GuessRead::kStarted;
}

// The co-activation guesses for `layer`, best first, while slots can be freed.
void ExpertProvider::speculate_coact(int layer) {
  for (int32_t e : coact_pred_[layer]) {
    if (spec_in_flight_ >= config_.max_speculative_inflight) return;
    if (read_guess(layer, e, kFromCoact) == GuessRead::kNoSlot) return;
  }
}

// The router's guesses for `layer` that the rule admits, in rank order.
void ExpertProvider::speculate_router(int layer) {
  for (const Guess& g : router_guess_[layer]) {
    if (spec_in_flight_ >= config_.max_speculative_inflight) return;
    const PrefetchRule::Admit a = rule_->test(g.prob, g.distance, g.rank);
    if (a == PrefetchRule::Admit::kNo) continue;
    const GuessRead r = read_guess(layer, g.expert, kFromRouter);
    if (r == GuessRead::kNoSlot) return;
    if (r == GuessRead::kStarted)
      (a == PrefetchRule::Admit::kMeasured ? stats_.router_budget_reads
                                           : stats_.router_prob_reads)++;
  }
}

// After layer `layer`'s demand reads: the co-activation guess for layer + 1 (always made,
// for its score), then the enabled predictors' reads, nearest layer first.
void ExpertProvider::speculate(int layer, std::span<const int32_t> experts) {
  if (layer + 1 >= n_layer()) return;
  const int k_max =
      config_.max_speculative > 0 ? config_.max_speculative : static_cast<int>(experts.size());
  coact_->predict(layer, experts, k_max, config_.min_confidence, &coact_pred_[layer + 1]);
  const ExpertPredictor p = predictor();
  const bool use_router = p == ExpertPredictor::kRouter || p == ExpertPredictor::kBoth;
  const bool use_coact = p == ExpertPredictor::kCoactivation || p == ExpertPredictor::kBoth;
  for (int d = 1; d <= config_.router_lookahead && layer + d < n_layer(); ++d) {
    if (use_router) speculate_router(layer + d);
    if (use_coact && d == 1) speculate_coact(layer + 1);
  }
}

void ExpertProvider::route(int layer, std::span<const int32_t> selected, int n_expert_used) {
  if (layer <= last_routed_layer_) ++pass_;
  last_routed_layer_ = layer;
  for (Slot& s : slots_) s.wanted = false;  // the previous batch's experts are all computed
  spec_in_flight_ = reap_speculative();
  if (trace_ != nullptr && trace_->n_expert_used == 0) trace_->n_expert_used = n_expert_used;
  if (trace_ != nullptr)
    trace_->add(pass_, layer, selected.data(), static_cast<int64_t>(selected.size()));
  if (layer == 0) stats_.routed_tokens += selected.size() / n_expert_used;
  coact_->observe(layer, selected, n_expert_used);
  distinct_.assign(selected.begin(), selected.end());
  std::sort(distinct_.begin(), distinct_.end());
  distinct_.erase(std::unique(distinct_.begin(), distinct_.end()), distinct_.end());
  cache_->begin_routing(layer, distinct_);
  check_predictions(layer, distinct_);
  rule_->begin_layer();
  wanted_[layer].clear();
  for (int32_t e : distinct_) {
    stats_.lookups++;
    const int slot = lookup_live(layer, e);
    if (slot < 0) {
      wanted_[layer].push_back(e);
      continue;
    }
    stats_.hits++;
    Slot& s = slots_[slot];
    if (s.speculative) {
      // Its read already counted as the access (as a demand read's does).
      stats_.speculative_used++;
      count_speculative(s, true, 0);
      for (const io::PendingRead& r : s.reads) storages_[r.file_index]->expedite(r.id);
    } else {
      cache_->touch(slot);
    }
    s.speculative = false;
    s.sources = 0;
    s.wanted = true;
  }
  cancel_unrouted(layer);
  start_wanted(layer);
  speculate(layer, distinct_);
}

// Cached experts first (ascending id), then those being read in the order their reads
// started (the device serves normal reads in order, expedited ones behind them), then any
// still waiting for a slot.
void ExpertProvider::order_experts(int layer, std::span<int32_t> experts) {
  if (!config_.order_by_arrival) return;
  auto rank = [&](int32_t e) -> uint64_t {
    const int slot = cache_->lookup(layer, e);
    if (slot < 0) return UINT64_MAX;
    return slots_[slot].state == SlotState::kReady ? 0 : slots_[slot].read_seq;
  };
  std::stable_sort(experts.begin(), experts.end(),
                   [&](int32_t a, int32_t b) { return rank(a) < rank(b); });
}

Status ExpertProvider::ensure(int layer, int expert, int* slot_out) {
  int slot = lookup_live(layer, expert);
  if (slot < 0) {
    // Not routed through route(), or no slot was free then: read it now.
    auto& w = wanted_[layer];
    const auto it = std::find(w.begin(), w.end(), expert);
    if (it != w.end()) {
      w.erase(it);
    } else {
      stats_.lookups++;
    }
    while (!start_read(layer, expert, 0)) {
      if (!finish_speculative())
        return resource_exhausted("expert cache: all " + std::to_string(slots_.size()) +
                                  " slots are pinned or being read when layer " +
                                  std::to_string(layer) + " needs expert " +
                                  std::to_string(expert));
    }
    slot = cache_->lookup(layer, expert);
  }
  if (slots_[slot].state == SlotState::kReading) {
    const auto t0 = Clock::now();
    const auto submitted = slots_[slot].submitted;
    StallStats& by = slots_[slot].read_as_speculative ? stats_.stall_prefetched : stats_.stall_miss;
    Status st = wait_slot(slot);
    const double waited = seconds_since(t0);
    stats_.stall_seconds += waited;
    by.waits++;
    by.seconds += waited;
    by.read_seconds += seconds_since(submitted);
    HYPURA_RETURN_IF_ERROR(st);
  }
  *slot_out = slot;
  return Status::ok();
}

void ExpertProvider::unpin(int layer) {
  for (int slot : pinned_) slots_[slot].pinned = false;
  pinned_.clear();
  (void)layer;
}

compute::WeightView ExpertProvider::expert_view(int slot, int layer, int part, int expert) const {
  const ExpertLayer& el = layers_[layer];
  const gguf::TensorInfo& t = file_.tensors()[el.tensors[part]];
  compute::WeightView v;
  v.data = cache_memory_.data() + static_cast<uint64_t>(slot) * slot_bytes_ + el.part_offset[part] +
           slice_offset(layer, part, expert) % kAlign;
  v.type = t.type;
  v.n_cols = t.ne[0];
  v.n_rows = t.ne[1];
  return v;
}

Status ExpertProvider::acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                                       std::span<compute::WeightView> out) {
  unpin(layer);
  for (size_t i = 0; i < requests.size(); ++i) {
    const model::TensorId id = requests[i].tensor;
    const int part =
        id >= 0 && static_cast<size_t>(id) < part_of_tensor_.size() ? part_of_tensor_[id] : -1;
    if (part < 0 || layer_of_tensor_[id] != layer || requests[i].expert < 0 ||
        requests[i].expert >= n_expert_) {
      return invalid_argument("acquire_experts: request " + std::to_string(i) +
                              " is not an expert of a stacked tensor of layer " +
                              std::to_string(layer));
    }
    int slot = -1;
    HYPURA_RETURN_IF_ERROR(ensure(layer, requests[i].expert, &slot));
    Slot& s = slots_[slot];
    if (!s.pinned) pinned_.push_back(slot);
    s.pinned = true;
    s.wanted = false;
    out[i] = expert_view(slot, layer, part, requests[i].expert);
  }
  start_wanted(layer);  // slots consumed since route() may take the rest of the batch now
  return Status::ok();
}

Status ExpertProvider::acquire(int layer, std::span<const model::TensorId> ids,
                               std::span<compute::WeightView> out) {
  for (size_t i = 0; i < ids.size(); ++i) {
    const model::TensorId id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= resident_.data.size() ||
        resident_.data[id] == nullptr) {
      return invalid_argument("tensor " + std::to_string(id) + " requested for layer " +
                              std::to_string(layer) +
                              " is an expert tensor (use acquire_experts) or unknown");
    }
    out[i] = tiers::tensor_view(file_.tensors()[id], resident_.data[id]);
  }
  return Status::ok();
}

void ExpertProvider::release(int layer) {
  if (layer >= 0) unpin(layer);
}

void ExpertProvider::record_trace(RoutingTrace* trace) {
  trace_ = trace;
  if (trace_ != nullptr && trace_->n_layer == 0) {
    trace_->n_layer = n_layer();
    trace_->n_expert = n_expert_;
  }
}

Status ExpertProvider::save_stats() const {
  if (config_.stats_path.empty() || coact_->tokens() == 0) return Status::ok();
  return coact_->save(config_.stats_path);
}

ExpertStats ExpertProvider::stats() const {
  ExpertStats s = stats_;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].speculative && cache_->occupied(static_cast<int>(i))) {
      const uint64_t bytes = expert_bytes(cache_->layer_of(static_cast<int>(i)));
      s.wasted_bytes += bytes;
      if ((slots_[i].sources & kFromCoact) != 0) s.coact.wasted_bytes += bytes;
      if ((slots_[i].sources & kFromRouter) != 0) s.router.wasted_bytes += bytes;
    }
  }
  return s;
}

}  // namespace hypura::experts
