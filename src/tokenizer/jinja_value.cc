#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <chrono>
#include <limits>

namespace hypura::tokenizer::jinja_detail {

using Clock = std::chrono::steady_clock;

Value json_value(Json j) {
  return Value{std::move(j), false, "", {}, nullptr};
}

// `v` as data as a whole when `data` is set.
Value with_data(Value v, bool data) {
  if (data) v.taint.all = true;
  return v;
}

bool truthy(const Value& v) {
  if (v.undefined) return false;
  if (!v.func.empty()) return true;
  const Json& j = v.j;
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return j.get<int64_t>() != 0;
  if (j.is_number()) return j.get<double>() != 0.0;
  if (j.is_string()) return !j.get_ref<const std::string&>().empty();
  return !j.empty();
}

// The ranges of a string's taint, with `all` spelled out as [0, size).
std::vector<TextRange> data_ranges(const Value& v, size_t size) {
  if (v.taint.all) return size > 0 ? std::vector<TextRange>{{0, size}} : std::vector<TextRange>{};
  return v.taint.ranges;
}

// Taint of l + r (strings of l_size and r_size bytes): exact ranges.
Taint concat_taint(const Value& l, size_t l_size, const Value& r, size_t r_size) {
  Taint t;
  if (l.taint.all && r.taint.all) {
    t.all = true;
    return t;
  }
  t.ranges = data_ranges(l, l_size);
  for (TextRange x : data_ranges(r, r_size)) {
    x.begin += l_size;
    x.end += l_size;
    if (!t.ranges.empty() && t.ranges.back().end == x.begin)
      t.ranges.back().end = x.end;
    else
      t.ranges.push_back(x);
  }
  return t;
}

// Python-style index normalisation for sequences of length n (n >= 0, so no overflow).
int64_t norm_index(int64_t i, int64_t n) {
  return i < 0 ? i + n : i;
}

// x op y for op in + - *, failing on overflow (Python ints do not wrap; ours must not
// be undefined behaviour).
int64_t checked(char op, int64_t x, int64_t y) {
  int64_t z = 0;
  const bool overflow = op == '+'   ? __builtin_add_overflow(x, y, &z)
                        : op == '-' ? __builtin_sub_overflow(x, y, &z)
                                    : __builtin_mul_overflow(x, y, &z);
  if (overflow) fail("integer overflow");
  return z;
}

// Python's // and % for ints, which round toward negative infinity. REQUIRES: y != 0.
int64_t floor_div(int64_t x, int64_t y) {
  if (x == std::numeric_limits<int64_t>::min() && y == -1) fail("integer overflow");
  return x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
}
int64_t floor_mod(int64_t x, int64_t y) {
  if (y == -1) return 0;  // x % -1 traps for INT64_MIN on x86
  const int64_t r = x % y;
  return (r != 0 && (r < 0) != (y < 0)) ? r + y : r;  // opposite signs: cannot overflow
}

// Elements of range(start, stop, step), computed without overflow. REQUIRES: step != 0.
__int128 range_count(int64_t start, int64_t stop, int64_t step) {
  const __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
  const __int128 s = step > 0 ? __int128{step} : -__int128{step};
  return span <= 0 ? 0 : (span + s - 1) / s;
}

// Saturating a * b for work estimates.
uint64_t sat_mul(uint64_t a, uint64_t b) {
  return (b != 0 && a > std::numeric_limits<uint64_t>::max() / b)
             ? std::numeric_limits<uint64_t>::max()
             : a * b;
}

void Budget::charge(uint64_t units) {
  const uint64_t room = std::numeric_limits<uint64_t>::max() - work_;
  work_ = units > room ? std::numeric_limits<uint64_t>::max() : work_ + units;
  if (work_ > limits_.max_work) {
    fail_limit("rendering took more than its work limit (" + std::to_string(limits_.max_work) +
               " units)");
  }
  if (++calls_ % 1024 == 0 && Clock::now() > deadline_) {
    fail_limit("rendering took more than " + std::to_string(limits_.max_time.count()) + " ms");
  }
}

uint64_t Budget::weight(const Json& j, int depth) const {
  if (depth > kMaxValueDepth) fail_limit("a value nests too deeply");
  if (j.is_string()) return kValueCost + j.get_ref<const std::string&>().size();
  if (!j.is_structured()) return kValueCost;
  uint64_t w = kValueCost;
  for (auto it = j.begin(); it != j.end(); ++it) {
    w += weight(*it, depth + 1) + (j.is_object() ? it.key().size() : 0);
  }
  return w;
}

}  // namespace hypura::tokenizer::jinja_detail
