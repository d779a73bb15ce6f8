#include "runtime/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "common/size.h"
#include "compute/compute.h"
#include "gguf/gguf.h"
#include "grammar/token_mask.h"
#include "model/cpu_blocks.h"
#include "model/cuda_blocks.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "profiler/profiler.h"
#include "profiler/system_info.h"
#include "runtime/device_choice.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"
#include "runtime/step_batcher.h"
#include "runtime/tiered_weights.h"
#include "tiers/device_weights.h"
#include "tiers/staged_weights.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace hypura::runtime {

int physical_cores() {
  namespace fs = std::filesystem;
  std::set<std::string> cores;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/devices/system/cpu", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("cpu", 0) != 0 || name.size() < 4 || !std::isdigit(name[3])) continue;
    std::ifstream in(entry.path() / "topology" / "thread_siblings_list");
    std::string siblings;
    if (in >> siblings) cores.insert(siblings);
  }
  if (!cores.empty()) return static_cast<int>(cores.size());
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string StopMatcher::push(std::string_view text, bool* stopped) {
  pending_.append(text);
  *stopped = false;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    const size_t at = pending_.find(s);
    if (at != std::string::npos) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    *stopped = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Keep the longest suffix that is a prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t len = std::min(s.size() - 1 + (s.empty() ? 1 : 0), pending_.size()); len > keep;
         --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class LocalEngine;

class LocalSession final : public Session {
 public:
  explicit LocalSession(LocalEngine& engine);

  Result<GenerateResult> generate(const std::vector<int32_t>& prompt,
                                  const GenerateOptions& options,
                                  const std::function<bool(std::string_view)>& on_piece) override;
  Status eval(const std::vector<int32_t>& tokens, std::vector<float>* out_logits) override;
  Status prefill(const std::vector<int32_t>& tokens, std::vector<float>* out_logits) override;
  void reset() override { history_.clear(); }
  void set_batch_member(bool member) override;
  void truncate(int64_t n) override {
    if (n < n_past()) history_.resize(static_cast<size_t>(n));
  }
  int64_t n_past() const override { return static_cast<int64_t>(history_.size()); }
  int64_t cached_prefix(const std::vector<int32_t>& tokens) const override {
    const size_t n = std::min(history_.size(), tokens.size());
    return std::mismatch(history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(n),
                         tokens.begin())
               .first -
           history_.begin();
  }
  int64_t n_ctx() const override;
  Status reserve_context(int64_t n_ctx) override;
  Status embed(const std::vector<int32_t>& tokens, Pooling pooling,
               std::vector<float>* out) override;

 private:
  // Runs tokens at the end of the cache through the engine's steps (shared with the other
  // sessions); the last n_logits tokens' logits land in out (n_logits, n_vocab), or, for
  // the last token alone by default, in logits_. kCancelled when *cancel is set before the
  // tokens are all processed.
  // tree_parent: the tokens are a draft tree (StepBatcher::Request), else empty.
  Status feed(std::span<const int32_t> tokens, const std::atomic<bool>* cancel = nullptr,
              int64_t n_logits = 1, float* out = nullptr,
              std::span<const int32_t> tree_parent = {});
  // As feed(), alone and in batches of kMaxBatch, with every token's logits in *all.
  Status feed_all_logits(std::span<const int32_t> tokens, std::vector<float>* all);
  Status check_room(size_t n_tokens) const;
  Status check_fits(size_t n_prompt, int max_tokens) const;
  // The KV cache for n_ctx positions on the engine's device.
  Status build(int64_t n_ctx);

  LocalEngine& engine_;
  Status init_;  // why the session could not be built (every call returns it), or OK
  std::unique_ptr<model::KvCache> kv_;
  std::unique_ptr<BatchMembership> membership_;  // while set_batch_member(true)
  std::vector<int32_t> history_;   // tokens whose keys/values the cache holds, in order
  std::vector<float> logits_;      // (n_vocab) of the last fed token
  std::vector<uint64_t> allowed_;  // (n_vocab / 64) the token mask of constrained sampling

  std::unique_ptr<Session> draft_session_;  // the draft model's (speculation), made on first use
  // The guesses per pass, measured across this session's generations with one drafter.
  std::optional<DraftLength> draft_length_;
  SpeculationOptions draft_length_for_;
  std::vector<float> spec_logits_;  // (1 + guesses, n_vocab) of a speculative pass

  // Sets the logits of the tokens the grammar refuses to -inf; false when none is left.
  bool mask_logits(grammar::TokenMatcher& matcher, float* logits);
  Result<std::unique_ptr<Drafter>> drafter_for(const SpeculationOptions& options);
};

class LocalEngine final : public Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);

  const gguf::GgufFile& file() const override { return file_; }
  const tokenizer::Tokenizer& tokenizer() const override { return *tokenizer_; }
  std::unique_ptr<Session> new_session() override { return std::make_unique<LocalSession>(*this); }
  Status check_host_memory() const override;
  Status replan() override;
  int64_t n_ctx() const override { return n_ctx_; }
  int64_t max_context() const override { return std::max(n_ctx_, model_->hparams().n_ctx_train); }
  int64_t n_vocab() const override { return model_->hparams().n_vocab; }
  int64_t n_embd() const override { return model_->hparams().n_embd; }
  Pooling pooling() const override;
  std::string architecture() const override { return model_->hparams().arch_name; }
  std::string mode() const override { return weights_ ? weights_->mode() : "unloaded"; }
  std::string device() const override { return device_kind_name(device_.kind); }
  bool on_gpu() const { return device_.kind == DeviceKind::kCuda; }
  // The most guesses (a draft tree's nodes) a pass may verify and still give plain
  // decoding's logits bit for bit: the GPU computes passes of up to kCudaSmallBatch rows of
  // a sequence as decode steps.
  int max_exact_draft() const {
    return on_gpu() ? static_cast<int>(model::kCudaSmallBatch) - 1
                    : std::numeric_limits<int>::max();
  }
  tiers::DeviceWeights& device_weights() { return *device_weights_; }
  const TieredWeights* tiers() const override { return weights_.get(); }
  StepCounts step_counts() const override { return batcher_->counts(); }
  int n_parallel() const override { return weights_->plan().n_seq; }
  TieredWeights* mutable_tiers() override { return weights_.get(); }

  Result<std::vector<int32_t>> tokenize_chat(const std::vector<ChatMessage>& messages,
                                             const ChatOptions& options) const override;
  std::vector<int32_t> tokenize(const std::string& text, bool add_special) const override {
    return tokenizer_->encode(text, add_special, /*parse_special=*/true);
  }
  std::optional<FimTokens> fim_tokens() const override;
  bool supports_tools() const override { return chat_->supports_tools(); }
  bool writes_harmony() const override { return tokenizer_->harmony(); }
  Engine* draft_model() const override { return draft_.get(); }

  const std::shared_ptr<const model::Model>& model() const { return model_; }
  Status place_on_device(const std::function<void(uint64_t, uint64_t)>& progress);
  // The first layer the GPU computes (n_layer: none; 0: all), where each session's KV
  // cache switches to device memory.
  int64_t first_gpu_layer() const {
    return on_gpu() ? model_->hparams().n_layer - weights_->plan().gpu.layers
                    : model_->hparams().n_layer;
  }
  // Whether prompt batches run every layer on the GPU (the host layers' KV rows then
  // mirrored in device memory).
  bool wide_prompts() const { return staged_weights_ != nullptr; }
  // The CPU kernels' level ("": the default): --simd when given. A split whose prompts run
  // on the GPU (wide stages) leaves the CPU batches under kWidePromptRows rows, one token a
  // step when decoding, where the amx level's products run on its vector path, slower than
  // the avx512 levels' row-by-row kernels (docs/GPU.md, "The CPU stage"); such a split takes
  // avx512vnni instead of amx. Batch invariance holds within a level.
  std::string cpu_stage_simd(const std::string& asked) const {
    if (!asked.empty()) return asked;
    if (!wide_prompts()) return "";
    return std::string_view(compute::default_simd_name()) == "amx" ? "avx512vnni" : "";
  }
  compute::Context* compute_context() override { return ctx_.get(); }
  model::WeightProvider& provider() { return weights_->provider(); }
  bool kv_f32() const { return kv_f32_; }
  // The steps every session's tokens go through (continuous batching).
  StepBatcher& batcher() { return *batcher_; }
  // Makes the shared Forward's scratch cover contexts of n_ctx positions (a session's
  // cache grew), between steps.
  Status cover_context(int64_t n_ctx);
  // The vocabulary arranged for constrained sampling, built at the first request that
  // needs it (a trie and string tables of every token's bytes; ~0.1 s for 151k tokens).
  const grammar::VocabIndex& vocab_index() const;

 private:
  gguf::GgufFile file_;
  std::shared_ptr<const model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<tokenizer::ChatTemplate> chat_;
  std::unique_ptr<TieredWeights> weights_;  // placed by the planner (tiered_weights.h)
  std::unique_ptr<compute::Context> ctx_;
  DeviceChoice chosen_device_;  // choose_device's decision, which the plans start from
  DeviceChoice device_;         // where the forward passes run (the plan may leave the GPU out)
  std::unique_ptr<tiers::DeviceWeights> device_weights_;  // the weights in GPU memory (cuda)
  // A split model's prompts on the GPU alone: the host layers' weights copied per layer
  // (null: no such path).
  std::unique_ptr<tiers::StagedWeights> staged_weights_;
  // The expert split's routed experts in RAM, computed by the CPU (null: none).
  bool cuda_graphs_ = true;  // EngineOptions::cuda_graphs
  std::unique_ptr<model::HostExperts> host_experts_;
  int64_t n_ctx_ = 0;
  bool kv_f32_ = false;
  std::unique_ptr<StepBatcher> batcher_;  // owns the one Forward all sessions share
  std::unique_ptr<Engine> draft_;         // EngineOptions::draft_model (null: none)
  Result<std::unique_ptr<model::Forward>> make_forward(int64_t n_ctx);
  Status load_draft(const EngineOptions& options);
  Status charge_draft(scheduler::Budgets* budgets) const;
  Result<TierOptions> tier_options() const;
  Status load_weights(const TierOptions& tier);
  void release_weights();
  EngineOptions options_;  // what the engine was loaded with: a re-plan's request
  Status stage_host_layers();
  mutable std::once_flag vocab_index_once_;
  mutable std::unique_ptr<grammar::VocabIndex> vocab_index_;
};

