// Jinja subset, rendering: a tree walk over JSON values with Python's semantics for
// strings (codepoints), truthiness, operators and the filters/tests/methods chat
// templates use.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>
#include <optional>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_internal.h"
#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace jinja_detail {
namespace {

// ---------------------------------------------------------------- strings as codepoints

// Python strings index, slice and measure by codepoint. Invalid UTF-8 bytes map to
// U+DC80..U+DCFF and back (Python's surrogateescape), so content survives unchanged.
std::vector<uint32_t> to_cps(std::string_view s) {
  std::vector<uint32_t> cps;
  cps.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<uint8_t>(s[i]);
    const size_t len = utf8_len(b);
    bool ok = len > 1 && i + len <= s.size();
    uint32_t cp = b & (0xFF >> (len + 1));
    for (size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3F);
    }
    if (len == 1 && b < 0x80) {
      cps.push_back(b);
      ++i;
    } else if (ok) {
      cps.push_back(cp);
      i += len;
    } else {
      cps.push_back(0xDC00 + b);
      ++i;
    }
  }
  return cps;
}

std::string from_cps(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX) {
  std::string out;
  for (size_t i = begin; i < std::min(end, cps.size()); ++i) {
    if (cps[i] >= 0xDC80 && cps[i] <= 0xDCFF) out += static_cast<char>(cps[i] - 0xDC00);
    else append_utf8(out, cps[i]);
  }
  return out;
}

// Case mapping for ASCII, Latin-1, Latin Extended-A pairs, Greek and Cyrillic; other
// scripts are left unchanged.
uint32_t case_map(uint32_t c, bool upper) {
  auto shift = [&](uint32_t lo_first, uint32_t lo_last, int32_t delta) -> std::optional<uint32_t> {
    if (upper && c >= lo_first && c <= lo_last) return c - delta;
    if (!upper && c >= lo_first - delta && c <= lo_last - delta) return c + delta;
    return std::nullopt;
  };
  if (c < 0x80) {
    if (upper && c >= 'a' && c <= 'z') return c - 32;
    if (!upper && c >= 'A' && c <= 'Z') return c + 32;
    return c;
  }
  if (c == 0xD7 || c == 0xF7) return c;
  if (auto r = shift(0xE0, 0xFE, 32)) return *r;
  if (c == 0xFF && upper) return 0x178;
  if (c == 0x178 && !upper) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {  // Latin Extended-A: adjacent upper/lower pairs
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    const bool paired = (c <= 0x137 && c != 0x130 && c != 0x131) || odd_upper ||
                        (c >= 0x14A && c <= 0x177);
    if (!paired) return c;
    const bool is_upper = (c % 2 == 1) == odd_upper;
    if (upper && !is_upper) return c - 1;
    if (!upper && is_upper) return c + 1;
    return c;
  }
  if (c == 0x3C2) return upper ? 0x3A3 : c;  // final sigma
  if (auto r = shift(0x3B1, 0x3C9, 32)) return *r;
  if (auto r = shift(0x430, 0x44F, 32)) return *r;
  if (auto r = shift(0x450, 0x45F, 80)) return *r;
  return c;
}

// ---------------------------------------------------------------- values and rendering

// A value: JSON, or undefined, or a builtin function (by name).
struct Value {
  Json j;
  bool undefined = false;
  std::string func;

  static Value undef() { return {Json(), true, ""}; }
};

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

std::string python_float(double d) {
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.1f", d);
    return buf;
  }
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

std::string py_repr(const Json& j);

std::string to_text(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  return py_repr(j);
}

std::string py_repr(const Json& j) {
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_integer()) return std::to_string(j.get<int64_t>());
  if (j.is_number()) return python_float(j.get<double>());
  if (j.is_string()) {
    std::string s = "'";
    for (char c : j.get_ref<const std::string&>()) {
      if (c == '\'' || c == '\\') s += '\\';
      if (c == '\n') { s += "\\n"; continue; }
      s += c;
    }
    return s + "'";
  }
  std::string s = j.is_array() ? "[" : "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) s += ", ";
    first = false;
    if (j.is_object()) s += py_repr(Json(it.key())) + ": ";
    s += py_repr(*it);
  }
  return s + (j.is_array() ? "]" : "}");
}

