#include "compute/op_profile.h"

#include <algorithm>

namespace hypura::compute {

std::string OpKey::label() const {
  std::string s(op);
  if (n_cols == 0 && n_rows == 0) return s;
  s += std::string(" ") + gguf::type_name(type) + " " + std::to_string(n_cols);
  if (n_rows > 0) s += "x" + std::to_string(n_rows);
  return s;
}

OpProfile::Scope::Scope(OpProfile* profile, const OpKey& key, double macs)
    : profile_(profile), key_(key), macs_(macs) {
  if (profile_ == nullptr) return;
  parent_ = profile_->open_;
  profile_->open_ = this;
  start_ = std::chrono::steady_clock::now();
}

OpProfile::Scope::~Scope() {
  if (profile_ == nullptr) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  OpStats& s = profile_->stats_[key_];
  s.calls += 1;
  s.seconds += elapsed - nested_;
  s.macs += macs_;
  if (parent_ != nullptr) parent_->nested_ += elapsed;
  profile_->open_ = parent_;
}

std::vector<OpProfile::Entry> OpProfile::entries() const {
  std::vector<Entry> out;
  out.reserve(stats_.size());
  for (const auto& [key, stats] : stats_) out.push_back({key, stats});
  std::sort(out.begin(), out.end(),
            [](const Entry& a, const Entry& b) { return a.stats.seconds > b.stats.seconds; });
  return out;
}

double OpProfile::seconds() const {
  double total = 0;
  for (const auto& [key, stats] : stats_) total += stats.seconds;
  return total;
}

}  // namespace hypura::compute