const grammar::VocabIndex& LocalEngine::vocab_index() const {
  std::call_once(vocab_index_once_, [this] {
    const auto t0 = Clock::now();
    std::vector<std::string> pieces(static_cast<size_t>(tokenizer_->n_vocab()));
    for (int32_t id = 0; id < tokenizer_->n_vocab(); ++id)
      pieces[id] = tokenizer_->token_to_piece(id);
    const auto& ends = tokenizer_->end_of_generation_ids();
    const std::vector<int32_t> end_ids(ends.begin(), ends.end());
    vocab_index_ = std::make_unique<grammar::VocabIndex>(pieces, end_ids);
    spdlog::info(
        "constrained sampling: vocabulary of {} tokens indexed ({} trie nodes) in {:.0f} ms",
        pieces.size(), vocab_index_->n_trie_nodes(), seconds_since(t0) * 1e3);
  });
  return *vocab_index_;
}

Result<std::unique_ptr<Engine>> LocalEngine::create(const EngineOptions& options) {
  auto e = std::make_unique<LocalEngine>();
  HYPURA_ASSIGN_OR_RETURN(e->file_, gguf::GgufFile::open(options.model_path));
  HYPURA_ASSIGN_OR_RETURN(e->model_, model::Model::create(e->file_));
  HYPURA_ASSIGN_OR_RETURN(e->tokenizer_, tokenizer::Tokenizer::from_metadata(e->file_.metadata()));
  if (e->tokenizer_->n_vocab() > e->model_->hparams().n_vocab) {
    return corrupt("tokenizer has " + std::to_string(e->tokenizer_->n_vocab()) +
                   " tokens but the output layer only " +
                   std::to_string(e->model_->hparams().n_vocab));
  }
  e->chat_ = std::make_unique<tokenizer::ChatTemplate>(
      tokenizer::ChatTemplate::for_tokenizer(*e->tokenizer_));
  e->kv_f32_ = options.kv_f32;
  e->cuda_graphs_ = options.cuda_graphs;
  HYPURA_ASSIGN_OR_RETURN(const DeviceRequest request, parse_device(options.device));
  HYPURA_ASSIGN_OR_RETURN(e->chosen_device_, choose_device(request, e->file_, e->model_->hparams(),
                                                           options.kv_f32, options.gpu_budget));
  e->device_ = e->chosen_device_;
  e->options_ = options;
  e->options_.load_progress = nullptr;  // a re-plan loads without the caller's progress bar
  HYPURA_RETURN_IF_ERROR(e->load_draft(options));
  HYPURA_ASSIGN_OR_RETURN(TierOptions tier, e->tier_options());
  tier.progress = options.load_progress;
  HYPURA_RETURN_IF_ERROR(e->load_weights(tier));
  return std::unique_ptr<Engine>(std::move(e));
}

