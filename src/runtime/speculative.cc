#include "runtime/speculative.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include "runtime/sampler.h"

namespace hypura::runtime {

void DraftTree::clear() {
  tokens.clear();
  parent.clear();
  main = 0;
}

int32_t DraftTree::child(int32_t of, int32_t token, bool room) {
  for (size_t i = static_cast<size_t>(of + 1); i < tokens.size(); ++i) {
    if (parent[i] == of && tokens[i] == token) return static_cast<int32_t>(i);
  }
  if (!room) return -1;
  tokens.push_back(token);
  parent.push_back(of);
  return static_cast<int32_t>(tokens.size() - 1);
}

void DraftTree::set_main(std::span<const int32_t> chain) {
  for (const int32_t token : chain) {
    parent.push_back(static_cast<int32_t>(tokens.size()) - 1);
    tokens.push_back(token);
  }
  main = static_cast<int>(tokens.size());
}

Status LookupDrafter::propose(std::span<const int32_t> context, DraftShape shape, DraftTree* out) {
  out->clear();
  const auto n = static_cast<int64_t>(context.size());
  int branches = 0, side_left = shape.side;
  for (int ng = kMaxNgram; ng >= kMinNgram && shape.depth > 0; --ng) {
    if (n <= ng) continue;
    const auto tail = context.subspan(static_cast<size_t>(n - ng));
    // Latest first: the most recent text is the likeliest to be repeated.
    for (int64_t i = n - ng - 1; i >= 0; --i) {
      if (!std::equal(tail.begin(), tail.end(), context.begin() + i)) continue;
      const int64_t from = i + ng;
      const auto next = context.subspan(
          static_cast<size_t>(from), static_cast<size_t>(std::min<int64_t>(shape.depth, n - from)));
      if (branches++ == 0) {
        out->set_main(next);
      } else {
        int32_t node = -1;  // walk the continuation down the tree, adding where it differs
        for (const int32_t token : next) {
          const auto size = out->size();
          node = out->child(node, token, side_left > 0);
          if (node < 0) break;
          if (out->size() > size) --side_left;
        }
      }
      if (branches == kMaxBranches || side_left == 0) return Status::ok();
    }
  }
  return Status::ok();
}

// The kChoices likeliest tokens of logits with their probabilities, likeliest first.
template <size_t kN>
static void top_choices(const float* logits, int64_t n,
                        std::array<std::pair<int32_t, float>, kN>* top) {
  top->fill({-1, -INFINITY});
  for (int64_t i = 0; i < n; ++i) {
    if (logits[i] <= (*top)[kN - 1].second) continue;
    size_t j = kN - 1;
    while (j > 0 && logits[i] > (*top)[j - 1].second) {
      (*top)[j] = (*top)[j - 1];
      --j;
    }
    (*top)[j] = {static_cast<int32_t>(i), logits[i]};
  }
  const float max = (*top)[0].second;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - max));
  for (auto& [id, v] : *top) v = id >= 0 ? static_cast<float>(std::exp(double{v} - max) / sum) : 0;
}

Status ModelDrafter::propose(std::span<const int32_t> context, DraftShape shape, DraftTree* out) {
  out->clear();
  leaves_.clear();
  const auto n = static_cast<int64_t>(context.size());
  if (shape.depth <= 0 || n == 0) return Status::ok();
  const int64_t room = session_.n_ctx() - n;  // the draft's own guesses take cache rows too
  if (room < 1) return Status::ok();
  const int depth = static_cast<int>(std::min<int64_t>(shape.depth, room));
  feed_.assign(context.begin(), context.end());
  // The draft session keeps what it saw last time; at least one token is fed for logits.
  const int64_t common = std::min(session_.cached_prefix(feed_), n - 1);
  session_.truncate(common);
  feed_.erase(feed_.begin(), feed_.begin() + common);
  chain_.clear();
  std::array<std::pair<int32_t, float>, kChoices> top;
  for (int j = 0; j < depth; ++j) {
    HYPURA_RETURN_IF_ERROR(session_.prefill(feed_, &logits_));
    top_choices(logits_.data(), n_vocab_, &top);
    const bool confident = top[0].second >= kMinConfidence;
    for (size_t c = confident ? 1 : 0; c < top.size(); ++c) {
      if (top[c].first >= 0 && top[c].second >= kMinSide)
        leaves_.push_back({j - 1, top[c].first, top[c].second});
    }
    if (!confident) break;
    chain_.push_back(top[0].first);
    feed_.assign(1, top[0].first);
  }
  out->set_main(chain_);
  std::stable_sort(leaves_.begin(), leaves_.end(),
                   [](const Leaf& a, const Leaf& b) { return a.p > b.p; });
  for (size_t i = 0; i < leaves_.size() && static_cast<int>(i) < shape.side; ++i)
    out->child(leaves_[i].parent, leaves_[i].token, true);
  return Status::ok();
}

