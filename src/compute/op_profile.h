// Where a forward pass's CPU time goes (`hypura bench --profile-ops`): each operation's
// exclusive wall time (its own, not that of the operations it called), keyed by its name
// and, for products, the weight format and shape. Work on the pool counts towards the op
// whose thread waits for it.
//
// Thread-safety: Scopes open and close on the one thread that drives the forward pass (the
// pool's workers never touch a profile); read entries() between passes.
#pragma once

#include <chrono>
#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace hypura::compute {

struct OpKey {
  std::string_view op;  // a string literal: "matmul", "attention", "quantize x", ...
  gguf::GgmlType type = gguf::GgmlType::F32;  // products and quantizations: the format
  int64_t n_cols = 0, n_rows = 0;             // products: the weight's shape (0: none)
  auto operator<=>(const OpKey&) const = default;
  std::string label() const;  // e.g. "matmul Q4_K 896x4864", "attention"
};

struct OpStats {
  uint64_t calls = 0;
  double seconds = 0;  // exclusive
  double macs = 0;     // multiply-accumulates of products (0 for the rest)
};

class OpProfile {
 public:
  // Times one operation from construction to destruction; with a null profile it does
  // nothing (profiling off costs a pointer test).
  class Scope {
   public:
    Scope(OpProfile* profile, const OpKey& key, double macs = 0);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    OpProfile* profile_;
    OpKey key_;
    double macs_ = 0;
    double nested_ = 0;  // seconds of the Scopes opened inside this one
    Scope* parent_ = nullptr;
    std::chrono::steady_clock::time_point start_;
  };

  struct Entry {
    OpKey key;
    OpStats stats;
  };
  void clear() { stats_.clear(); }
  std::vector<Entry> entries() const;  // most time first
  double seconds() const;              // the entries' sum

 private:
  std::map<OpKey, OpStats> stats_;
  Scope* open_ = nullptr;  // the innermost open Scope
};

}  // namespace hypura::compute