// The draft model, loaded first (resident, on the target's device). Its vocabulary must be
// the target's, token for token.
Status LocalEngine::load_draft(const EngineOptions& options) {
  if (options.draft_model.empty()) return Status::ok();
  EngineOptions d = options;
  d.model_path = options.draft_model;
  d.draft_model.clear();
  d.ram_budget = 0;
  d.gpu_budget = 0;
  d.trace_path.clear();
  spdlog::info("loading the draft model {}", d.model_path);
  HYPURA_ASSIGN_OR_RETURN(draft_, Engine::load(d));
  const tokenizer::Tokenizer& ours = *tokenizer_;
  const tokenizer::Tokenizer& theirs = draft_->tokenizer();
  const int32_t n = std::min(ours.n_vocab(), theirs.n_vocab());
  for (int32_t id = 0; id < n; ++id) {
    if (ours.token_to_piece(id) != theirs.token_to_piece(id)) {
      return invalid_argument("the draft model's vocabulary differs from the model's at token " +
                              std::to_string(id) + " ('" + theirs.token_to_piece(id) + "' vs '" +
                              ours.token_to_piece(id) + "')");
    }
  }
  if (ours.n_vocab() != theirs.n_vocab()) {
    return invalid_argument("the draft model's vocabulary has " + std::to_string(theirs.n_vocab()) +
                            " tokens, the model's " + std::to_string(ours.n_vocab()));
  }
  if (draft_->tiers()->plan().mode != scheduler::Mode::kFullResident) {
    return resource_exhausted("the draft model does not fit in memory (its plan: " +
                              draft_->mode() + "); a draft must be resident");
  }
  return Status::ok();
}

// The draft model's weights, caches and buffers come out of what the target may use.
Status LocalEngine::charge_draft(scheduler::Budgets* budgets) const {
  if (!draft_) return Status::ok();
  const scheduler::MemoryPlan& m = draft_->tiers()->plan().memory;
  const uint64_t ram = m.ram_total() - m.overhead_ram, gpu = m.gpu_total();
  if (budgets->ram_bytes) {
    if (ram >= *budgets->ram_bytes) {
      return resource_exhausted("the draft model takes " + std::to_string(ram >> 20) +
                                " MiB of the RAM budget of " +
                                std::to_string(*budgets->ram_bytes >> 20) + " MiB");
    }
    *budgets->ram_bytes -= ram;
  } else {
    budgets->reserve_bytes = budgets->reserve_bytes.value_or(profiler::kDefaultReserveBytes) + ram;
  }
  if (budgets->gpu_bytes && gpu > 0) *budgets->gpu_bytes -= std::min(gpu, *budgets->gpu_bytes);
  spdlog::info("draft model: {} MiB of RAM and {} MiB of GPU memory charged to the budgets",
               ram >> 20, gpu >> 20);
  return Status::ok();
}