std::string output_text(const Value& v) {
  if (v.undefined) return "";
  return to_text(v.j);
}

// json.dumps(x, ensure_ascii=False, indent=indent) as transformers' tojson filter does.
void dump_json(const Json& j, int indent, int depth, std::string& out) {
  const std::string item_sep = indent >= 0 ? "," : ", ";
  auto newline = [&](int d) {
    if (indent < 0) return;
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (j.is_object() || j.is_array()) {
    if (j.empty()) {
      out += j.is_object() ? "{}" : "[]";
      return;
    }
    out += j.is_object() ? '{' : '[';
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += item_sep;
      first = false;
      newline(depth + 1);
      if (j.is_object()) out += Json(it.key()).dump(-1, ' ', false) + ": ";
      dump_json(*it, indent, depth + 1, out);
    }
    newline(depth);
    out += j.is_object() ? '}' : ']';
  } else if (j.is_number_float()) {
    out += python_float(j.get<double>());
  } else {
    out += j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
}

int64_t to_int(const Value& v) {
  if (v.j.is_number_integer()) return v.j.get<int64_t>();
  if (v.j.is_number()) return static_cast<int64_t>(v.j.get<double>());
  if (v.j.is_boolean()) return v.j.get<bool>() ? 1 : 0;
  fail("expected a number, got " + py_repr(v.j));
}

// Python-style index normalisation for sequences of length n.
int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

std::vector<std::string> split_string(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep == nullptr || sep->undefined || sep->j.is_null()) {  // split on whitespace runs
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && is_space(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(s.substr(i));
        return parts;
      }
      size_t j = i;
      while (j < s.size() && !is_space(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      i = j;
    }
    return parts;
  }
  const std::string d = to_text(sep->j);
  if (d.empty()) fail("empty separator");
  size_t pos = 0;
  for (size_t m; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                 (m = s.find(d, pos)) != std::string::npos;
       pos = m + d.size()) {
    parts.push_back(s.substr(pos, m - pos));
  }
  parts.push_back(s.substr(pos));
  return parts;
}

std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
  const std::string set = (chars && !chars->undefined && chars->j.is_string()) ? chars->j.get<std::string>() : " \t\n\r\f\v";
  size_t b = 0, e = s.size();
  if (left) while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right) while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

