#include "experts/routing_trace.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "common/atomic_file.h"

namespace hypura::experts {
namespace {

constexpr const char* kMagic = "hypura-routing-trace";

// Each layer's per-token selections, in order: (n_layer) lists of (n_expert_used) ids.
std::vector<std::vector<const int32_t*>> per_layer_tokens(const RoutingTrace& trace) {
  std::vector<std::vector<const int32_t*>> out(static_cast<size_t>(trace.n_layer));
  for (const RoutingRecord& r : trace.records) {
    for (int32_t t = 0; t < r.n_tokens; ++t) {
      out[r.layer].push_back(r.selected.data() + static_cast<size_t>(t) * trace.n_expert_used);
    }
  }
  return out;
}

// Each layer ranks its experts by a private random order, so hot sets differ per layer:
// (n_layer, n_expert), rank -> expert. Consumes `rng` exactly as generate() relies on.
std::vector<std::vector<int32_t>> layer_ranks(int n_layer, int n_expert, std::mt19937_64& rng) {
  std::vector<std::vector<int32_t>> rank(static_cast<size_t>(n_layer));
  for (auto& r : rank) {
    r.resize(static_cast<size_t>(n_expert));
    for (int e = 0; e < n_expert; ++e) r[e] = e;
    std::shuffle(r.begin(), r.end(), rng);
  }
  return rank;
}

}  // namespace

void RoutingTrace::add(uint32_t pass, int layer, const int32_t* selected, int64_t n_selected) {
  RoutingRecord r;
  r.pass = pass;
  r.layer = layer;
  r.n_tokens = static_cast<int32_t>(n_selected / n_expert_used);
  r.selected.assign(selected, selected + n_selected);
  records.push_back(std::move(r));
}

Status RoutingTrace::write(const std::string& path) const {
  std::ostringstream out;
  out << kMagic << " 1 " << n_layer << ' ' << n_expert << ' ' << n_expert_used << '\n';
  for (const RoutingRecord& r : records) {
    out << r.pass << ' ' << r.layer << ' ' << r.n_tokens;
    for (int32_t id : r.selected) out << ' ' << id;
    out << '\n';
  }
  return write_file_atomically(path, out.str());
}

Result<RoutingTrace> RoutingTrace::read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("cannot open routing trace '" + path + "'");
  RoutingTrace t;
  std::string magic;
  int version = 0;
  in >> magic >> version >> t.n_layer >> t.n_expert >> t.n_expert_used;
  if (!in || magic != kMagic || version != 1 || t.n_layer <= 0 || t.n_expert <= 0 ||
      t.n_expert_used <= 0 || t.n_expert_used > t.n_expert) {
    return invalid_argument("'" + path + "' is not a version-1 routing trace");
  }
  std::string line;
  std::getline(in, line);
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    std::istringstream ls(line);
    RoutingRecord r;
    ls >> r.pass >> r.layer >> r.n_tokens;
    const auto bad = [&](const std::string& why) {
      return invalid_argument(path + ":" + std::to_string(line_no) + ": " + why);
    };
    if (!ls || r.layer < 0 || r.layer >= t.n_layer || r.n_tokens <= 0)
      return bad("bad record header");
    r.selected.resize(static_cast<size_t>(r.n_tokens) * t.n_expert_used);
    for (int32_t& id : r.selected) {
      if (!(ls >> id) || id < 0 || id >= t.n_expert) return bad("bad or missing expert id");
    }
    t.records.push_back(std::move(r));
  }
  return t;
}

TraceLocality measure_locality(const RoutingTrace& trace, int window) {
  TraceLocality m;
  m.window = window;
  const int k = trace.n_expert_used;
  uint64_t repeat = 0, recur = 0, n_repeat = 0, n_recur = 0;
  for (const auto& tokens : per_layer_tokens(trace)) {
    m.tokens = std::max<uint64_t>(m.tokens, tokens.size());
    for (size_t t = 1; t < tokens.size(); ++t) {
      for (int s = 0; s < k; ++s) {
        const int32_t e = tokens[t][s];
        repeat += std::find(tokens[t - 1], tokens[t - 1] + k, e) != tokens[t - 1] + k;
        ++n_repeat;
        if (t < static_cast<size_t>(window)) continue;
        bool seen = false;
        for (int j = 1; j <= window && !seen; ++j) {
          seen = std::find(tokens[t - j], tokens[t - j] + k, e) != tokens[t - j] + k;
        }
        recur += seen;
        ++n_recur;
      }
    }
  }
  m.repeat_next = n_repeat ? static_cast<double>(repeat) / n_repeat : 0;
  m.recur_within = n_recur ? static_cast<double>(recur) / n_recur : 0;
  return m;
}

