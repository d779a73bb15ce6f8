// Engine and Session: what `hypura run`, `bench` and `serve` drive.
//
// An Engine owns a loaded model (GGUF directory, tokenizer, weights through a
// WeightProvider chosen by the planner, compute context). A Session owns one KV cache and
// turns tokens into logits and sampled tokens. Sessions used from different threads at
// once share forward passes (continuous batching: one read of the weights per step for
// all of them). The server holds one Engine and a Session per parallel slot, each reused
// across requests, keeping the KV cache of the longest matching token prefix.
//
// Thread-safety: an Engine is shared read-only; a Session is used by one thread at a time,
// different Sessions by different threads at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace hypura::tokenizer {
class Tokenizer;
}
namespace hypura::gguf {
class GgufFile;
}

namespace hypura::compute {
class Context;
}
namespace hypura::grammar {
struct Grammar;
}

namespace hypura::runtime {

class TieredWeights;  // runtime/tiered_weights.h

struct EngineOptions {
  std::string model_path;
  int n_threads = 0;                // 0: physical cores
  int64_t n_ctx = 4096;             // capped by the model's trained length
  bool n_ctx_past_trained = false;  // bench: keep n_ctx beyond the trained length (speed only)
  bool kv_f32 = false;              // KV cache type: F16 (default) or F32
  // Sequences decoded at once (serve --parallel, bench --batch): the plan keeps a KV cache
  // of n_ctx for each. 0: as many as a quarter of the memory holds, up to 4
  // (scheduler::default_parallel).
  int n_parallel = 1;
  uint64_t ram_budget = 0;  // bytes, 0: from the hardware profile
  uint64_t gpu_budget = 0;  // --vram-budget, bytes; 0: the GPU's free memory less a reserve
  int gpu_layers = -1;  // --gpu-layers: at most this many (the last) layers on the GPU; -1: as fit
  // --cpu-moe-layers: a MoE model's routed experts of the first N layers in RAM (the expert
  // split, scheduler::Budgets::min_host_expert_layers); -1: as the GPU's memory decides.
  int cpu_moe_layers = -1;
  std::string device = "auto";  // auto, cpu or cuda (runtime/device_choice.h)
  std::string profile_path;     // plan with this profile JSON; empty: the cache or a measurement
  std::string trace_path;       // expert-streaming: write the routing trace here at unload
  // Expert streaming (docs/MOE.md): the next-layer predictor that drives speculative reads
  // ("none", "coact", "router" or "both"; empty: the measured default) and how many layers
  // ahead the router predictor guesses (1..4; 0: the default).
  std::string expert_predictor;
  int expert_lookahead = 0;
  // The budgeted prefetch rule (experts/prefetch_rule.h): bytes per token (UINT64_MAX: the
  // plan's, what the disk reads while a token computes; 0: off) and its precision
  // threshold (< 0: the default).
  uint64_t expert_prefetch_budget = UINT64_MAX;
  double expert_prefetch_precision = -1;
  bool expert_cancel = true;  // --no-expert-cancel: false
  // The CPU kernels' SIMD level ("scalar", "avx2", "avx512", "avx512vnni", "amx"; a level
  // the CPU lacks falls back to the best below it); empty: the best this CPU runs.
  std::string simd;
  bool cuda_graphs = true;  // false: every GPU decode step eager (kernel-by-kernel profiling)
  // --draft: a small model with the same vocabulary whose greedy guesses speculative decoding
  // verifies (SpeculationOptions::draft_model). Loaded resident on the same device, first:
  // the memory it takes comes out of the target's budgets.
  std::string draft_model;
  std::function<void(uint64_t done, uint64_t total)> load_progress;  // bytes loaded
};

struct SamplingParams {
  float temperature = 0.8f;     // 0: greedy
  int top_k = 40;               // 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float repeat_penalty = 1.1f;  // 1: off
  int repeat_last_n = 64;
  uint64_t seed = 0;  // same seed, same output
};

// Speculative decoding (runtime/speculative.h, docs/SPECULATIVE.md): guessed tokens verified
// several in one pass of the model; the output is what decoding without it gives (greedy:
// the same tokens; sampling: the same distribution).
struct SpeculationOptions {
  bool lookup = false;       // --lookup: guesses from the context's own n-grams
  bool draft_model = false;  // --draft: guesses from the engine's draft model
  int max_draft = 8;         // --spec-max: the most guesses a pass verifies
  int max_side = 4;          // --spec-side: the most of them off the main branch (CPU)
  // Every pass asks for max_draft guesses instead of what DraftLength's timings say pays
  // (tests: what is verified must not depend on how fast the machine is).
  bool fixed_length = false;
  bool on() const { return (lookup || draft_model) && max_draft > 0; }
};

struct GenerateOptions {
  SamplingParams sampling;
  int max_tokens = 256;                       // -1: until the context is full
  std::vector<std::string> stop;              // stop strings (not included in output)
  const std::atomic<bool>* cancel = nullptr;  // checked before every token
  // A character left unfinished when generation ends (a max_tokens cut, cancellation, EOS
  // mid-character): dropped (so a cut text is a prefix of the longer one; the server), or
  // written as U+FFFD (false: `hypura run`).
  bool drop_unfinished_char = false;
  // Constrained sampling (grammar/json_schema.h): each step masks the tokens that cannot
  // continue a document of this grammar, before the penalty's neighbours (top-k, top-p,
  // min-p, temperature) pick; end-of-generation only once the document is whole, and
  // generation stops ("stop") as soon as nothing can be added to it. Null: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  SpeculationOptions speculation;
};

// What speculation did in one generation: guesses fed to the model, guesses kept, and the
// forward passes generation ran (with or without guesses).
struct SpecStats {
  int64_t drafted = 0, accepted = 0, passes = 0;
  int64_t side_drafted = 0, side_accepted = 0;  // of them, off a draft tree's main branch
};

// Why generation ended: "stop" (EOS/EOT/stop string), "length" (max_tokens or context),
// "cancelled".
struct GenerateResult {
  std::string text;
  std::string done_reason;
  int prompt_tokens = 0;         // tokens processed for the prompt (after prefix reuse)
  int prompt_tokens_reused = 0;  // tokens whose KV came from the cache
  int generated_tokens = 0;
  double prompt_seconds = 0;
  double generate_seconds = 0;
  double grammar_seconds = 0;  // of generate_seconds: computing token masks
  SpecStats spec;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  // assistant: the tool calls it made, a JSON array of {"name", "arguments": object}
  // ("" for none); tool: the tool whose result `content` is.
  std::string tool_calls = {};
  std::string tool_name = {};
};

// How a conversation is rendered for generation.
struct ChatOptions {
  // Opens the assistant's turn after the last message (the usual case).
  bool add_generation_prompt = true;
  // The last message is an assistant's unfinished reply: render it without its
  // end-of-turn marker so that generation continues it (add_generation_prompt is then
  // ignored). REQUIRES: the last message's role is "assistant".
  bool continue_final = false;
  // Tool definitions offered to the model: a JSON array in OpenAI's shape
  // ([{"type": "function", "function": {"name", "description", "parameters"}}]), or "".
  // Rendered by the model's own template (Engine::supports_tools()).
  std::string tools;
  // "low", "medium" or "high" for templates that take a reasoning effort (gpt-oss's);
  // "" for the template's default.
  std::string reasoning_effort;
};

// How the hidden states of an input's tokens become one embedding (GGUF
// <arch>.pooling_type: 1 mean, 2 cls = the first token, 3 last).
enum class Pooling { kMean, kFirst, kLast };

// Fill-in-the-middle control tokens (prefix, suffix, middle), when the model has them.
struct FimTokens {
  int32_t prefix = -1;
  int32_t suffix = -1;
  int32_t middle = -1;
};

// Forward passes run for the engine's sessions (continuous batching): steps, and the
// rows (tokens) and sequences they held in all.
struct StepCounts {
  uint64_t steps = 0, rows = 0, seqs = 0;
  double pass_s = 0;  // wall time inside the steps' forward passes
};

class Engine;

class Session {
 public:
  virtual ~Session() = default;
  // Generates from `prompt` tokens; on_piece receives valid UTF-8 text as it is produced
  // and returns false to stop. Reuses the KV cache of the longest common token prefix.
  virtual Result<GenerateResult> generate(
      const std::vector<int32_t>& prompt, const GenerateOptions& options,
      const std::function<bool(std::string_view)>& on_piece) = 0;
  // Logits of every position of `tokens` appended to the current cache (tests, bench).
  // out: (tokens.size(), n_vocab) row-major.
  virtual Status eval(const std::vector<int32_t>& tokens, std::vector<float>* out_logits) = 0;
  // As eval(), but only the last position's logits are computed, as generate() does for
  // a prompt (the output head is skipped for every other row). out: (n_vocab).
  virtual Status prefill(const std::vector<int32_t>& tokens, std::vector<float>* out_logits) = 0;
  virtual void reset() = 0;  // clears the KV cache
  // Sessions of one engine share forward passes (runtime/step_batcher.h). A member's next
  // tokens are waited for, briefly, before a step runs without them: a caller feeding one
  // token at a time in a loop (bench's decode) is a member for the loop, so concurrent
  // loops share steps. generate() is a member from its prompt to its last token.
  virtual void set_batch_member(bool member) = 0;
  // Keeps the cache's first n tokens and forgets the rest (n >= n_past(): no-op); the
  // next tokens continue at position n (bench: one depth fill serves every run).
  virtual void truncate(int64_t n) = 0;
  virtual int64_t n_past() const = 0;
  // How many of `tokens`, from the first, this session's KV cache holds (what generate()
  // would reuse); the server sends a request to the session that reuses the most.
  virtual int64_t cached_prefix(const std::vector<int32_t>& tokens) const { return 0; }
  // The embedding of `tokens`: the final-norm hidden states pooled, then L2-normalised.
  // out: (Engine::n_embd()). Runs from position 0 in this session's KV cache, so a
  // cached prefix is replaced by these tokens. kResourceExhausted past n_ctx().
  virtual Status embed(const std::vector<int32_t>& tokens, Pooling pooling,
                       std::vector<float>* out) = 0;
  // Tokens this session's KV cache holds at most (starts at Engine::n_ctx()).
  virtual int64_t n_ctx() const = 0;
  // Grows the KV cache to hold n_ctx tokens, keeping what it holds; a smaller n_ctx is a
  // no-op. kResourceExhausted past Engine::max_context() or when the memory is not there.
  virtual Status reserve_context(int64_t n_ctx) = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  static Result<std::unique_ptr<Engine>> load(const EngineOptions& options);