class Renderer {
 public:
  explicit Renderer(const Json& context) {
    scopes_.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it) scopes_.back()[it.key()] = Value{*it, false, ""};
  }

  std::string run(const NodeList& nodes) {
    render_nodes(nodes);
    return std::move(out_);
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow render_nodes(const NodeList& nodes) {
    for (const auto& n : nodes) {
      const Flow f = render_node(*n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow render_node(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kText: out_ += n.text; return Flow::kNormal;
      case Node::Kind::kOutput:
        out_ += output_text(eval(*n.expr));
        if (out_.size() > kMaxOutputBytes) fail("rendered text too large");
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) return render_nodes(body);
        }
        return Flow::kNormal;
      case Node::Kind::kFor: return render_for(n);
      case Node::Kind::kSet: render_set(n); return Flow::kNormal;
      case Node::Kind::kBreak: return Flow::kBreak;
      case Node::Kind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void render_set(const Node& n) {
    Value v = eval(*n.expr);
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return;
    }
    Value* ns = lookup_ref(n.targets[0]);
    if (ns == nullptr || !ns->j.is_object()) fail("set on a non-namespace '" + n.targets[0] + "'");
    ns->j[n.targets[1]] = v.j;
  }

  std::vector<Json> items_of(const Value& v) {
    std::vector<Json> items;
    if (v.undefined || v.j.is_null()) return items;
    if (v.j.is_array()) {
      for (const auto& x : v.j) items.push_back(x);
    } else if (v.j.is_object()) {
      for (auto it = v.j.begin(); it != v.j.end(); ++it) items.push_back(Json(it.key()));
    } else if (v.j.is_string()) {
      const auto cps = to_cps(v.j.get_ref<const std::string&>());
      for (size_t k = 0; k < cps.size(); ++k) items.push_back(Json(from_cps(cps, k, k + 1)));
    } else {
      fail("cannot iterate over " + py_repr(v.j));
    }
    return items;
  }

  void bind_targets(const Node& n, const Json& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = Value{item, false, ""};
      return;
    }
    if (!item.is_array() || item.size() != n.targets.size()) fail("cannot unpack loop item");
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = Value{item[k], false, ""};
  }

  Flow render_for(const Node& n) {
    std::vector<Json> items = items_of(eval(*n.expr));
    if (n.filter) {
      std::vector<Json> kept;
      for (const auto& item : items) {
        scopes_.emplace_back();
        bind_targets(n, item);
        if (truthy(eval(*n.filter))) kept.push_back(item);
        scopes_.pop_back();
      }
      items.swap(kept);
    }
    if (items.empty()) {
      render_nodes(n.else_body);
      return Flow::kNormal;
    }
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      if (++iterations_ > kMaxLoopIterations) fail("template loops too long");
      scopes_.emplace_back();
      bind_targets(n, items[i]);
      Json loop = {{"index", i + 1}, {"index0", i}, {"revindex", len - i}, {"revindex0", len - i - 1},
                   {"first", i == 0}, {"last", i == len - 1}, {"length", len}};
      loop["previtem"] = i > 0 ? items[i - 1] : Json();
      loop["nextitem"] = i + 1 < len ? items[i + 1] : Json();
      scopes_.back()["loop"] = Value{loop, false, ""};
      const Flow f = render_nodes(n.body);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value* lookup_ref(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return &f->second;
    }
    return nullptr;
  }

  Value lookup(const std::string& name) {
    if (Value* v = lookup_ref(name)) return *v;
    if (name == "raise_exception" || name == "namespace" || name == "range" || name == "strftime_now") {
      return Value{Json(), false, name};
    }
    return Value::undef();
  }

  Value eval(const Expr& e) {
    DepthGuard guard(eval_depth_, kMaxEvalDepth);
    switch (e.kind) {
      case Expr::Kind::kLiteral: return Value{e.literal, false, ""};
      case Expr::Kind::kName: return lookup(e.name);
      case Expr::Kind::kList: {
        Json arr = Json::array();
        for (const auto& a : e.args) arr.push_back(eval(*a).j);
        return Value{arr, false, ""};
      }
      case Expr::Kind::kDict: {
        Json obj = Json::object();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) obj[to_text(eval(*e.args[i]).j)] = eval(*e.args[i + 1]).j;
        return Value{obj, false, ""};
      }
      case Expr::Kind::kAttr: return attribute(eval(*e.args[0]), e.name);
      case Expr::Kind::kIndex: return index(eval(*e.args[0]), eval(*e.args[1]));
      case Expr::Kind::kSlice: return slice(e);
      case Expr::Kind::kCall: return call(e);
      case Expr::Kind::kFilter: return filter(e);
      case Expr::Kind::kTest: {
        const bool r = test(e);
        return Value{Json(e.negate ? !r : r), false, ""};
      }
      case Expr::Kind::kNot: return Value{Json(!truthy(eval(*e.args[0]))), false, ""};
      case Expr::Kind::kNeg: {
        Value v = eval(*e.args[0]);
        if (v.j.is_number_integer()) return Value{Json(-v.j.get<int64_t>()), false, ""};
        if (v.j.is_number()) return Value{Json(-v.j.get<double>()), false, ""};
        fail("cannot negate " + py_repr(v.j));
      }
      case Expr::Kind::kAnd: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? eval(*e.args[1]) : l;
      }
      case Expr::Kind::kOr: {
        Value l = eval(*e.args[0]);
        return truthy(l) ? l : eval(*e.args[1]);
      }
      case Expr::Kind::kCond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undef();
      case Expr::Kind::kBinary: return binary(e.name, eval(*e.args[0]), eval(*e.args[1]));
    }
    fail("bad expression");
  }

  Value attribute(const Value& obj, const std::string& name) {
    if (obj.j.is_object()) {
      auto it = obj.j.find(name);
      if (it != obj.j.end()) return Value{*it, false, ""};
    }
    return Value::undef();
  }

  Value index(const Value& obj, const Value& key) {
    if (obj.j.is_array() && key.j.is_number_integer()) {
      const int64_t n = static_cast<int64_t>(obj.j.size());
      const int64_t i = norm_index(key.j.get<int64_t>(), n);
      if (i < 0 || i >= n) return Value::undef();
      return Value{obj.j[static_cast<size_t>(i)], false, ""};
    }
    if (obj.j.is_string() && key.j.is_number_integer()) {
      const auto cps = to_cps(obj.j.get_ref<const std::string&>());
      const int64_t i = norm_index(key.j.get<int64_t>(), static_cast<int64_t>(cps.size()));
      if (i < 0 || i >= static_cast<int64_t>(cps.size())) return Value::undef();
      return str(from_cps(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
    if (obj.j.is_object() && key.j.is_string()) return attribute(obj, key.j.get<std::string>());
    return Value::undef();
  }

  Value slice(const Expr& e) {
    const Value obj = eval(*e.args[0]);
    const bool is_str = obj.j.is_string();
    if (!is_str && !obj.j.is_array()) fail("cannot slice " + py_repr(obj.j));
    const std::vector<uint32_t> cps = is_str ? to_cps(obj.j.get_ref<const std::string&>()) : std::vector<uint32_t>();
    const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.j.size());
    const int64_t step = e.args[3] ? to_int(eval(*e.args[3])) : 1;
    if (step == 0) fail("slice step 0");
    auto bound = [&](const ExprPtr& x, int64_t dflt) {
      if (!x) return dflt;
      int64_t i = norm_index(to_int(eval(*x)), n);
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t start = bound(e.args[1], step > 0 ? 0 : n - 1);
    const int64_t stop = bound(e.args[2], step > 0 ? n : -1);
    Json out = Json::array();
    std::vector<uint32_t> picked;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (is_str) picked.push_back(cps[static_cast<size_t>(i)]);
      else out.push_back(obj.j[static_cast<size_t>(i)]);
    }
    return is_str ? str(from_cps(picked)) : Value{out, false, ""};
  }

  std::vector<Value> eval_args(const Expr& e, size_t first) {
    std::vector<Value> args;
    for (size_t i = first; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    return args;
  }

  Value call(const Expr& e) {
    std::vector<Value> args = eval_args(e, 1);
    auto arg = [&](size_t i) -> const Value* { return i < args.size() ? &args[i] : nullptr; };
    if (!e.args[0]) return call_global(e, args);
    const Value self = eval(*e.args[0]);
    const std::string& m = e.name;
    if (self.j.is_string()) {
      const std::string& s = self.j.get_ref<const std::string&>();
      if (m == "strip") return str(strip_chars(s, arg(0), true, true));
      if (m == "lstrip") return str(strip_chars(s, arg(0), true, false));
      if (m == "rstrip") return str(strip_chars(s, arg(0), false, true));
      if (m == "upper" || m == "lower") return str(change_case(s, m == "upper"));
      if (m == "startswith") return Value{Json(s.starts_with(to_text(args.at(0).j))), false, ""};
      if (m == "endswith") return Value{Json(s.ends_with(to_text(args.at(0).j))), false, ""};
      if (m == "split") {
        Json parts = Json::array();
        for (auto& p : split_string(s, arg(0), arg(1) ? to_int(*arg(1)) : -1)) parts.push_back(p);
        return Value{parts, false, ""};
      }
      if (m == "replace") return str(replace_all(s, to_text(args.at(0).j), to_text(args.at(1).j)));
      if (m == "title" || m == "capitalize") return str(titlecase(s, m == "title"));
      if (m == "find") {
        const size_t p = s.find(to_text(args.at(0).j));
        return Value{Json(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p)), false, ""};
      }
    }
    if (self.j.is_object()) {
      if (m == "get") {
        Value v = attribute(self, to_text(args.at(0).j));
        return v.undefined ? (arg(1) ? *arg(1) : Value{Json(), false, ""}) : v;
      }
      if (m == "items") {
        Json out = Json::array();
        for (auto it = self.j.begin(); it != self.j.end(); ++it) out.push_back(Json::array({it.key(), *it}));
        return Value{out, false, ""};
      }
      if (m == "keys" || m == "values") {
        Json out = Json::array();
        for (auto it = self.j.begin(); it != self.j.end(); ++it) out.push_back(m == "keys" ? Json(it.key()) : *it);
        return Value{out, false, ""};
      }
    }
    fail("unsupported method '" + m + "' on " + py_repr(self.j));
  }

  Value call_global(const Expr& e, const std::vector<Value>& args) {
    const std::string& f = e.name;
    if (f == "raise_exception") fail("template error: " + (args.empty() ? "" : output_text(args[0])));
    if (f == "namespace") {
      Json obj = Json::object();
      for (size_t i = 0; i < args.size(); ++i) obj[e.kwargs[i + 1]] = args[i].j;
      return Value{obj, false, ""};
    }
    if (f == "range") {
      int64_t start = 0, stop = 0, step = 1;
      if (args.size() == 1) stop = to_int(args[0]);
      else if (args.size() >= 2) {
        start = to_int(args[0]);
        stop = to_int(args[1]);
        if (args.size() > 2) step = to_int(args[2]);
      }
      if (step == 0) fail("range step 0");
      if ((stop - start) / step > kMaxRange) fail("range too large");
      Json out = Json::array();
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(i);
      return Value{out, false, ""};
    }
    if (f == "strftime_now") {
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[128];
      std::strftime(buf, sizeof(buf), args.empty() ? "%Y-%m-%d" : output_text(args[0]).c_str(), &tm);
      return str(buf);
    }
    fail("unknown function '" + f + "'");
  }

  static Value str(std::string s) { return Value{Json(std::move(s)), false, ""}; }

  static std::string change_case(const std::string& s, bool upper) {
    auto cps = to_cps(s);
    for (auto& c : cps) c = case_map(c, upper);
    return from_cps(cps);
  }

  // Python's str.title() (every_word) / str.capitalize().
  static std::string titlecase(const std::string& s, bool every_word) {
    auto cps = to_cps(s);
    bool start = true;
    for (auto& c : cps) {
      const bool alnum = (c < 0x80 && std::isalnum(static_cast<int>(c))) || c >= 0xC0;
      c = case_map(c, start);
      start = every_word ? !alnum : false;
    }
    return from_cps(cps);
  }

  static std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string out;
    size_t pos = 0;
    for (size_t m; (m = s.find(from, pos)) != std::string::npos; pos = m + from.size()) {
      out.append(s, pos, m - pos);
      out += to;
    }
    out.append(s, pos, std::string::npos);
    return out;
  }

  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    std::vector<Value> args = eval_args(e, 1);
    const std::string& f = e.name;
    auto kwarg = [&](std::string_view name, size_t pos) -> const Value* {
      for (size_t i = 0; i < args.size(); ++i) {
        if (e.kwargs[i + 1] == name) return &args[i];
      }
      return pos < args.size() && e.kwargs[pos + 1].empty() ? &args[pos] : nullptr;
    };
    if (f == "trim") return str(strip_chars(output_text(v), nullptr, true, true));
    if (f == "length" || f == "count") {
      if (v.j.is_string()) return Value{Json(static_cast<int64_t>(to_cps(v.j.get_ref<const std::string&>()).size())), false, ""};
      return Value{Json(static_cast<int64_t>(v.undefined ? 0 : v.j.size())), false, ""};
    }
    if (f == "tojson") {
      const Value* indent = kwarg("indent", 0);
      std::string out;
      dump_json(v.j, indent && !indent->j.is_null() ? static_cast<int>(to_int(*indent)) : -1, 0, out);
      return str(out);
    }
    if (f == "string") return str(output_text(v));
    if (f == "upper" || f == "lower") return str(change_case(output_text(v), f == "upper"));
    if (f == "capitalize" || f == "title") return str(titlecase(output_text(v), f == "title"));
    if (f == "safe") return v;
    if (f == "default" || f == "d") {
      const Value* dflt = kwarg("default_value", 0);
      const Value* boolean = kwarg("boolean", 1);
      const bool use = v.undefined || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (dflt ? *dflt : str("")) : v;
    }
    if (f == "join") {
      const Value* sep = kwarg("d", 0);
      std::string out;
      bool first = true;
      for (const auto& item : items_of(v)) {
        if (!first && sep) out += output_text(*sep);
        first = false;
        out += to_text(item);
      }
      return str(out);
    }
    if (f == "first" || f == "last") {
      const auto items = items_of(v);
      if (items.empty()) return Value::undef();
      return Value{f == "first" ? items.front() : items.back(), false, ""};
    }
    if (f == "list") {
      Json arr = Json::array();
      for (auto& x : items_of(v)) arr.push_back(x);
      return Value{arr, false, ""};
    }
    if (f == "items") {
      Json out = Json::array();
      if (v.j.is_object()) {
        for (auto it = v.j.begin(); it != v.j.end(); ++it) out.push_back(Json::array({it.key(), *it}));
      }
      return Value{out, false, ""};
    }
    if (f == "replace") return str(replace_all(output_text(v), output_text(args.at(0)), output_text(args.at(1))));
    if (f == "int") return Value{Json(v.j.is_string() ? std::stoll(v.j.get<std::string>()) : to_int(v)), false, ""};
    if (f == "abs") {
      if (v.j.is_number_integer()) return Value{Json(std::llabs(v.j.get<int64_t>())), false, ""};
      return Value{Json(std::fabs(v.j.get<double>())), false, ""};
    }
    if (f == "reverse") {
      if (v.j.is_string()) {
        auto cps = to_cps(v.j.get_ref<const std::string&>());
        std::reverse(cps.begin(), cps.end());
        return str(from_cps(cps));
      }
      auto items = items_of(v);
      Json arr = Json::array();
      for (auto it = items.rbegin(); it != items.rend(); ++it) arr.push_back(*it);
      return Value{arr, false, ""};
    }
    if (f == "selectattr" || f == "rejectattr") return select_attr(v, args, f == "selectattr");
    if (f == "map") {
      const Value* attr = kwarg("attribute", 99);
      if (attr == nullptr) fail("map() needs attribute=");
      Json arr = Json::array();
      for (const auto& item : items_of(v)) arr.push_back(attribute(Value{item, false, ""}, output_text(*attr)).j);
      return Value{arr, false, ""};
    }
    fail("unsupported filter '" + f + "'");
  }

  Value select_attr(const Value& v, const std::vector<Value>& args, bool keep_matching) {
    if (args.empty()) fail("selectattr needs an attribute");
    const std::string attr = output_text(args[0]);
    Json arr = Json::array();
    for (const auto& item : items_of(v)) {
      const Value a = attribute(Value{item, false, ""}, attr);
      bool match = truthy(a);
      if (args.size() >= 2) {
        const std::string t = output_text(args[1]);
        if (t == "equalto" || t == "eq" || t == "==") match = args.size() >= 3 && !a.undefined && a.j == args[2].j;
        else if (t == "defined") match = !a.undefined;
        else if (t == "undefined") match = a.undefined;
        else if (t == "none") match = !a.undefined && a.j.is_null();
        else if (t == "string") match = a.j.is_string();
        else fail("unsupported selectattr test '" + t + "'");
      }
      if (match == keep_matching) arr.push_back(item);
    }
    return Value{arr, false, ""};
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const std::string& t = e.name;
    if (t == "defined") return !v.undefined;
    if (t == "undefined") return v.undefined;
    if (t == "none") return !v.undefined && v.func.empty() && v.j.is_null();
    if (t == "string") return v.j.is_string();
    if (t == "number") return v.j.is_number();
    if (t == "integer") return v.j.is_number_integer();
    if (t == "float") return v.j.is_number_float();
    if (t == "boolean") return v.j.is_boolean();
    if (t == "mapping") return v.j.is_object();
    if (t == "iterable") return v.j.is_array() || v.j.is_object() || v.j.is_string();
    if (t == "sequence") return v.j.is_array() || v.j.is_string();
    if (t == "true") return v.j.is_boolean() && v.j.get<bool>();
    if (t == "false") return v.j.is_boolean() && !v.j.get<bool>();
    if (t == "callable") return !v.func.empty();
    if (t == "odd" || t == "even") return (to_int(v) % 2 != 0) == (t == "odd");
    if (t == "equalto" || t == "eq" || t == "sameas") {
      if (e.args.size() < 2) fail("test '" + t + "' needs an argument");
      return !v.undefined && v.j == eval(*e.args[1]).j;
    }
    fail("unsupported test '" + t + "'");
  }

  Value binary(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return Value{Json(equal(l, r)), false, ""};
    if (op == "!=") return Value{Json(!equal(l, r)), false, ""};
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.j.is_string()) found = r.j.get_ref<const std::string&>().find(output_text(l)) != std::string::npos;
      else if (r.j.is_array()) for (const auto& x : r.j) found = found || x == l.j;
      else if (r.j.is_object()) found = l.j.is_string() && r.j.contains(l.j.get<std::string>());
      return Value{Json(op == "in" ? found : !found), false, ""};
    }
    if (op == "~") return str(output_text(l) + output_text(r));
    if (op == "+") {
      if (l.j.is_string() && r.j.is_string()) return str(l.j.get<std::string>() + r.j.get<std::string>());
      if (l.j.is_array() && r.j.is_array()) {
        Json out = l.j;
        for (const auto& x : r.j) out.push_back(x);
        return Value{out, false, ""};
      }
    }
    if (op == "*" && l.j.is_string() && r.j.is_number_integer()) {
      const int64_t n = r.j.get<int64_t>();
      if (n > 0 && l.j.get_ref<const std::string&>().size() * static_cast<uint64_t>(n) > kMaxOutputBytes) {
        fail("string repetition too large");
      }
      std::string out;
      for (int64_t i = 0; i < r.j.get<int64_t>(); ++i) out += l.j.get<std::string>();
      return str(out);
    }
    if (!l.j.is_number() || !r.j.is_number() || l.undefined || r.undefined) {
      fail("unsupported operands for '" + op + "': " + py_repr(l.j) + ", " + py_repr(r.j));
    }
    const bool ints = l.j.is_number_integer() && r.j.is_number_integer();
    const double a = l.j.get<double>(), b = r.j.get<double>();
    if (op == "<") return Value{Json(a < b), false, ""};
    if (op == ">") return Value{Json(a > b), false, ""};
    if (op == "<=") return Value{Json(a <= b), false, ""};
    if (op == ">=") return Value{Json(a >= b), false, ""};
    if (ints && op != "/") {
      const int64_t x = l.j.get<int64_t>(), y = r.j.get<int64_t>();
      if (op == "+") return Value{Json(x + y), false, ""};
      if (op == "-") return Value{Json(x - y), false, ""};
      if (op == "*") return Value{Json(x * y), false, ""};
      if (y == 0) fail("division by zero");
      if (op == "//") return Value{Json(x / y - ((x % y != 0) && ((x < 0) != (y < 0)))), false, ""};
      if (op == "%") return Value{Json(((x % y) + y) % y), false, ""};
    }
    if (op == "+") return Value{Json(a + b), false, ""};
    if (op == "-") return Value{Json(a - b), false, ""};
    if (op == "*") return Value{Json(a * b), false, ""};
    if (b == 0) fail("division by zero");
    if (op == "/") return Value{Json(a / b), false, ""};
    if (op == "//") return Value{Json(std::floor(a / b)), false, ""};
    if (op == "%") return Value{Json(std::fmod(a, b)), false, ""};
    fail("unknown operator '" + op + "'");
  }

  static bool equal(const Value& l, const Value& r) {
    if (l.undefined || r.undefined) return l.undefined && r.undefined;
    return l.j == r.j;
  }

  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
  int64_t iterations_ = 0;  // loop iterations so far (kMaxLoopIterations)
  int eval_depth_ = 0;
};

}  // namespace
}  // namespace jinja_detail

Result<std::string> JinjaTemplate::render(const nlohmann::ordered_json& context) const {
  try {
    jinja_detail::Renderer r(context);
    return r.run(root_->branches.front().second);
  } catch (const jinja_detail::JinjaError& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace hypura::tokenizer