RoutingTrace TraceGenerator::generate(int n_tokens) const {
  RoutingTrace trace{n_layer, n_expert, n_expert_used, {}};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int n_hot =
      std::clamp(static_cast<int>(std::lround(hot_fraction * n_expert)), n_expert_used, n_expert);
  std::vector<double> zipf(static_cast<size_t>(n_hot));
  for (int i = 0; i < n_hot; ++i) zipf[i] = 1.0 / std::pow(i + 1.0, zipf_s);
  std::discrete_distribution<int> popular(zipf.begin(), zipf.end());
  const std::vector<std::vector<int32_t>> rank = layer_ranks(n_layer, n_expert, rng);
  // history[layer]: the last 8 tokens' selections, newest last.
  std::vector<std::vector<std::vector<int32_t>>> history(static_cast<size_t>(n_layer));
  std::vector<int32_t> sel, recent;
  for (int t = 0; t < n_tokens; ++t) {
    for (int l = 0; l < n_layer; ++l) {
      auto& h = history[l];
      recent.clear();
      for (size_t j = 0; j + 1 < h.size(); ++j)
        recent.insert(recent.end(), h[j].begin(), h[j].end());
      sel.clear();
      while (static_cast<int>(sel.size()) < n_expert_used) {
        const double r = unit(rng);
        int32_t e;
        if (r < p_previous && !h.empty()) {
          e = h.back()[rng() % h.back().size()];
        } else if (r < p_previous + p_recent && !recent.empty()) {
          e = recent[rng() % recent.size()];
        } else if (r < p_previous + p_recent + p_cold) {
          e = static_cast<int32_t>(rng() % n_expert);
        } else {
          e = rank[l][popular(rng)];
        }
        if (std::find(sel.begin(), sel.end(), e) == sel.end()) sel.push_back(e);
      }
      trace.add(static_cast<uint32_t>(t), l, sel.data(), static_cast<int64_t>(sel.size()));
      h.push_back(sel);
      if (h.size() > 8) h.erase(h.begin());
    }
  }
  return trace;
}

std::vector<std::vector<double>> TraceGenerator::popularity() const {
  std::mt19937_64 rng(seed);
  const std::vector<std::vector<int32_t>> rank = layer_ranks(n_layer, n_expert, rng);
  const int n_hot =
      std::clamp(static_cast<int>(std::lround(hot_fraction * n_expert)), n_expert_used, n_expert);
  double total = 0;
  for (int i = 0; i < n_hot; ++i) total += 1.0 / std::pow(i + 1.0, zipf_s);
  const double share = std::max(0.0, 1.0 - p_previous - p_recent - p_cold);
  std::vector<std::vector<double>> out(static_cast<size_t>(n_layer),
                                       std::vector<double>(n_expert, 0.0));
  for (int l = 0; l < n_layer; ++l) {
    for (int i = 0; i < n_hot; ++i) out[l][rank[l][i]] = share / std::pow(i + 1.0, zipf_s) / total;
  }
  return out;
}

double TraceGenerator::slot_probability(uint64_t history, double popularity) const {
  // generate(): a previous-token draw picks one of that token's n_expert_used experts; a
  // recent draw one of the 7 tokens before it, 7 * n_expert_used selections in all.
  const double previous = (history & 1) ? p_previous / n_expert_used : 0.0;
  const double recent = p_recent * std::popcount(history & 0xFEull) / (7.0 * n_expert_used);
  return previous + recent + p_cold / n_expert + popularity;
}

RoutingTrace uniform_trace(int n_layer, int n_expert, int n_expert_used, int n_tokens,
                           uint64_t seed) {
  RoutingTrace trace{n_layer, n_expert, n_expert_used, {}};
  std::mt19937_64 rng(seed);
  std::vector<int32_t> sel;
  for (int t = 0; t < n_tokens; ++t) {
    for (int l = 0; l < n_layer; ++l) {
      sel.clear();
      while (static_cast<int>(sel.size()) < n_expert_used) {
        const int32_t e = static_cast<int32_t>(rng() % n_expert);
        if (std::find(sel.begin(), sel.end(), e) == sel.end()) sel.push_back(e);
      }
      trace.add(static_cast<uint32_t>(t), l, sel.data(), n_expert_used);
    }
  }
  return trace;
}

}  // namespace hypura::experts