double DraftLength::expected_tokens(int k) const {
  const double a = acceptance();
  double expected = 1.0, a_pow = 1.0;
  for (int i = 1; i <= k; ++i) expected += a_pow *= a;
  return expected;
}

int DraftLength::next() {
  if (max_ <= 0 || plain_s_ <= 0) return 0;     // a one-token pass is measured first
  if (guesses_ <= 0) return std::min(max_, 4);  // then a wider one
  const double per_guess = row_s() + draft_s();
  int best_k = 0;
  double best_rate = kMinGain / plain_s_;
  for (int k = 1; k <= max_; ++k) {
    const double rate = expected_tokens(k) / (plain_s_ + k * per_guess);
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

int DraftLength::side(int depth) {
  if (max_side_ <= 0 || depth <= 0 || guesses_ <= 0) return 0;
  // A kept side guess is one token more for one more row.
  const double rate = expected_tokens(depth) / (plain_s_ + depth * (row_s() + draft_s()));
  if (side_acceptance() > rate * row_s()) {
    since_side_probe_ = 0;
    return max_side_;
  }
  if (++since_side_probe_ < kProbeEvery) return 0;
  since_side_probe_ = 0;
  return 1;
}

void DraftLength::record(const Pass& p) {
  constexpr double kKeep = 0.8, kDecay = 0.9;  // weights of the past in the running estimates
  const int drafted = p.main + p.side;
  draft_sum_s_ = kDecay * draft_sum_s_ + p.draft_s;
  guesses_ = kDecay * guesses_ + drafted;
  extra_s_ *= kDecay;
  if (drafted == 0) {
    plain_s_ = plain_s_ <= 0 ? p.pass_s : kKeep * plain_s_ + (1 - kKeep) * p.pass_s;
    return;
  }
  // Judged main guesses: every kept one, and the first refused one (the rest were never
  // judged). Side guesses: all of them (a pass that kept none had them all judged or moot).
  kept_ = kDecay * kept_ + p.kept_main;
  tried_ = kDecay * tried_ + p.kept_main + (p.kept_main < p.main ? 1 : 0);
  if (p.side > 0) {
    side_kept_ = kDecay * side_kept_ + p.kept_side;
    side_tried_ = kDecay * side_tried_ + p.side;
  }
  extra_s_ += std::max(0.0, p.pass_s - plain_s_);
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
                                     const SpeculationOptions& options, Target target,
                                     SpecStats* stats)
    : drafter_(drafter), length_(length), options_(options), t_(std::move(target)), stats_(stats) {}

float* SpeculativePasses::logits() {
  return n_rows_ > 0 ? t_.rows->data() + path_.back() * t_.n_vocab : t_.plain;
}

std::span<const int32_t> SpeculativePasses::seen() const {
  // The kept branch sits in the history's first rows after base_ (kept() writes it there);
  // the rest of the pass is not context yet.
  const std::span<const int32_t> all(*t_.history);
  return n_rows_ > 0 ? all.first(static_cast<size_t>(base_) + path_.size()) : all;
}

void SpeculativePasses::find_children() {
  child_tokens_.clear();
  child_nodes_.clear();
  if (n_rows_ == 0) return;
  const int32_t node = path_.back();
  for (int64_t i = node + 1; i < n_rows_; ++i) {
    if (fed_parent_[static_cast<size_t>(i)] != node) continue;
    child_tokens_.push_back(fed_[static_cast<size_t>(i)]);
    child_nodes_.push_back(static_cast<int32_t>(i));
  }
}

void SpeculativePasses::kept(int i) {
  const int32_t node = child_nodes_[static_cast<size_t>(i)];
  path_.push_back(node);
  // The branch's token at its position: the history reads as the tokens sampled.
  (*t_.history)[static_cast<size_t>(base_) + path_.size() - 1] = fed_[static_cast<size_t>(node)];
  if (node > tree_.main) stats_->side_accepted++;  // fed_ node j is tree node j - 1
  find_children();
}

Status SpeculativePasses::finish() {
  Status st;
  if (n_rows_ > 0) {
    if (path_.back() + 1 != static_cast<int32_t>(path_.size())) st = t_.keep(base_, path_);
    t_.history->resize(static_cast<size_t>(base_) + path_.size());
  }
  n_rows_ = 0;
  child_tokens_.clear();
  child_nodes_.clear();
  return st;
}

Status SpeculativePasses::settle() {
  int kept_main = 0;
  while (kept_main + 1 < static_cast<int>(path_.size()) && path_[kept_main + 1] == kept_main + 1 &&
         kept_main < tree_.main) {
    ++kept_main;
  }
  const int kept_side = std::max(0, static_cast<int>(path_.size()) - 1 - kept_main);
  HYPURA_RETURN_IF_ERROR(finish());  // the guesses after the row sampled are dropped
  if (!last_) return Status::ok();
  length_.record({last_->main, last_->side, kept_main, kept_side, last_->pass_s, last_->draft_s});
  last_.reset();
  return Status::ok();
}

// Nothing follows an end of generation: nodes after one would never be judged.
void SpeculativePasses::drop_after_ends(const std::function<bool(int32_t)>& stop) {
  index_.assign(tree_.size(), -1);
  pruned_.clear();
  for (size_t i = 0; i < tree_.size(); ++i) {
    const int32_t p = tree_.parent[i];
    if (p >= 0 &&
        (index_[static_cast<size_t>(p)] < 0 || stop(tree_.tokens[static_cast<size_t>(p)])))
      continue;
    index_[i] = static_cast<int32_t>(pruned_.size());
    pruned_.tokens.push_back(tree_.tokens[i]);
    pruned_.parent.push_back(p >= 0 ? index_[static_cast<size_t>(p)] : -1);
    if (static_cast<int>(i) < tree_.main) pruned_.main = static_cast<int>(pruned_.size());
  }
  std::swap(tree_, pruned_);
}

Status SpeculativePasses::next_pass(int32_t id, int64_t room,
                                    const std::function<bool(int32_t)>& stop) {
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  DraftShape shape;
  if (drafter_ != nullptr) {
    const int64_t depth = options_.fixed_length ? options_.max_draft : length_.next();
    shape.depth = static_cast<int>(std::min(depth, room));
    const int side = options_.fixed_length ? options_.max_side : length_.side(shape.depth);
    shape.side = static_cast<int>(std::min<int64_t>(side, room - shape.depth));
  }
  const auto td = Clock::now();
  tree_.clear();
  if (shape.depth > 0) {
    t_.history->push_back(id);  // the context the guesses continue
    const Status st = drafter_->propose(*t_.history, shape, &tree_);
    t_.history->pop_back();
    HYPURA_RETURN_IF_ERROR(st);
    drop_after_ends(stop);
  }
  const double draft_s = since(td);
  const auto tp = Clock::now();
  stats_->passes++;
  path_.assign(1, 0);
  if (tree_.size() == 0) {
    HYPURA_RETURN_IF_ERROR(t_.feed(std::span(&id, 1), {}, 0, nullptr));
  } else {
    fed_.assign(1, id);
    fed_.insert(fed_.end(), tree_.tokens.begin(), tree_.tokens.end());
    fed_parent_.assign(1, -1);
    for (const int32_t p : tree_.parent) fed_parent_.push_back(p + 1);
    n_rows_ = static_cast<int64_t>(fed_.size());
    t_.rows->resize(static_cast<size_t>(n_rows_ * t_.n_vocab));
    base_ = static_cast<int64_t>(t_.history->size());
    const std::span<const int32_t> parents =
        tree_.side() > 0 ? std::span<const int32_t>(fed_parent_) : std::span<const int32_t>();
    HYPURA_RETURN_IF_ERROR(t_.feed(fed_, parents, n_rows_, t_.rows->data()));
    stats_->drafted += static_cast<int64_t>(tree_.size());
    stats_->side_drafted += tree_.side();
    find_children();
  }
  if (drafter_ != nullptr) last_ = Pass{tree_.main, tree_.side(), since(tp), draft_s};
  return Status::ok();
}

}  // namespace hypura::runtime