// What the weights are placed with: the plan request of the options and the device
// decision (less the draft model's share), and the expert streaming's settings.
Result<TierOptions> LocalEngine::tier_options() const {
  const EngineOptions& options = options_;
  TierOptions tier;
  tier.plan = plan_request(options, chosen_device_);
  HYPURA_RETURN_IF_ERROR(charge_draft(&tier.plan.budgets));
  tier.trace_path = options.trace_path;
  const std::string& predictor = options.expert_predictor;
  if (!predictor.empty() && !experts::parse_expert_predictor(predictor, &tier.expert_predictor)) {
    return invalid_argument("expert predictor '" + predictor +
                            "' is not none, coact, router or both");
  }
  if (const int d = options.expert_lookahead; d != 0) {
    if (d < 1 || d > experts::kMaxRouterLookahead) {
      return invalid_argument("expert lookahead " + std::to_string(d) + " is not 1.." +
                              std::to_string(experts::kMaxRouterLookahead));
    }
    tier.expert_lookahead = d;
  }
  tier.expert_prefetch_budget = options.expert_prefetch_budget;
  tier.expert_cancel = options.expert_cancel;
  if (const double p = options.expert_prefetch_precision; p >= 0) {
    if (p > 1)
      return invalid_argument("expert prefetch precision " + std::to_string(p) + " is not in 0..1");
    tier.expert_prefetch_precision = p;
  }
  return tier;
}

// The weights placed by the plan (TieredWeights, then the GPU's share), the compute context
// for them and the one Forward every session shares.
Status LocalEngine::load_weights(const TierOptions& tier) {
  HYPURA_ASSIGN_OR_RETURN(weights_, TieredWeights::load(file_, tier));
  if (n_ctx_ == 0) {  // the first plan's context: a re-plan has the same budgets, so the same
    // The plan capped the context to the model's trained length unless asked not to: past
    // it RoPE keeps rotating but the model was never trained there, so only a speed
    // measurement (bench, like llama-bench) may ask for it.
    n_ctx_ = weights_->plan().n_ctx;
    const int64_t want = tier.plan.budgets.n_ctx, n_train = model_->hparams().n_ctx_train;
    if (want > n_train && options_.n_ctx_past_trained) {
      spdlog::warn(
          "context {} exceeds the model's trained length {}: speed only, outputs past it are "
          "not meaningful",
          want, n_train);
    } else if (n_ctx_ < want) {
      spdlog::info("context {} capped to the model's trained length {}", want, n_ctx_);
    }
  }
  HYPURA_RETURN_IF_ERROR(place_on_device(tier.progress));
  const int n_threads = options_.n_threads > 0 ? options_.n_threads : physical_cores();
  const std::string simd = cpu_stage_simd(options_.simd);
  ctx_ = std::make_unique<compute::Context>(n_threads, simd);
  if (!simd.empty()) spdlog::info("the CPU's layers decode with the {} kernels", ctx_->simd_name());
  HYPURA_ASSIGN_OR_RETURN(std::unique_ptr<model::Forward> forward, make_forward(n_ctx_));
  batcher_ = std::make_unique<StepBatcher>(std::move(forward), n_vocab());
  return Status::ok();
}

// Everything load_weights() made, in the reverse order of their dependencies.
void LocalEngine::release_weights() {
  batcher_.reset();
  host_experts_.reset();
  staged_weights_.reset();
  device_weights_.reset();
  ctx_.reset();
  weights_.reset();
}

Status LocalEngine::replan() {
  HYPURA_ASSIGN_OR_RETURN(const TierOptions tier, tier_options());
  // Planned first: where nothing fits, the loaded weights stay and the error names the limit.
  HYPURA_RETURN_IF_ERROR(plan_weights(file_, tier.plan).status());
  release_weights();  // before the new ones: the lowered limit never holds both
  if (Status st = load_weights(tier); !st.is_ok()) {
    release_weights();
    return st.with_context("loading the weights again");
  }
  spdlog::info("re-planned for the host memory of now: mode {}, {} held", weights_->mode(),
               format_size(weights_->ledger().used()));
  return Status::ok();
}

// The GPU's share of the plan read from the file into device memory (the host loaded
// only the rest), or the CPU alone when the plan gives the GPU nothing. A failed read is
// an error (the host does not hold those tensors): --device cpu or a smaller
// --vram-budget avoids it.
Status LocalEngine::place_on_device(const std::function<void(uint64_t, uint64_t)>& progress) {
  device_ = chosen_device_;  // a re-plan decides again
  const scheduler::GpuSplit& split = weights_->plan().gpu;
  if (device_.kind == DeviceKind::kCuda && !split.any()) {
    device_.kind = DeviceKind::kCpu;
    device_.reason =
        "cpu: nothing of the model fits the GPU beside its buffers (" + device_.reason + ")";
  }
  if (device_.kind == DeviceKind::kCuda) {
    auto read =
        tiers::DeviceWeights::read(file_, gpu_tensors(weights_->planned(), file_), progress);
    if (!read.is_ok()) {
      return read.status().with_context(
          "placing the GPU's layers (--device cpu or a smaller --vram-budget avoids it)");
    }
    device_weights_ = std::move(read).value();
    HYPURA_RETURN_IF_ERROR(stage_host_layers());
    const int64_t n_layer = model_->hparams().n_layer;
    device_.reason += "; the GPU computes " + std::to_string(split.layers) + " of " +
                      std::to_string(n_layer) + " layers" + (split.head ? " and the head" : "") +
                      " (" + format_size(device_weights_->device_bytes()) + " of weights)";
    if (split.host_experts > 0) {
      device_.reason +=
          ", the CPU the routed experts of " + std::to_string(split.host_experts) +
          " of them from " +
          (weights_->experts() != nullptr ? "storage through the expert cache" : "RAM");
    }
    if (wide_prompts()) {
      device_.reason += ", and every layer of prompts of " + std::to_string(kWidePromptRows) +
                        "+ tokens (the host layers copied through a " +
                        format_size(staged_weights_->slot_bytes()) + " slot)";
    }
  }
  spdlog::info("device: {}", device_.reason);
  return Status::ok();
}