  virtual const gguf::GgufFile& file() const = 0;
  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  virtual std::unique_ptr<Session> new_session() = 0;
  // Whether the host memory limit still holds what the loaded plan holds. A cgroup limit
  // lowered since the plan (a container resized) is an error naming it: a long-lived
  // server asks before it loads a session again, instead of growing into the OOM killer.
  virtual Status check_host_memory() const { return Status::ok(); }
  // Plans the weights again for the host memory of now and loads them (the old ones freed
  // first, so a lowered limit never holds both). REQUIRES: no session of this engine exists.
  // Where nothing fits, an error naming the limit, and the loaded weights stay.
  virtual Status replan() { return check_host_memory(); }
  // The context window a new session starts with (--context, capped by the trained length).
  virtual int64_t n_ctx() const = 0;
  // The largest window a session may grow to (Session::reserve_context): the trained length.
  virtual int64_t max_context() const { return n_ctx(); }
  virtual int64_t n_vocab() const = 0;
  virtual int64_t n_embd() const = 0;
  // The model's pooling for embeddings: its metadata's, else (a chat model, no pooling
  // type) the last token, whose state has seen the whole input.
  virtual Pooling pooling() const { return Pooling::kLast; }
  virtual std::string architecture() const = 0;
  virtual std::string mode() const = 0;  // "full-resident", "dense-ffn-streaming", ...
  // Where the forward pass runs: "cpu" or "cuda" (EngineOptions::device, device_choice.h).
  virtual std::string device() const { return "cpu"; }
  // The planner's placement, the memory ledger and the streaming counters (bench).
  virtual const TieredWeights* tiers() const { return nullptr; }
  // For bench's I/O-only reference passes; REQUIRES: no session is evaluating.
  virtual TieredWeights* mutable_tiers() { return nullptr; }
  // The sequences the plan keeps a KV cache for (EngineOptions::n_parallel, or the
  // default the plan chose from memory for 0).
  virtual int n_parallel() const { return 1; }
  // The steps run so far for all sessions (bench: sequences per step).
  virtual StepCounts step_counts() const { return {}; }
  // The compute context sessions share (bench: MAC counts, the int8 peak probe), or
  // null for engines without one. REQUIRES: no session is evaluating while it is used.
  virtual compute::Context* compute_context() { return nullptr; }

  // Renders a conversation with the model's chat template and tokenizes it.
  virtual Result<std::vector<int32_t>> tokenize_chat(const std::vector<ChatMessage>& messages,
                                                     const ChatOptions& options) const = 0;
  // add_special: BOS (and EOS) where the tokenizer adds them. Control tokens written in
  // the text are parsed (raw prompts are the client's own text).
  virtual std::vector<int32_t> tokenize(const std::string& text, bool add_special) const = 0;
  // The model's fill-in-the-middle tokens (GGUF tokenizer.ggml.fim_*_token_id, else the
  // vocabulary's <|fim_prefix|>/<fim_prefix>... names); nullopt when it has none.
  virtual std::optional<FimTokens> fim_tokens() const { return std::nullopt; }
  // Whether the model's chat template renders tools, tool calls and tool results.
  virtual bool supports_tools() const { return false; }
  // Whether the model writes its replies in harmony's channels (gpt-oss): reasoning,
  // answer and tool calls in one stream of markup that the server splits apart.
  virtual bool writes_harmony() const { return false; }
  // The draft model speculation may use (EngineOptions::draft_model), or null.
  virtual Engine* draft_model() const { return nullptr; }
};

}  // namespace hypura::runtime
