// FakeEngine / FakeSession: a deterministic stand-in for the model, for the server's tests.
//
// Tokens are bytes (+1 for BOS); the "chat template" is "<|role|>content\n" per message.
// Generation picks words from a small vocabulary (some multi-byte UTF-8) by hashing the
// prompt, the step and (unless temperature is 0) the seed, so equal requests give equal
// answers and a greedy answer depends on the prompt only. Each answer ends with EOS after
// 8..39 words unless max_tokens, a stop string or cancellation ends it first. Like the
// real Session it keeps the KV "cache" of the longest common token prefix and reports it.
//
// Header-only so that tests/server's fake server and src/server's unit tests share it.
// Thread-safety: as the real contract (Engine shared read-only, Session one thread).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "runtime/session.h"

namespace hypura::server::testing {

// Holds generations at a token until the test opens it or the generation is cancelled, so
// a test knows a request is running (or cannot finish) without waiting on a timer.
class GenerationGate {
 public:
  void open() { open_ = true; }
  // Waits until the gate opens (true) or *cancel is set (false).
  bool pass(const std::atomic<bool>* cancel) {
    ++waiting;
    bool opened = true;
    while (!open_) {
      if (cancel != nullptr && cancel->load()) {
        opened = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    --waiting;
    return opened;
  }
  std::atomic<int> waiting{0};  // generations held now

 private:
  std::atomic<bool> open_{false};
};

// The host memory limit a test lowers: check_host_memory() fails while `lowered`, and a
// counted replan() clears it unless `fits` is false (nothing fits the limit).
struct FakeHostMemory {
  std::atomic<bool> lowered{false};
  std::atomic<bool> fits{true};
  std::atomic<int> replans{0};
};

struct FakeConfig {
  int64_t n_ctx = 256;
  int64_t max_ctx = 0;                          // trained length; 0: n_ctx
  std::chrono::microseconds token_delay{2000};  // per generated token
  std::chrono::microseconds prompt_delay{0};    // per processed prompt token
  bool eos = true;                              // false: only limits end an answer
  std::shared_ptr<GenerationGate> gate{};       // null: nothing holds generations
  int gate_at = 0;                              // generated tokens before the gate
  bool harmony = false;  // replies open with a harmony reasoning message (kHarmonyOpening)
  std::shared_ptr<FakeHostMemory> memory{};  // null: the limit always holds the plan
};

// What a harmony fake's reply starts with: reasoning, then the final channel's header.
inline constexpr std::string_view kHarmonyOpening =
    "<|channel|>analysis<|message|>The user wants words.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>";

inline const std::vector<std::string>& fake_words() {
  static const std::vector<std::string> words = {
      " hello", " world", " h\xc3\xa9llo", " \xe6\x97\xa5\xe6\x9c\xac", " fake",
      " token", ".",      " Hypura",       " \xf0\x9f\xa6\x99",         " STOP",
      " the",   " model"};
  return words;
}

inline uint64_t fake_hash(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

class FakeSession : public runtime::Session {
 public:
  explicit FakeSession(const FakeConfig& config) : config_(config), n_ctx_(config.n_ctx) {}

  Result<runtime::GenerateResult> generate(
      const std::vector<int32_t>& prompt, const runtime::GenerateOptions& options,
      const std::function<bool(std::string_view)>& on_piece) override {
    runtime::GenerateResult r;
    auto t0 = std::chrono::steady_clock::now();
    size_t reuse = 0;
    while (reuse < cache_.size() && reuse + 1 < prompt.size() && cache_[reuse] == prompt[reuse])
      ++reuse;
    r.prompt_tokens_reused = static_cast<int>(reuse);
    r.prompt_tokens = static_cast<int>(prompt.size() - reuse);
    std::this_thread::sleep_for(config_.prompt_delay * r.prompt_tokens);
    cache_ = prompt;
    auto t1 = std::chrono::steady_clock::now();
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : prompt) h = fake_hash(h, static_cast<uint64_t>(t));
    if (options.sampling.temperature > 0) h = fake_hash(h, options.sampling.seed + 1);
    const int n_words = 8 + static_cast<int>(h % 32);
    std::string pending;  // text held back while it could be the start of a stop string
    r.done_reason = "length";
    for (int i = 0;; ++i) {
      if (options.cancel && options.cancel->load()) {
        r.done_reason = "cancelled";
        break;
      }
      if (options.max_tokens >= 0 && i >= options.max_tokens) break;
      if (static_cast<int64_t>(cache_.size()) >= n_ctx_) break;
      if (config_.eos && i >= n_words) {
        r.done_reason = "stop";
        break;
      }
      if (config_.gate && i == config_.gate_at && !config_.gate->pass(options.cancel)) {
        r.done_reason = "cancelled";
        break;
      }
      std::this_thread::sleep_for(config_.token_delay);
      if (config_.harmony && i == 0) pending += kHarmonyOpening;
      const uint64_t w = fake_hash(h, static_cast<uint64_t>(i)) % fake_words().size();
      cache_.push_back(1000 + static_cast<int32_t>(w));
      ++r.generated_tokens;
      pending += fake_words()[w];
      size_t cut = std::string::npos;
      for (const std::string& s : options.stop) cut = std::min(cut, pending.find(s));
      if (cut != std::string::npos) {
        pending.resize(cut);
        emit(pending, on_piece, &r);
        pending.clear();
        r.done_reason = "stop";
        break;
      }
      size_t hold = held_back(pending, options.stop);
      std::string out = pending.substr(0, pending.size() - hold);
      pending.erase(0, out.size());
      if (!out.empty() && !emit(out, on_piece, &r)) {
        r.done_reason = "cancelled";
        break;
      }
    }
    if (r.done_reason != "cancelled" && !pending.empty()) emit(pending, on_piece, &r);
    auto t2 = std::chrono::steady_clock::now();
    r.prompt_seconds = std::chrono::duration<double>(t1 - t0).count();
    r.generate_seconds = std::chrono::duration<double>(t2 - t1).count();
    last_reused = r.prompt_tokens_reused;
    last_generated = r.generated_tokens;
    last_cancelled = r.done_reason == "cancelled";
    ++calls;
    return r;
  }

  Status eval(const std::vector<int32_t>&, std::vector<float>*) override {
    return unsupported("fake session has no logits");
  }
  Status prefill(const std::vector<int32_t>&, std::vector<float>*) override {
    return unsupported("fake session has no logits");
  }
  void reset() override { cache_.clear(); }
  void set_batch_member(bool) override {}
  void truncate(int64_t n) override {
    if (n < n_past()) cache_.resize(static_cast<size_t>(n));
  }
  int64_t n_past() const override { return static_cast<int64_t>(cache_.size()); }
  // A deterministic unit vector of kFakeEmbd components from the tokens' hash.
  Status embed(const std::vector<int32_t>& tokens, runtime::Pooling,
               std::vector<float>* out) override {
    if (static_cast<int64_t>(tokens.size()) > n_ctx_)
      return resource_exhausted("fake: input too long");
    cache_ = tokens;
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : tokens) h = fake_hash(h, static_cast<uint64_t>(t));
    out->resize(kFakeEmbd);
    double norm = 0;
    for (size_t i = 0; i < kFakeEmbd; ++i) {
      (*out)[i] = static_cast<float>(static_cast<int64_t>(fake_hash(h, i) % 2001) - 1000);
      norm += static_cast<double>((*out)[i]) * (*out)[i];
    }
    for (float& v : *out) v = static_cast<float>(v / std::sqrt(norm));
    ++embeds;
    return Status::ok();
  }
  static constexpr size_t kFakeEmbd = 8;
  std::atomic<int> embeds{0};
  int64_t n_ctx() const override { return n_ctx_; }
  Status reserve_context(int64_t n_ctx) override {
    if (n_ctx > std::max(config_.n_ctx, config_.max_ctx))
      return resource_exhausted("fake: too long");
    n_ctx_ = std::max(n_ctx_, n_ctx);
    return Status::ok();
  }

  std::atomic<int> calls{0};
  std::atomic<int> last_reused{0};
  std::atomic<int> last_generated{0};
  std::atomic<bool> last_cancelled{false};

 private:
  static bool emit(const std::string& text, const std::function<bool(std::string_view)>& on_piece,
                   runtime::GenerateResult* r) {
    r->text += text;
    return on_piece(text);
  }
  // Length of the longest suffix of `text` that is a proper prefix of a stop string.
  static size_t held_back(const std::string& text, const std::vector<std::string>& stop) {
    size_t best = 0;
    for (const std::string& s : stop) {
      for (size_t n = std::min(text.size(), s.size() - 1); n > best; --n) {
        if (text.compare(text.size() - n, n, s, 0, n) == 0) {
          best = n;
          break;
        }
      }
    }
    return best;
  }

  FakeConfig config_;
  int64_t n_ctx_;
  std::vector<int32_t> cache_;  // (n_past) tokens whose "KV" is cached
};

class FakeEngine : public runtime::Engine {
 public:
  explicit FakeEngine(FakeConfig config = {}) : config_(config) {}

