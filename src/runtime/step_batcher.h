// StepBatcher: continuous batching of the sessions of one engine (docs/BATCHING.md).
//
// Every session feeds its tokens through submit(). A request waits for the next step, a
// forward pass that takes one token of every decoding sequence, then fills the rows left
// (up to max_rows) with chunks of prompts in arrival order; a prompt longer than the room
// continues in the following steps. The step's sequences run in the order of their KV
// caches' addresses, so the same set of sequences is the same batch (a GPU graph replays). One step
// reads the weights once, whichever tier they come from (resident, streamed or expert-streamed: the
// experts of every token's routing), so N sequences decode for about the price of one where reading
// the weights dominates.
//
// There is no scheduler thread. A caller whose request waits while no step runs becomes
// the leader: it gathers the waiting requests, runs the step and hands out the logits,
// while the other callers sleep; every caller returns once all its tokens are processed
// and its last token's logits written.
//
// Members: a session that will be back with its next token in a moment (Session::generate,
// from its prompt to its last token; bench's decode loops) is a member. A leader waits a
// short gather time for every member to have submitted, so sequences that decode together
// stay in one step instead of alternating between two half-full ones. Other requests
// (an eval, a prefill in bench) join whatever step comes next.
//
// A sequence's rows depend only on its own tokens and cache (Forward::run_batch), so a
// request's logits are those of the same tokens fed alone, on the CPU bit for bit.
//
// Work that must run alone (all-logits eval, embeddings, rebuilding the Forward for a
// longer context) goes through exclusive(), between steps.
//
// Thread-safety: every method may be called from any thread. Ownership: the batcher owns
// the Forward that every step runs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/status.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "runtime/session.h"

namespace hypura::runtime {

class StepBatcher {
 public:
  // The most sequences one step holds (the logits staging grows to this many rows).
  static constexpr int64_t kMaxSeqsPerStep = 32;
  // How long a leader waits for missing members: a tenth of the last step, within these
  // bounds (a member is usually back within a sampling step, well under a millisecond).
  static constexpr auto kMinGather = std::chrono::microseconds(500);
  static constexpr auto kMaxGather = std::chrono::milliseconds(20);

  struct Request {
    model::KvCache* kv = nullptr;
    std::span<const int32_t> tokens;            // REQUIRES: not empty
    int64_t pos = 0;                            // position of tokens[0] in kv
    float* logits = nullptr;                    // (n_logits, n_vocab): the last tokens' logits
    int64_t n_logits = 1;                       // 1..tokens.size()
    bool member = false;                        // from a member (see above)
    const std::atomic<bool>* cancel = nullptr;  // checked between steps: kCancelled
    // A draft tree (model::SeqRows): tokens[i] continues tokens[tree_parent[i]], tokens[0]
    // (tree_parent -1) the cache before pos. Null: the tokens follow each other.
    const int32_t* tree_parent = nullptr;
  };

  StepBatcher(std::unique_ptr<model::Forward> forward, int64_t n_vocab);

  // Processes r.tokens in one or more shared steps; returns when done. On an error every
  // request of the failing step gets it; the rows processed before stay in r.kv (callers
  // treat them as not written: a later request overwrites them).
  Status submit(const Request& r);

  // Runs fn alone, between steps, with the Forward (which fn may replace).
  Status exclusive(const std::function<Status(std::unique_ptr<model::Forward>&)>& fn);

  void join();   // a member arrives
  void leave();  // a member leaves (wakes a leader waiting for it)

  StepCounts counts() const;  // steps run, rows and sequences over all of them

 private:
  struct Pending {
    const Request* r = nullptr;
    int64_t done = 0;  // tokens processed
    int64_t take = 0;  // tokens of the step being composed
    int64_t out = 0;   // of them, rows whose logits the request wants
    int64_t row = 0;   // its first row in step_logits_
    bool finished = false;
    Status status;
  };
  void lead(std::unique_lock<std::mutex>& lock);
  void gather(std::unique_lock<std::mutex>& lock);
  void drop_cancelled();
  void compose();
  void hand_out(const Status& st);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<model::Forward> forward_;  // guarded by busy_
  const int64_t n_vocab_;
  bool busy_ = false;          // a step or exclusive work is running
  int exclusive_waiting_ = 0;  // callers of exclusive() waiting: no new step starts
  int members_ = 0;
  std::deque<Pending*> queue_;  // waiting requests, in arrival order
  std::chrono::steady_clock::duration last_step_{};
  StepCounts counts_;
  // The step being run (the leader's, guarded by busy_).
  std::vector<Pending*> step_pending_;
  std::vector<model::SeqRows> step_seqs_;
  std::vector<int32_t> step_tokens_;
  std::vector<float> step_logits_;  // (the step's logit rows, n_vocab)
};

// A member for the lifetime of the object (StepBatcher::join / leave).
class BatchMembership {
 public:
  explicit BatchMembership(StepBatcher& b) : b_(b) { b_.join(); }
  ~BatchMembership() { b_.leave(); }
  BatchMembership(const BatchMembership&) = delete;
  BatchMembership& operator=(const BatchMembership&) = delete;

 private:
  StepBatcher& b_;
};

}  // namespace hypura::runtime