Result<std::vector<int32_t>> LocalEngine::tokenize_chat(const std::vector<ChatMessage>& messages,
                                                        const ChatOptions& options) const {
  std::vector<tokenizer::ChatMessage> msgs;
  msgs.reserve(messages.size());
  for (const auto& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return invalid_argument("unknown chat role '" + m.role +
                              "' (expected system, user, assistant or tool)");
    }
    msgs.push_back({m.role, m.content, m.tool_calls, m.tool_name});
  }
  // Special tokens are parsed in the template's text only, never inside a message.
  if (options.continue_final && (msgs.empty() || msgs.back().role != "assistant")) {
    return invalid_argument("only an assistant's reply can be continued");
  }
  HYPURA_ASSIGN_OR_RETURN(
      tokenizer::PromptText prompt,
      options.continue_final
          ? chat_->render_continuing(msgs, options.tools, options.reasoning_effort)
          : chat_->render(msgs, options.add_generation_prompt, options.tools,
                          options.reasoning_effort));
  return tokenizer_->encode(prompt, /*add_special=*/true);
}

Pooling LocalEngine::pooling() const {
  const auto type = file_.metadata().get_u64(model_->hparams().arch_name + ".pooling_type");
  if (type == 1u) return Pooling::kMean;
  if (type == 2u) return Pooling::kFirst;
  return Pooling::kLast;  // 3 (last), 0 (none: a generative model) or absent
}

std::optional<FimTokens> LocalEngine::fim_tokens() const {
  // Newer conversions name the ids in the metadata; older ones only have the tokens.
  const auto& md = file_.metadata();
  const auto id = [&](const char* key, std::initializer_list<std::string_view> names) -> int32_t {
    if (auto v = md.get_u64(key); v && *v < static_cast<uint64_t>(tokenizer_->n_vocab())) {
      return static_cast<int32_t>(*v);
    }
    for (std::string_view name : names) {
      if (int32_t t = tokenizer_->find_token(name); t >= 0) return t;
    }
    return -1;
  };
  FimTokens fim{
      id("tokenizer.ggml.fim_pre_token_id", {"<|fim_prefix|>", "<fim_prefix>", "<fim-prefix>"}),
      id("tokenizer.ggml.fim_suf_token_id", {"<|fim_suffix|>", "<fim_suffix>", "<fim-suffix>"}),
      id("tokenizer.ggml.fim_mid_token_id", {"<|fim_middle|>", "<fim_middle>", "<fim-middle>"})};
  if (fim.prefix < 0 || fim.suffix < 0 || fim.middle < 0) return std::nullopt;
  return fim;
}

LocalSession::LocalSession(LocalEngine& engine)
    : engine_(engine), logits_(static_cast<size_t>(engine.n_vocab())) {
  init_ = build(engine.n_ctx());
  history_.reserve(static_cast<size_t>(engine.n_ctx()));
}

int64_t LocalSession::n_ctx() const {
  return kv_ ? kv_->n_ctx() : engine_.n_ctx();
}

Status LocalSession::build(int64_t n_ctx) {
  const model::HParams& hp = engine_.model()->hparams();
  if (!engine_.on_gpu()) {
    kv_ = std::make_unique<model::KvCache>(hp, n_ctx, engine_.kv_f32());
    return Status::ok();
  }
  HYPURA_ASSIGN_OR_RETURN(
      kv_, model::KvCache::on_device(hp, n_ctx, engine_.first_gpu_layer(), engine_.wide_prompts()));
  return Status::ok();
}

Status LocalEngine::check_host_memory() const {
  if (!weights_) return resource_exhausted("the model's weights are not loaded (a re-plan failed)");
  const profiler::MemoryProfile now = profiler::probe_memory(0);
  const uint64_t held = weights_->ledger().used();
  if (!now.cgroup_limit_bytes || *now.cgroup_limit_bytes >= held) return Status::ok();
  return resource_exhausted("the cgroup " + now.cgroup_version + " memory limit is now " +
                            format_size(*now.cgroup_limit_bytes) + ", below the " +
                            format_size(held) + " the loaded model's plan holds");
}

// A split model's prompts: every layer on the GPU, the host layers' weights (or an expert
// split's host experts) copied over the bus per layer, when the host serves whole tensors
// (not in expert streaming, whose host holds single experts).
Status LocalEngine::stage_host_layers() {
  const bool host_part = first_gpu_layer() > 0 || weights_->plan().gpu.host_experts > 0;
  if (!host_part || weights_->experts() != nullptr) return Status::ok();
  const tiers::LedgerBuffer& resident = weights_->resident().buffer;
  HYPURA_ASSIGN_OR_RETURN(
      staged_weights_,
      tiers::StagedWeights::create(file_, model_->weights(), provider(), *device_weights_,
                                   first_gpu_layer(), std::span(resident.data(), resident.size())));
  return Status::ok();
}

