#include "runtime/speculative.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/sampler.h"

namespace hypura::runtime {

Status LookupDrafter::propose(std::span<const int32_t> context, int max,
                              std::vector<int32_t>* out) {
  out->clear();
  const auto n = static_cast<int64_t>(context.size());
  for (int ng = kMaxNgram; ng >= kMinNgram && max > 0; --ng) {
    if (n <= ng) continue;
    const auto tail = context.subspan(static_cast<size_t>(n - ng));
    // The latest earlier occurrence: the most recent text is the likeliest to be repeated.
    for (int64_t i = n - ng - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + i)) continue;
      const int64_t from = i + ng;
      const int64_t take = std::min<int64_t>(max, n - from);
      out->assign(context.begin() + from, context.begin() + from + take);
      return Status::ok();
    }
  }
  return Status::ok();
}

// The probability softmax gives the largest of logits.
static float top_probability(const float* logits, int64_t n, int32_t top) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - logits[top]));
  return static_cast<float>(1.0 / sum);
}

Status ModelDrafter::propose(std::span<const int32_t> context, int max, std::vector<int32_t>* out) {
  out->clear();
  const auto n = static_cast<int64_t>(context.size());
  if (max <= 0 || n == 0) return Status::ok();
  const int64_t room = session_.n_ctx() - n;  // the draft's own guesses take cache rows too
  if (room < 1) return Status::ok();
  max = static_cast<int>(std::min<int64_t>(max, room));
  feed_.assign(context.begin(), context.end());
  // The draft session keeps what it saw last time; at least one token is fed for logits.
  const int64_t common = std::min(session_.cached_prefix(feed_), n - 1);
  session_.truncate(common);
  feed_.erase(feed_.begin(), feed_.begin() + common);
  for (int j = 0; j < max; ++j) {
    HYPURA_RETURN_IF_ERROR(session_.prefill(feed_, &logits_));
    const int32_t top = Sampler::argmax(logits_.data(), n_vocab_);
    if (top_probability(logits_.data(), n_vocab_, top) < kMinConfidence) break;
    out->push_back(top);
    feed_.assign(1, top);
  }
  return Status::ok();
}

int DraftLength::next() {
  if (max_ <= 0 || plain_s_ <= 0) return 0;     // a one-token pass is measured first
  if (guesses_ <= 0) return std::min(max_, 4);  // then a wider one
  const double a = acceptance(), per_guess = row_s() + draft_s();
  int best_k = 0;
  double best_rate = kMinGain / plain_s_, expected = 1.0, a_pow = 1.0;
  for (int k = 1; k <= max_; ++k) {
    a_pow *= a;
    expected += a_pow;  // tokens a pass of k guesses yields: 1 + a + ... + a^k
    const double rate = expected / (plain_s_ + k * per_guess);
    if (rate > best_rate) {
      best_rate = rate;
      best_k = k;
    }
  }
  if (best_k > 0) {
    since_probe_ = 0;
    return best_k;
  }
  // One guess adds per_guess to a pass: probes that far apart cost kProbeShare of the time.
  const double spacing = std::max<double>(kProbeEvery, per_guess / (kProbeShare * plain_s_));
  if (++since_probe_ < spacing) return 0;
  since_probe_ = 0;
  return 1;
}

void DraftLength::record(int drafted, int accepted, double pass_s, double draft_s) {
  constexpr double kKeep = 0.8, kDecay = 0.9;  // weights of the past in the running estimates
  draft_sum_s_ = kDecay * draft_sum_s_ + draft_s;
  guesses_ = kDecay * guesses_ + drafted;
  extra_s_ *= kDecay;
  if (drafted == 0) {
    plain_s_ = plain_s_ <= 0 ? pass_s : kKeep * plain_s_ + (1 - kKeep) * pass_s;
    return;
  }
  // Judged guesses: every kept one, and the first refused one (the rest were never judged).
  kept_ = kDecay * kept_ + accepted;
  tried_ = kDecay * tried_ + accepted + (accepted < drafted ? 1 : 0);
  extra_s_ += std::max(0.0, pass_s - plain_s_);
}

