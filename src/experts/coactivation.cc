#include "experts/coactivation.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "common/cache_dir.h"
#include "common/log.h"

namespace hypura::experts {
namespace {
constexpr size_t kSavedSuccessors = 32;
}

CoactivationStats::CoactivationStats(int n_layer, int n_expert)
    : n_layer_(n_layer),
      n_expert_(n_expert),
      freq_(static_cast<size_t>(n_layer) * n_expert, 0),
      next_(static_cast<size_t>(n_layer) * n_expert) {}

void CoactivationStats::add_pair(int layer, int32_t a, int32_t b, uint32_t n) {
  auto& list = next_[index(layer, a)];
  for (auto& [to, count] : list) {
    if (to == b) {
      count += n;
      return;
    }
  }
  list.emplace_back(b, n);
}

void CoactivationStats::observe(int layer, std::span<const int32_t> selected, int k) {
  const size_t n_tokens = selected.size() / k;
  if (layer == 0) tokens_ += n_tokens;
  for (int32_t e : selected) freq_[index(layer, e)]++;
  if (last_layer_ == layer - 1 && last_selected_.size() == selected.size()) {
    for (size_t t = 0; t < n_tokens; ++t) {
      for (int i = 0; i < k; ++i) {
        for (int j = 0; j < k; ++j)
          add_pair(layer - 1, last_selected_[t * k + i], selected[t * k + j], 1);
      }
    }
  }
  last_layer_ = layer;
  last_selected_.assign(selected.begin(), selected.end());
}

void CoactivationStats::predict(int layer, std::span<const int32_t> experts, int max_n,
                                double min_score, std::vector<int32_t>* out) const {
  out->clear();
  if (layer + 1 >= n_layer_ || experts.empty()) return;
  std::vector<std::pair<double, int32_t>> scores;  // (score, b)
  for (int32_t a : experts) {
    const uint64_t f = freq_[index(layer, a)];
    if (f < kMinSupport) return;  // an unseen source: no confident prediction for this batch
    for (const auto& [b, n] : next_[index(layer, a)]) {
      auto it = std::find_if(scores.begin(), scores.end(),
                             [b = b](const auto& s) { return s.second == b; });
      const double p = static_cast<double>(n) / f / experts.size();
      if (it == scores.end()) {
        scores.emplace_back(p, b);
      } else {
        it->first += p;
      }
    }
  }
  std::sort(scores.begin(), scores.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  for (const auto& [s, b] : scores) {
    if (static_cast<int>(out->size()) >= max_n || s < min_score) break;
    out->push_back(b);
  }
}

Status CoactivationStats::save(const std::string& path) const {
  nlohmann::json j;
  j["version"] = 1;
  j["n_layer"] = n_layer_;
  j["n_expert"] = n_expert_;
  j["tokens"] = tokens_;
  nlohmann::json freq = nlohmann::json::array();
  for (int l = 0; l < n_layer_; ++l) {
    freq.push_back(std::vector<uint64_t>(freq_.begin() + index(l, 0),
                                         freq_.begin() + index(l, 0) + n_expert_));
  }
  j["freq"] = std::move(freq);
  nlohmann::json pairs = nlohmann::json::array();
  for (int l = 0; l < n_layer_; ++l) {
    for (int a = 0; a < n_expert_; ++a) {
      auto list = next_[index(l, a)];
      std::sort(list.begin(), list.end(),
                [](const auto& x, const auto& y) { return x.second > y.second; });
      if (list.size() > kSavedSuccessors) list.resize(kSavedSuccessors);
      for (const auto& [b, n] : list) pairs.push_back({l, a, b, n});
    }
  }
  j["pairs"] = std::move(pairs);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  return write_file_atomically(path, j.dump());
}

Result<CoactivationStats> CoactivationStats::load(const std::string& path, int n_layer,
                                                  int n_expert) {
  std::ifstream in(path);
  if (!in) return not_found("no expert statistics at '" + path + "'");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  const auto bad = [&](const std::string& why) {
    return corrupt("expert statistics '" + path + "': " + why);
  };
  if (j.is_discarded() || !j.is_object() || j.value("version", 0) != 1)
    return bad("not version-1 JSON");
  if (j.value("n_layer", -1) != n_layer || j.value("n_expert", -1) != n_expert) {
    return bad("made for another expert geometry");
  }
  CoactivationStats s(n_layer, n_expert);
  try {
    s.tokens_ = j.at("tokens").get<uint64_t>();
    const auto& freq = j.at("freq");
    if (!freq.is_array() || freq.size() != static_cast<size_t>(n_layer))
      return bad("freq has the wrong shape");
    for (int l = 0; l < n_layer; ++l) {
      const auto row = freq[l].get<std::vector<uint64_t>>();
      if (row.size() != static_cast<size_t>(n_expert)) return bad("freq has the wrong shape");
      std::copy(row.begin(), row.end(), s.freq_.begin() + s.index(l, 0));
    }
    for (const auto& p : j.at("pairs")) {
      const auto v = p.get<std::vector<int64_t>>();
      if (v.size() != 4 || v[0] < 0 || v[0] >= n_layer || v[1] < 0 || v[1] >= n_expert ||
          v[2] < 0 || v[2] >= n_expert || v[3] < 0) {
        return bad("bad pair entry");
      }
      s.add_pair(static_cast<int>(v[0]), static_cast<int32_t>(v[1]), static_cast<int32_t>(v[2]),
                 static_cast<uint32_t>(v[3]));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return s;
}

std::vector<double> CoactivationStats::recorded_frequency(const std::string& model_path,
                                                          uint64_t model_bytes, int n_layer,
                                                          int n_expert) {
  if (n_layer <= 0 || n_expert <= 0) return {};
  const std::string path = default_path(model_path, model_bytes);
  if (!std::filesystem::exists(path)) return {};
  auto stats = load(path, n_layer, n_expert);
  return stats.is_ok() ? stats->frequencies() : std::vector<double>{};
}

std::vector<double> CoactivationStats::frequencies() const {
  if (tokens_ == 0) return {};
  return std::vector<double>(freq_.begin(), freq_.end());
}

std::string CoactivationStats::default_path(const std::string& model_path, uint64_t model_bytes) {
  Result<std::string> dir = cache_dir();
  if (!dir.is_ok()) {
    log().warn("expert statistics not kept: {}", dir.status().message());
    return "";
  }
  const std::string name = std::filesystem::path(model_path).filename().string();
  return (std::filesystem::path(*dir) / "experts" /
          (name + "-" + std::to_string(model_bytes) + ".json"))
      .string();
}

}  // namespace hypura::experts