// The Forward's scratch (work buffers for kMaxBatch rows, attention partials for n_ctx
// keys) on the engine's device. A split model's CPU stage and GPU blocks serve both stage
// lists: the GPU's provider is then the staged one, which hands out device views of what
// the GPU holds and stages the rest only for the wide passes that ask for it.
Result<std::unique_ptr<model::Forward>> LocalEngine::make_forward(int64_t n_ctx) {
  if (!on_gpu())
    return std::make_unique<model::Forward>(model_, *ctx_, provider(), kMaxBatch, n_ctx);
  std::shared_ptr<model::Blocks> cpu;
  if (!weights_->plan().gpu.embedding) {
    cpu = std::make_shared<model::CpuBlocks>(model_->hparams(), model_->weights(), *ctx_,
                                             provider(), kMaxBatch, n_ctx);
  }
  // The expert split: batches under kWidePromptRows rows (and every batch when nothing is
  // staged) compute the host experts on the CPU; staged prompts copy them to the GPU.
  model::HostExpertLayers host;
  if (const int n = weights_->plan().gpu.host_experts; n > 0) {
    if (!host_experts_) {
      host_experts_ =
          std::make_unique<model::HostExperts>(model_->hparams(), *ctx_, provider(), kMaxBatch);
    }
    host = {host_experts_.get(), first_gpu_layer() + n};
    if (wide_prompts()) host.max_rows = kWidePromptRows;
  }
  model::WeightProvider& gpu_weights =
      wide_prompts() ? static_cast<model::WeightProvider&>(*staged_weights_) : *device_weights_;
  HYPURA_ASSIGN_OR_RETURN(
      std::shared_ptr<model::Blocks> gpu,
      model::make_cuda_blocks(model_->hparams(), model_->weights(), file_, gpu_weights, kMaxBatch,
                              n_ctx, host, cuda_graphs_));
  std::vector<model::ForwardStage> stages;
  if (cpu) stages.push_back({cpu, first_gpu_layer()});
  stages.push_back({gpu, model_->hparams().n_layer});
  auto forward = std::make_unique<model::Forward>(model_, std::move(stages), kMaxBatch);
  if (wide_prompts()) {
    std::vector<model::ForwardStage> wide;
    if (cpu) wide.push_back({cpu, 0});
    wide.push_back({gpu, model_->hparams().n_layer});
    forward->set_wide_stages(std::move(wide), kWidePromptRows);
  }
  return forward;
}

Status LocalEngine::cover_context(int64_t n_ctx) {
  return batcher_->exclusive([&](std::unique_ptr<model::Forward>& forward) -> Status {
    const int64_t covered = forward->n_ctx();
    if (covered >= n_ctx) return Status::ok();
    forward.reset();  // its scratch goes before the larger one is allocated
    auto larger = make_forward(n_ctx);
    if (!larger.is_ok()) {  // keep a working pass for the contexts it covered
      HYPURA_ASSIGN_OR_RETURN(forward, make_forward(covered));
      return larger.status();
    }
    forward = std::move(larger).value();
    return Status::ok();
  });
}

void LocalSession::set_batch_member(bool member) {
  if (member && !membership_) membership_ = std::make_unique<BatchMembership>(engine_.batcher());
  if (!member) membership_.reset();
}

// The KV cache grows in place (its rows keep their positions); the shared Forward's
// scratch is sized for the longest context, so it may be rebuilt. Half of the memory
// available now may go to it (host memory; a device cache that cannot grow says so and
// keeps its length).
Status LocalSession::reserve_context(int64_t n_ctx) {
  HYPURA_RETURN_IF_ERROR(init_);
  if (n_ctx <= kv_->n_ctx()) return Status::ok();
  if (n_ctx > engine_.max_context()) {
    return resource_exhausted("a context of " + std::to_string(n_ctx) +
                              " tokens exceeds the model's trained length of " +
                              std::to_string(engine_.max_context()));
  }
  const uint64_t per_token =
      kv_->bytes() / static_cast<uint64_t>(std::max<int64_t>(kv_->n_ctx(), 1));
  const uint64_t extra = per_token * static_cast<uint64_t>(n_ctx - kv_->n_ctx());
  const uint64_t available = profiler::probe_memory(0).available_bytes;
  if (!kv_->on_device() && available > 0 && extra > available / 2) {
    return resource_exhausted("a context of " + std::to_string(n_ctx) + " tokens needs " +
                              std::to_string(extra >> 20) + " MiB more for its KV cache; " +
                              std::to_string(available >> 20) + " MiB of memory are available");
  }
  HYPURA_RETURN_IF_ERROR(kv_->grow(n_ctx));  // only this session uses its cache
  HYPURA_RETURN_IF_ERROR(engine_.cover_context(n_ctx));
  history_.reserve(static_cast<size_t>(n_ctx));
  spdlog::info("context grown to {} tokens", n_ctx);
  return Status::ok();
}

Status LocalSession::feed(std::span<const int32_t> tokens, const std::atomic<bool>* cancel,
                          int64_t n_logits, float* out, std::span<const int32_t> tree_parent) {
  HYPURA_RETURN_IF_ERROR(init_);
  if (tokens.empty()) return Status::ok();
  StepBatcher::Request r;
  r.kv = kv_.get();
  r.tokens = tokens;
  r.pos = static_cast<int64_t>(history_.size());
  r.logits = out != nullptr ? out : logits_.data();
  r.n_logits = n_logits;
  r.tree_parent = tree_parent.empty() ? nullptr : tree_parent.data();
  r.member = membership_ != nullptr;
  r.cancel = cancel;
  HYPURA_RETURN_IF_ERROR(engine_.batcher().submit(r));
  history_.insert(history_.end(), tokens.begin(), tokens.end());
  return Status::ok();
}

Status LocalSession::feed_all_logits(std::span<const int32_t> tokens, std::vector<float>* all) {
  HYPURA_RETURN_IF_ERROR(init_);
  const int64_t n_vocab = engine_.n_vocab();
  HYPURA_RETURN_IF_ERROR(engine_.batcher().exclusive([&](std::unique_ptr<model::Forward>& forward) {
    for (size_t i = 0; i < tokens.size(); i += kMaxBatch) {
      const int64_t n = std::min<int64_t>(kMaxBatch, tokens.size() - i);
      const int64_t pos = static_cast<int64_t>(history_.size());
      HYPURA_RETURN_IF_ERROR(
          forward->run(tokens.data() + i, n, pos, *kv_, true, all->data() + i * n_vocab));
      history_.insert(history_.end(), tokens.begin() + i, tokens.begin() + i + n);
    }
    return Status::ok();
  }));
  if (!tokens.empty())
    std::copy_n(all->data() + (tokens.size() - 1) * n_vocab, n_vocab, logits_.data());
  return Status::ok();
}

