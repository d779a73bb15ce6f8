#include "runtime/step_batcher.h"

#include <algorithm>
#include <cassert>
#include <functional>

namespace hypura::runtime {

StepBatcher::StepBatcher(std::unique_ptr<model::Forward> forward, int64_t n_vocab)
    : forward_(std::move(forward)), n_vocab_(n_vocab) {
  const auto rows = static_cast<size_t>(forward_->max_batch());
  step_tokens_.reserve(rows);
  step_seqs_.reserve(static_cast<size_t>(kMaxSeqsPerStep));
  step_pending_.reserve(static_cast<size_t>(kMaxSeqsPerStep));
}

Status StepBatcher::submit(const Request& r) {
  if (r.tokens.empty()) return invalid_argument("no tokens to feed");
  if (r.n_logits < 1 || r.n_logits > static_cast<int64_t>(r.tokens.size()))
    return invalid_argument("logits of " + std::to_string(r.n_logits) + " of " +
                            std::to_string(r.tokens.size()) + " tokens");
  Pending p;
  p.r = &r;
  std::unique_lock lock(mu_);
  queue_.push_back(&p);
  cv_.notify_all();  // a gathering leader may be waiting for this member
  while (!p.finished) {
    if (!busy_ && exclusive_waiting_ == 0) {  // exclusive work goes first, between steps
      lead(lock);
    } else {
      cv_.wait(lock);
    }
  }
  return p.status;
}

Status StepBatcher::exclusive(const std::function<Status(std::unique_ptr<model::Forward>&)>& fn) {
  std::unique_lock lock(mu_);
  ++exclusive_waiting_;
  cv_.wait(lock, [&] { return !busy_; });
  --exclusive_waiting_;
  busy_ = true;
  lock.unlock();
  const Status st = fn(forward_);
  lock.lock();
  busy_ = false;
  cv_.notify_all();
  return st;
}

void StepBatcher::join() {
  std::lock_guard lock(mu_);
  ++members_;
}

void StepBatcher::leave() {
  std::lock_guard lock(mu_);
  --members_;
  cv_.notify_all();
}

StepCounts StepBatcher::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

// One step, run by the caller holding the lock: gather, compose, run unlocked, hand out.
void StepBatcher::lead(std::unique_lock<std::mutex>& lock) {
  busy_ = true;
  gather(lock);
  drop_cancelled();
  if (queue_.empty()) {  // everything waiting was cancelled
    busy_ = false;
    cv_.notify_all();
    return;
  }
  compose();
  lock.unlock();
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = forward_->run_batch(step_tokens_.data(), step_seqs_, step_logits_.data());
  const auto took = std::chrono::steady_clock::now() - t0;
  lock.lock();
  last_step_ = took;
  counts_.pass_s += std::chrono::duration<double>(took).count();
  hand_out(st);
  busy_ = false;
  cv_.notify_all();
}

// Waits (bounded) until every member has a request waiting, or the step is full anyway.
void StepBatcher::gather(std::unique_lock<std::mutex>& lock) {
  const auto wait =
      std::clamp<std::chrono::steady_clock::duration>(last_step_ / 10, kMinGather, kMaxGather);
  const auto deadline = std::chrono::steady_clock::now() + wait;
  const auto ready = [&] {
    int waiting_members = 0;
    int64_t rows = 0;
    for (const Pending* p : queue_) {
      waiting_members += p->r->member ? 1 : 0;
      rows += static_cast<int64_t>(p->r->tokens.size()) - p->done;
    }
    return waiting_members >= members_ || rows >= forward_->max_batch() ||
           static_cast<int64_t>(queue_.size()) >= kMaxSeqsPerStep;
  };
  cv_.wait_until(lock, deadline, ready);
}

void StepBatcher::drop_cancelled() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    Pending* p = *it;
    if (p->r->cancel != nullptr && p->r->cancel->load()) {
      p->finished = true;
      p->status = Status(StatusCode::kCancelled, "cancelled");
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
}

// The step's rows: one token of every waiting request (up to kMaxSeqsPerStep, in arrival
// order), then the room left given out in the same order, so decoding sequences are never
// held back by a long prompt and a lone prompt gets whole batches.
void StepBatcher::compose() {
  const int64_t max_rows = forward_->max_batch();
  const size_t n =
      std::min<size_t>(queue_.size(), static_cast<size_t>(std::min(kMaxSeqsPerStep, max_rows)));
  step_pending_.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  for (Pending* p : step_pending_) p->take = 1;
  int64_t room = max_rows - static_cast<int64_t>(n);
  for (size_t i = 0; i < n && room > 0; ++i) {
    Pending& p = *step_pending_[i];
    const int64_t more = std::min(room, static_cast<int64_t>(p.r->tokens.size()) - p.done - 1);
    p.take += more;
    room -= more;
  }
  // Then in the order of their caches' addresses: a step of the same sequences is the same
  // batch whichever arrived first, so the GPU replays its graph for it (the rows are
  // independent, so the order changes no result).
  std::sort(step_pending_.begin(), step_pending_.end(), [](const Pending* a, const Pending* b) {
    return std::less<const model::KvCache*>()(a->r->kv, b->r->kv);
  });
  step_seqs_.clear();
  step_tokens_.clear();
  int64_t logit_rows = 0;
  for (Pending* p : step_pending_) {
    // The request's wanted rows (its last n_logits tokens) that fall in this step; a step
    // without any still computes one row's logits (a pass's minimum), then dropped.
    const auto size = static_cast<int64_t>(p->r->tokens.size());
    const int64_t wanted_from = std::max(p->done, size - p->r->n_logits);
    p->out = std::max<int64_t>(0, p->done + p->take - wanted_from);
    p->row = logit_rows;
    const int64_t n_logits = std::max<int64_t>(1, p->out);
    step_seqs_.push_back({p->r->kv, p->r->pos + p->done, p->take, n_logits});
    step_seqs_.back().tree_parent = p->r->tree_parent;
    step_seqs_.back().tree_base = p->r->pos;
    logit_rows += n_logits;
    const auto first = p->r->tokens.begin() + p->done;
    step_tokens_.insert(step_tokens_.end(), first, first + p->take);
  }
  const size_t logits = static_cast<size_t>(logit_rows * n_vocab_);
  if (step_logits_.size() < logits) step_logits_.resize(logits);
}

// Advances the step's requests; those whose tokens are all processed get their logits
// and leave the queue.
void StepBatcher::hand_out(const Status& st) {
  ++counts_.steps;
  counts_.seqs += step_seqs_.size();
  for (Pending* pending : step_pending_) {
    Pending& p = *pending;
    counts_.rows += static_cast<uint64_t>(p.take);
    p.done += p.take;
    const auto size = static_cast<int64_t>(p.r->tokens.size());
    if (st.is_ok() && p.out > 0) {  // the wanted rows end at this step's last row
      const int64_t first_wanted = p.done - p.out - (size - p.r->n_logits);
      std::copy_n(step_logits_.data() + p.row * n_vocab_, p.out * n_vocab_,
                  p.r->logits + first_wanted * n_vocab_);
    }
    if (!st.is_ok() || p.done == size) {
      p.finished = true;
      p.status = st;
      queue_.erase(std::find(queue_.begin(), queue_.end(), &p));
    }
  }
}

}  // namespace hypura::runtime
