// Job: one generation request on its way from an HTTP thread to the generation worker.
//
// The HTTP thread builds the Job (prompt tokens, options), queues it and then consumes
// its output with wait(); the worker thread produces with push_piece() and finish().
// The Job doubles as the channel between the two, so a piece of text crosses threads
// exactly once.
//
// Thread-safety: every method may be called from any thread. cancel is the flag that
// GenerateOptions::cancel points to; it is set by the HTTP side (client gone) or by the
// server at shutdown, and read by the Session before every token.
// Ownership: shared (std::shared_ptr) by the queue, the worker and the HTTP thread, so a
// client that disconnects never leaves the worker writing into freed memory.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "runtime/session.h"

namespace hypura::server {

using Clock = std::chrono::steady_clock;

class Job {
 public:
  Job(std::string client, std::vector<int32_t> prompt, runtime::GenerateOptions options);
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& client() const { return client_; }  // fairness key (remote address)
  // Empty: no generation (an unload request, see unload()).
  const std::vector<int32_t>& prompt() const { return prompt_; }

  // Set before the job is submitted, read by the worker.
  // The context window the session must hold (it grows to it: Session::reserve_context).
  void set_context(int64_t n_ctx) { n_ctx_ = n_ctx; }
  int64_t context() const { return n_ctx_; }
  // An embedding job: the worker embeds each input (Session::embed) instead of generating.
  void set_embed(std::vector<std::vector<int32_t>> inputs, runtime::Pooling pooling) {
    embed_inputs_ = std::move(inputs);
    pooling_ = pooling;
    is_embed_ = true;
  }
  bool is_embed() const { return is_embed_; }
  const std::vector<std::vector<int32_t>>& embed_inputs() const { return embed_inputs_; }
  runtime::Pooling pooling() const { return pooling_; }
  // Worker side, before finish(); HTTP side once done: one vector per input.
  void set_embeddings(std::vector<std::vector<float>> embeddings);
  std::vector<std::vector<float>> take_embeddings();
  // keep_alive 0: the worker unloads the model (drops its session) after this job.
  void set_unload(bool unload) { unload_ = unload; }
  bool unload() const { return unload_; }
  // Options with `cancel` pointing at this job's flag.
  const runtime::GenerateOptions& options() const { return options_; }
  Clock::time_point received() const { return received_; }

  // Asks the generation to stop at its next token (or not to start). `reason` is what the
  // client is told if it is still there ("client disconnected", "server is shutting down").
  void cancel(std::string reason);
  bool cancelled() const { return cancel_.load(std::memory_order_relaxed); }

  // Worker side.
  void mark_started();                      // the worker picked the job
  void push_piece(std::string_view piece);  // valid UTF-8 text
  void finish(Result<runtime::GenerateResult> result);

  // HTTP side: what arrived since the last call. Blocks up to `timeout` for news.
  struct Update {
    std::vector<std::string> pieces;
    bool done = false;
  };
  Update wait(std::chrono::milliseconds timeout);

  // After done: the outcome. REQUIRES: wait() returned done.
  const Result<runtime::GenerateResult>& result() const { return result_; }
  std::string cancel_reason() const;
  Clock::time_point started() const;  // received() if never started
  Clock::time_point finished() const;

 private:
  const std::string client_;
  const std::vector<int32_t> prompt_;  // (n_prompt) token ids
  runtime::GenerateOptions options_;
  const Clock::time_point received_;
  int64_t n_ctx_ = 0;
  bool unload_ = false;
  bool is_embed_ = false;
  std::vector<std::vector<int32_t>> embed_inputs_;
  runtime::Pooling pooling_ = runtime::Pooling::kLast;
  std::atomic<bool> cancel_{false};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> pending_;  // pieces not yet taken by wait()
  std::vector<std::vector<float>> embeddings_;
  bool done_ = false;
  std::string cancel_reason_;
  Clock::time_point started_;
  Clock::time_point finished_;
  Result<runtime::GenerateResult> result_{runtime::GenerateResult{}};
};

}  // namespace hypura::server