  const gguf::GgufFile& file() const override { return file_; }
  const tokenizer::Tokenizer& tokenizer() const override { std::abort(); }
  std::unique_ptr<runtime::Session> new_session() override {
    auto s = std::make_unique<FakeSession>(config_);
    last_session = s.get();
    return s;
  }
  int64_t n_ctx() const override { return config_.n_ctx; }
  int64_t max_context() const override { return std::max(config_.n_ctx, config_.max_ctx); }
  int64_t n_vocab() const override { return 1100; }
  int64_t n_embd() const override { return FakeSession::kFakeEmbd; }
  std::string architecture() const override { return "fake"; }
  std::string mode() const override { return "full-resident"; }
  bool writes_harmony() const override { return config_.harmony; }
  Status check_host_memory() const override {
    if (!config_.memory || !config_.memory->lowered) return Status::ok();
    return resource_exhausted(
        "the cgroup v1 memory limit is now 100 MiB, below the 300 MiB the loaded model's plan "
        "holds");
  }
  Status replan() override {
    if (!config_.memory) return Status::ok();
    ++config_.memory->replans;
    if (!config_.memory->fits) {
      return resource_exhausted("no placement fits: the KV cache alone needs 180 MiB");
    }
    config_.memory->lowered = false;
    return Status::ok();
  }