Status LocalSession::embed(const std::vector<int32_t>& tokens, Pooling pooling,
                           std::vector<float>* out) {
  HYPURA_RETURN_IF_ERROR(init_);
  if (tokens.empty()) return invalid_argument("empty input");
  if (static_cast<int64_t>(tokens.size()) > n_ctx()) {
    return resource_exhausted("an input of " + std::to_string(tokens.size()) +
                              " tokens exceeds the context of " + std::to_string(n_ctx()));
  }
  const int64_t n_embd = engine_.n_embd();
  std::vector<double> sum(static_cast<size_t>(n_embd), 0.0);  // per request, not per token
  std::vector<float> hidden(
      static_cast<size_t>(std::min<int64_t>(kMaxBatch, tokens.size()) * n_embd));
  history_.clear();
  HYPURA_RETURN_IF_ERROR(engine_.batcher().exclusive([&](std::unique_ptr<model::Forward>& forward) {
    for (size_t i = 0; i < tokens.size(); i += kMaxBatch) {
      const int64_t n = std::min<int64_t>(kMaxBatch, tokens.size() - i);
      const int64_t pos = static_cast<int64_t>(i);
      HYPURA_RETURN_IF_ERROR(
          forward->run(tokens.data() + i, n, pos, *kv_, false, nullptr, hidden.data()));
      history_.insert(history_.end(), tokens.begin() + i, tokens.begin() + i + n);
      const bool last_batch = i + n == tokens.size();
      for (int64_t r = 0; r < n; ++r) {
        const bool take = pooling == Pooling::kMean ||
                          (pooling == Pooling::kFirst && i == 0 && r == 0) ||
                          (pooling == Pooling::kLast && last_batch && r == n - 1);
        if (!take) continue;
        for (int64_t c = 0; c < n_embd; ++c) sum[c] += hidden[r * n_embd + c];
      }
    }
    return Status::ok();
  }));
  double norm = 0;
  for (double v : sum) norm += v * v;
  norm = std::sqrt(norm);
  out->resize(static_cast<size_t>(n_embd));
  for (int64_t c = 0; c < n_embd; ++c)
    (*out)[c] = norm > 0 ? static_cast<float>(sum[c] / norm) : 0.0f;
  return Status::ok();
}

Status LocalSession::check_room(size_t n_tokens) const {
  if (static_cast<int64_t>(history_.size() + n_tokens) > n_ctx()) {
    return resource_exhausted("eval of " + std::to_string(n_tokens) + " tokens after " +
                              std::to_string(history_.size()) + " exceeds the context of " +
                              std::to_string(n_ctx()));
  }
  return Status::ok();
}

Status LocalSession::eval(const std::vector<int32_t>& tokens, std::vector<float>* out_logits) {
  HYPURA_RETURN_IF_ERROR(check_room(tokens.size()));
  out_logits->resize(tokens.size() * engine_.n_vocab());
  return feed_all_logits(tokens, out_logits);
}

Status LocalSession::prefill(const std::vector<int32_t>& tokens, std::vector<float>* out_logits) {
  HYPURA_RETURN_IF_ERROR(check_room(tokens.size()));
  HYPURA_RETURN_IF_ERROR(feed(tokens));
  out_logits->assign(logits_.begin(), logits_.end());
  return Status::ok();
}

Status LocalSession::check_fits(size_t n_prompt, int max_tokens) const {
  const int64_t n_ctx = this->n_ctx();
  if (n_prompt == 0) return invalid_argument("empty prompt");
  const int64_t need = static_cast<int64_t>(n_prompt) + std::max(max_tokens, 0);
  if (need > n_ctx) {
    return resource_exhausted("prompt of " + std::to_string(n_prompt) + " tokens plus " +
                              std::to_string(std::max(max_tokens, 0)) +
                              " to generate exceeds the context of " + std::to_string(n_ctx) +
                              " tokens (raise --context or lower --max-tokens)");
  }
  return Status::ok();
}

Result<std::unique_ptr<Drafter>> LocalSession::drafter_for(const SpeculationOptions& options) {
  Engine* draft = engine_.draft_model();
  if (options.on() && options.draft_model && draft != nullptr && !draft_session_)
    draft_session_ = draft->new_session();
  return make_drafter(options, draft_session_.get(), engine_.n_vocab());
}

bool LocalSession::mask_logits(grammar::TokenMatcher& matcher, float* logits) {
  matcher.fill_mask(allowed_);
  bool any = false;
  const int64_t n_vocab = engine_.n_vocab();
  for (int64_t w = 0; w * 64 < n_vocab; ++w) {
    const uint64_t word = allowed_[w];
    any |= word != 0;
    if (word == ~uint64_t{0}) continue;
    const int64_t last = std::min<int64_t>(64, n_vocab - w * 64);
    for (int64_t b = 0; b < last; ++b) {
      if (!((word >> b) & 1)) logits[w * 64 + b] = -INFINITY;
    }
  }
  return any;
}