Result<std::unique_ptr<Drafter>> make_drafter(const SpeculationOptions& options,
                                              Session* draft_session, int64_t n_vocab) {
  if (options.max_draft <= 0) return std::unique_ptr<Drafter>();
  if (options.draft_model) {
    if (draft_session == nullptr)
      return invalid_argument("speculation with a draft model, but none is loaded (--draft)");
    return std::unique_ptr<Drafter>(std::make_unique<ModelDrafter>(*draft_session, n_vocab));
  }
  if (options.lookup) return std::unique_ptr<Drafter>(std::make_unique<LookupDrafter>());
  return std::unique_ptr<Drafter>();
}

SpeculativePasses::SpeculativePasses(Drafter* drafter, DraftLength& length,
                                     const SpeculationOptions& options, int64_t n_vocab,
                                     std::vector<int32_t>& history, float* plain,
                                     std::vector<float>& rows, Feed feed)
    : drafter_(drafter),
      length_(length),
      options_(options),
      n_vocab_(n_vocab),
      history_(history),
      plain_(plain),
      rows_(rows),
      feed_(std::move(feed)) {}

float* SpeculativePasses::logits() {
  return n_rows_ > 0 ? rows_.data() + row_ * n_vocab_ : plain_;
}

std::span<const int32_t> SpeculativePasses::seen() const {
  // A pass's later guesses are not context yet.
  const std::span<const int32_t> all(history_);
  return n_rows_ > 0 ? all.first(static_cast<size_t>(base_ + row_ + 1)) : all;
}

void SpeculativePasses::finish() {
  if (n_rows_ > 0) history_.resize(static_cast<size_t>(base_ + row_ + 1));
  n_rows_ = 0;
}

void SpeculativePasses::settle(const SpecStats& stats) {
  finish();  // the guesses after the row sampled are dropped
  if (!last_) return;
  const auto kept = static_cast<int>(stats.accepted - last_->kept_before);
  length_.record(last_->guessed, kept, last_->pass_s, last_->draft_s);
  last_.reset();
}

Status SpeculativePasses::next_pass(int32_t id, int64_t room,
                                    const std::function<bool(int32_t)>& stop, SpecStats* stats) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const int64_t length = options_.fixed_length ? options_.max_draft : length_.next();
  const int want = drafter_ != nullptr ? static_cast<int>(std::min(length, room)) : 0;
  const auto td = Clock::now();
  guesses_.clear();
  if (want > 0) {
    history_.push_back(id);  // the context the guesses continue
    const Status st = drafter_->propose(history_, want, &guesses_);
    history_.pop_back();
    HYPURA_RETURN_IF_ERROR(st);
    // Nothing follows an end of generation: guesses past one would never be judged.
    const auto end = std::find_if(guesses_.begin(), guesses_.end(), stop);
    if (end != guesses_.end()) guesses_.erase(end + 1, guesses_.end());
  }
  const double draft_s = since(td);
  const auto tp = Clock::now();
  stats->passes++;
  if (guesses_.empty()) {
    HYPURA_RETURN_IF_ERROR(feed_(std::span(&id, 1), 0, nullptr));
  } else {
    fed_.assign(1, id);
    fed_.insert(fed_.end(), guesses_.begin(), guesses_.end());
    n_rows_ = static_cast<int64_t>(fed_.size());
    rows_.resize(static_cast<size_t>(n_rows_ * n_vocab_));
    base_ = static_cast<int64_t>(history_.size());
    row_ = 0;
    HYPURA_RETURN_IF_ERROR(feed_(fed_, n_rows_, rows_.data()));
    stats->drafted += static_cast<int64_t>(guesses_.size());
  }
  if (drafter_ != nullptr)
    last_ = Pass{static_cast<int>(guesses_.size()), stats->accepted, since(tp), draft_s};
  return Status::ok();
}

}  // namespace hypura::runtime