  // "<|role|>content\n" per message, then "<|assistant|>"; a continued last message
  // has no "\n" and no generation prompt follows.
  Result<std::vector<int32_t>> tokenize_chat(const std::vector<runtime::ChatMessage>& messages,
                                             const runtime::ChatOptions& options) const override {
    std::string text;
    for (const auto& m : messages) text += "<|" + m.role + "|>" + m.content + "\n";
    if (options.continue_final) {
      text.pop_back();
    } else if (options.add_generation_prompt) {
      text += "<|assistant|>";
    }
    return tokenize(text, true);
  }
  std::optional<runtime::FimTokens> fim_tokens() const override {
    return runtime::FimTokens{kFimPrefix, kFimSuffix, kFimMiddle};
  }
  static constexpr int32_t kFimPrefix = 300, kFimSuffix = 301, kFimMiddle = 302;
  std::vector<int32_t> tokenize(const std::string& text, bool add_special) const override {
    std::vector<int32_t> tokens;
    if (add_special) tokens.push_back(1);
    for (unsigned char c : text) tokens.push_back(2 + c);
    return tokens;
  }

  FakeSession* last_session = nullptr;  // the server's one session

 private:
  FakeConfig config_;
  gguf::GgufFile file_;
};

}  // namespace hypura::server::testing