Result<GenerateResult> LocalSession::generate(
    const std::vector<int32_t>& prompt, const GenerateOptions& options,
    const std::function<bool(std::string_view)>& on_piece) {
  HYPURA_RETURN_IF_ERROR(check_fits(prompt.size(), options.max_tokens));
  GenerateResult result;
  // Reuse the cached prefix; at least one token is fed to get fresh logits.
  const size_t common = std::min(static_cast<size_t>(cached_prefix(prompt)), prompt.size() - 1);
  history_.resize(common);
  result.prompt_tokens_reused = static_cast<int>(common);
  result.prompt_tokens = static_cast<int>(prompt.size() - common);
  // A member from the prompt to the last token: steps wait briefly for this sequence.
  const bool was_member = membership_ != nullptr;
  set_batch_member(true);
  struct Restore {
    LocalSession& s;
    bool member;
    ~Restore() { s.set_batch_member(member); }
  } restore{*this, was_member};
  auto t0 = Clock::now();
  if (Status st = feed(std::span(prompt).subspan(common), options.cancel); !st.is_ok()) {
    if (st.code() != StatusCode::kCancelled) return st;
    result.done_reason = "cancelled";
    return result;
  }
  result.prompt_seconds = seconds_since(t0);

  const tokenizer::Tokenizer& tok = engine_.tokenizer();
  tokenizer::StreamingDetokenizer detok(tok);
  StopMatcher stops(options.stop);
  Sampler sampler(options.sampling, engine_.n_vocab());
  std::unique_ptr<grammar::TokenMatcher> matcher;
  if (options.grammar) {
    matcher = std::make_unique<grammar::TokenMatcher>(options.grammar, engine_.vocab_index());
    allowed_.resize(static_cast<size_t>((engine_.n_vocab() + 63) / 64));
  }
  const int64_t limit = options.max_tokens < 0 ? n_ctx() - n_past() : options.max_tokens;
  result.done_reason = "length";
  bool listening = true;  // on_piece has not asked to stop
  const auto emit = [&](const std::string& text) {
    if (text.empty() || !listening) return listening;
    result.text += text;
    listening = on_piece ? on_piece(text) : true;
    return listening;
  };
  HYPURA_ASSIGN_OR_RETURN(std::unique_ptr<Drafter> drafter, drafter_for(options.speculation));
  SpeculationOptions so = options.speculation;
  so.max_draft = std::min(so.max_draft, engine_.max_exact_draft());
  if (!draft_length_ || so.lookup != draft_length_for_.lookup ||
      so.draft_model != draft_length_for_.draft_model || so.max_draft != draft_length_->max() ||
      so.max_side != draft_length_->max_side()) {
    draft_length_.emplace(so.max_draft, so.max_side);  // a new drafter: costs measured afresh
    draft_length_for_ = so;
  }
  SpeculativePasses::Target target;
  target.n_vocab = engine_.n_vocab();
  target.history = &history_;
  target.plain = logits_.data();
  target.rows = &spec_logits_;
  target.feed = [this](std::span<const int32_t> tokens, std::span<const int32_t> parent,
                       int64_t n_rows, float* rows) {
    return n_rows > 0 ? feed(tokens, nullptr, n_rows, rows, parent) : feed(tokens);
  };
  target.keep = [this](int64_t base, std::span<const int32_t> nodes) {
    return kv_->keep_branch(base, nodes);
  };
  SpeculativePasses passes(drafter.get(), *draft_length_, so, std::move(target), &result.spec);
  const auto ends = [&](int32_t t) { return tok.is_end_of_generation(t); };
  t0 = Clock::now();
  bool stopped = false;
  for (int64_t i = 0; i < limit; ++i) {
    if (options.cancel != nullptr && options.cancel->load()) {
      result.done_reason = "cancelled";
      break;
    }
    float* logits = passes.logits();
    if (matcher) {
      const auto tm = Clock::now();
      const bool any = mask_logits(*matcher, logits);
      result.grammar_seconds += seconds_since(tm);
      if (!any)
        return Status(StatusCode::kInternal,
                      "constrained sampling: no token of the vocabulary continues the document");
    }
    int kept = -1;
    const int32_t id = sampler.sample_draft(logits, passes.seen(), passes.guesses(), &kept);
    if (kept >= 0) result.spec.accepted++;
    if (ends(id)) {
      result.done_reason = "stop";
      break;
    }
    if (matcher && !matcher->accept(id)) {
      return Status(StatusCode::kInternal,
                    "constrained sampling: the sampled token is outside the mask");
    }
    result.generated_tokens++;
    const std::string text = stops.push(detok.push(id), &stopped);
    if (!emit(text)) {
      result.done_reason = "cancelled";
      break;
    }
    if (stopped || (matcher && matcher->finished())) {  // a whole document ends the reply
      result.done_reason = "stop";
      break;
    }
    if (kept >= 0) {  // the guess is in the cache already: its row's logits come next
      passes.kept(kept);
      continue;
    }
    HYPURA_RETURN_IF_ERROR(passes.settle());
    if (n_past() >= n_ctx()) break;  // context full: "length"
    // The next pass: the token, and as many guesses as pay (none without a drafter).
    const int64_t room = std::min(
        {limit - i - 1, n_ctx() - n_past() - 1, static_cast<int64_t>(engine_.max_exact_draft())});
    HYPURA_RETURN_IF_ERROR(passes.next_pass(id, room, ends));
  }
  HYPURA_RETURN_IF_ERROR(passes.finish());
  // Bytes still held by the detokenizer are the start of a character that will never be
  // completed (the answer was cut, or the model ended mid-character).
  if (options.drop_unfinished_char) {
    detok.reset();
    if (!stopped) emit(stops.flush());
  } else if (!stopped) {
    emit(stops.push(detok.flush(), &stopped) + stops.flush());
  }
  result.generate_seconds = seconds_since(t0);
  return result;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::load(const EngineOptions& options) {
  return LocalEngine::create(options);
}

}  // namespace hypura::runtime
