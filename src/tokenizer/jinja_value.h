// Internals of the Jinja renderer (jinja_render.cc): values with their data ranges,
// the work budget, and arithmetic that Python defines and C++ would trap or wrap on.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_internal.h"

namespace hypura::tokenizer::jinja_detail {

// Which parts of a value are data (RenderOptions::data_vars): a string lists its data
// byte ranges; `all` marks a value that is data as a whole (a list or dict: every string
// inside it). Only strings, lists and dicts carry it; numbers cannot hold token text.
struct Taint {
  bool all = false;
  std::vector<TextRange> ranges;  // strings only; ascending, disjoint
  bool any() const { return all || !ranges.empty(); }
};

// A value: JSON, or undefined, or a builtin function (by name), or a macro.
struct Value {
  Json j;
  bool undefined = false;
  std::string func;  // builtin or macro name
  Taint taint;
  const Node* macro;  // a {% macro %}: its definition, which the template owns

  static Value undef() { return {Json(), true, "", {}, nullptr}; }
};

Value json_value(Json j);

// `v` as data as a whole when `data` is set.
Value with_data(Value v, bool data);

bool truthy(const Value& v);

// The ranges of a string's taint, with `all` spelled out as [0, size).
std::vector<TextRange> data_ranges(const Value& v, size_t size);

// Taint of l + r (strings of l_size and r_size bytes): exact ranges.
Taint concat_taint(const Value& l, size_t l_size, const Value& r, size_t r_size);

// Python-style index normalisation for sequences of length n (n >= 0, so no overflow).
int64_t norm_index(int64_t i, int64_t n);

// x op y for op in + - *, failing on overflow (Python ints do not wrap; ours must not
// be undefined behaviour).
int64_t checked(char op, int64_t x, int64_t y);

// Python's // and % for ints, which round toward negative infinity. REQUIRES: y != 0.
int64_t floor_div(int64_t x, int64_t y);
int64_t floor_mod(int64_t x, int64_t y);

// Elements of range(start, stop, step), computed without overflow. REQUIRES: step != 0.
__int128 range_count(int64_t start, int64_t stop, int64_t step);

// Saturating a * b for work estimates.
uint64_t sat_mul(uint64_t a, uint64_t b);

// Charges the work of a render against RenderLimits and checks the clock now and then.
class Budget {
 public:
  explicit Budget(const RenderLimits& limits)
      : limits_(limits), deadline_(std::chrono::steady_clock::now() + limits.max_time) {}

  // Adds `units`; fails past max_work, or (checked every 1024 calls) past max_time.
  void charge(uint64_t units);

  // Bytes plus kValueCost per value, as a copy of `j` costs; fails on values nested past
  // kMaxValueDepth (copying, comparing and printing them recurse).
  uint64_t weight(const Json& j, int depth = 0) const;

  size_t max_bytes() const { return limits_.max_bytes; }

 private:
  const RenderLimits& limits_;
  const std::chrono::steady_clock::time_point deadline_;
  uint64_t work_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace hypura::tokenizer::jinja_detail
