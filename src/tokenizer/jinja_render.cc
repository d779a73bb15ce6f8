// Jinja subset, rendering: a tree walk over JSON values with Python's semantics for
// strings (codepoints), truthiness, operators and the filters/tests/methods chat
// templates use. Every step is charged to a Budget (RenderLimits); every string built is
// capped; integer arithmetic is checked.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <utility>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_internal.h"
#include "tokenizer/jinja_value.h"

namespace hypura::tokenizer {
namespace jinja_detail {
namespace {

// ---------------------------------------------------------------- rendering

class Renderer {
 public:
  Renderer(const Json& context, const RenderOptions& options)
      : budget_(options.limits),
        trusted_strings_(options.trusted_strings),
        fixed_time_(options.fixed_time) {
    scopes_.emplace_back();
    const auto& data = options.data_vars;
    for (auto it = context.begin(); it != context.end(); ++it) {
      const bool is_data = std::find(data.begin(), data.end(), it.key()) != data.end();
      budget_.weight(*it);  // rejects a context nested too deeply to copy safely
      scopes_.back()[it.key()] = with_data(json_value(*it), is_data);
    }
  }

  PromptText run(const NodeList& nodes) {
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
    budget_.charge(1);
    switch (n.kind) {
      case Node::Kind::kText:
        check_output(n.text.size());
        out_.append_template(n.text);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        emit(eval(*n.expr));
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          if (!cond || truthy(eval(*cond))) return render_nodes(body);
        }
        return Flow::kNormal;
      case Node::Kind::kFor:
        return render_for(n);
      case Node::Kind::kSet:
        render_set(n);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kMacro:
        scopes_.back()[n.text] = Value{Json(), false, n.text, {}, &n};
        return Flow::kNormal;
    }
    return Flow::kNormal;
  }

  void check_output(size_t more) {
    budget_.charge(more);
    if (more > budget_.max_bytes() - std::min(budget_.max_bytes(), out_.text.size())) {
      fail_limit("rendered text larger than " + std::to_string(budget_.max_bytes()) + " bytes");
    }
  }

  // Appends a value's text, its data ranges marked as data.
  void emit(const Value& v) {
    const std::string text = output_text(v);
    check_output(text.size());
    size_t pos = 0;
    for (const TextRange& r : data_ranges(v, text.size())) {
      out_.append_template(std::string_view(text).substr(pos, r.begin - pos));
      out_.append_data(std::string_view(text).substr(r.begin, r.end - r.begin));
      pos = r.end;
    }
    out_.append_template(std::string_view(text).substr(pos));
  }

  void render_set(const Node& n) {
    Value v = eval(*n.expr);
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = std::move(v);
      return;
    }
    Value* ns = lookup_ref(n.targets[0]);
    if (ns == nullptr || !ns->j.is_object()) fail("set on a non-namespace '" + n.targets[0] + "'");
    // A namespace is one dict value, so data stored in it makes all of it data.
    if (v.taint.any()) ns->taint.all = true;
    ns->j[n.targets[1]] = std::move(v.j);
  }

  std::vector<Json> items_of(const Value& v) {
    std::vector<Json> items;
    if (v.undefined || v.j.is_null()) return items;
    if (v.j.is_array()) {
      budget_.charge(budget_.weight(v.j));
      items.assign(v.j.begin(), v.j.end());
    } else if (v.j.is_object()) {
      budget_.charge(budget_.weight(v.j));
      for (auto it = v.j.begin(); it != v.j.end(); ++it) items.push_back(Json(it.key()));
    } else if (v.j.is_string()) {
      const auto cps = codepoints(v.j.get_ref<const std::string&>());
      budget_.charge(sat_mul(cps.size(), kValueCost));  // before building one value each
      for (size_t k = 0; k < cps.size(); ++k) items.push_back(Json(from_cps(cps, k, k + 1)));
    } else {
      fail("cannot iterate over " + repr(v.j));
    }
    return items;
  }

  void bind_targets(const Node& n, const Json& item, bool data) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = with_data(json_value(item), data);
      return;
    }
    if (!item.is_array() || item.size() != n.targets.size()) fail("cannot unpack loop item");
    for (size_t k = 0; k < n.targets.size(); ++k) {
      scopes_.back()[n.targets[k]] = with_data(json_value(item[k]), data);
    }
  }

  Flow render_for(const Node& n) {
    const Value iterable = eval(*n.expr);
    const bool data = iterable.taint.any();
    std::vector<Json> items = items_of(iterable);
    if (n.filter) {
      std::vector<Json> kept;
      for (const auto& item : items) {
        scopes_.emplace_back();
        bind_targets(n, item, data);
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
      if (++iterations_ > kMaxLoopIterations) fail_limit("template loops too long");
      scopes_.emplace_back();
      bind_targets(n, items[i], data);
      Json loop = {{"index", i + 1},      {"index0", i},
                   {"revindex", len - i}, {"revindex0", len - i - 1},
                   {"first", i == 0},     {"last", i == len - 1},
                   {"length", len}};
      loop["previtem"] = i > 0 ? items[i - 1] : Json();
      loop["nextitem"] = i + 1 < len ? items[i + 1] : Json();
      budget_.charge(budget_.weight(loop));
      scopes_.back()["loop"] = with_data(json_value(std::move(loop)), data);
      const Flow f = render_nodes(n.body);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // Innermost first, down to the running macro's frame, then the template's variables.
  Value* lookup_ref(const std::string& name) {
    for (size_t k = scopes_.size(); k-- > 0;) {
      if (k < frame_ && k > 0) k = 0;
      auto f = scopes_[k].find(name);
      if (f != scopes_[k].end()) return &f->second;
    }
    return nullptr;
  }

  Value lookup(const std::string& name) {
    if (Value* v = lookup_ref(name)) return *v;
    if (name == "raise_exception" || name == "namespace" || name == "range" ||
        name == "strftime_now") {
      return Value{Json(), false, name, {}, nullptr};
    }
    return Value::undef();
  }

  // The value of `e` without copying it when it is a variable (a template that reads
  // messages|length in a loop must not copy all messages each time); else `holder`.
  // The reference stays valid while the expression is evaluated (expressions do not
  // assign variables).
  const Value& view(const Expr& e, Value& holder) {
    if (e.kind == Expr::Kind::kName) {
      budget_.charge(1);
      if (const Value* v = lookup_ref(e.name)) return *v;
    }
    holder = eval(e);
    return holder;
  }

  // Evaluates `e`, charging a step plus the size of the value it yields (a copy).
  Value eval(const Expr& e) {
    DepthGuard guard(eval_depth_, kMaxEvalDepth);
    Value v = eval_uncharged(e);
    budget_.charge(1 + (v.j.is_structured() || v.j.is_string() ? budget_.weight(v.j) : 0));
    if (!v.j.is_structured() && !v.j.is_string()) v.taint = {};
    return v;
  }

  Value eval_uncharged(const Expr& e) {
    Value h0, h1;
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return json_value(e.literal);
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kDict:
        return collection(e);
      case Expr::Kind::kAttr:
        return attribute(view(*e.args[0], h0), e.name);
      case Expr::Kind::kIndex:
        return index(view(*e.args[0], h0), view(*e.args[1], h1));
      case Expr::Kind::kSlice:
        return slice(e);
      case Expr::Kind::kCall:
        return call(e);
      case Expr::Kind::kFilter:
        return filter(e);
      case Expr::Kind::kTest: {
        const bool r = test(e);
        return json_value(Json(e.negate ? !r : r));
      }
      case Expr::Kind::kNot:
        return json_value(Json(!truthy(view(*e.args[0], h0))));
      case Expr::Kind::kNeg:
        return negate(view(*e.args[0], h0));
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
      case Expr::Kind::kBinary:
        return binary(e.name, view(*e.args[0], h0), view(*e.args[1], h1));
    }
    fail("bad expression");
  }

  // [a, b] and {k: v}: data as a whole when any part is.
  Value collection(const Expr& e) {
    bool data = false;
    if (e.kind == Expr::Kind::kList) {
      Json arr = Json::array();
      for (const auto& a : e.args) {
        Value v = eval(*a);
        data = data || v.taint.any();
        arr.push_back(std::move(v.j));
      }
      return with_data(json_value(std::move(arr)), data);
    }
    Json obj = Json::object();
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      Value k = eval(*e.args[i]);
      Value v = eval(*e.args[i + 1]);
      data = data || k.taint.any() || v.taint.any();
      obj[text(k.j)] = std::move(v.j);
    }
    return with_data(json_value(std::move(obj)), data);
  }

  Value negate(const Value& v) {
    if (v.j.is_number_integer()) {
      const int64_t x = v.j.get<int64_t>();
      if (x == std::numeric_limits<int64_t>::min()) fail("integer overflow");
      return json_value(Json(-x));
    }
    if (v.j.is_number()) return json_value(Json(-v.j.get<double>()));
    fail("cannot negate " + repr(v.j));
  }

  Value attribute(const Value& obj, const std::string& name) {
    if (obj.j.is_object()) {
      auto it = obj.j.find(name);
      if (it != obj.j.end()) return with_data(json_value(*it), obj.taint.any() && !trusted(*it));
    }
    return Value::undef();
  }

  bool trusted(const Json& value) const {
    return value.is_string() &&
           std::find(trusted_strings_.begin(), trusted_strings_.end(),
                     value.get_ref<const std::string&>()) != trusted_strings_.end();
  }

  Value index(const Value& obj, const Value& key) {
    const bool data = obj.taint.any();
    if (obj.j.is_array() && key.j.is_number_integer()) {
      const int64_t n = static_cast<int64_t>(obj.j.size());
      const int64_t i = norm_index(key.j.get<int64_t>(), n);
      if (i < 0 || i >= n) return Value::undef();
      return with_data(json_value(obj.j[static_cast<size_t>(i)]), data);
    }
    if (obj.j.is_string() && key.j.is_number_integer()) {
      const auto cps = codepoints(obj.j.get_ref<const std::string&>());
      const int64_t i = norm_index(key.j.get<int64_t>(), static_cast<int64_t>(cps.size()));
      if (i < 0 || i >= static_cast<int64_t>(cps.size())) return Value::undef();
      return with_data(str(from_cps(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1)),
                       data);
    }
    if (obj.j.is_object() && key.j.is_string()) return attribute(obj, key.j.get<std::string>());
    return Value::undef();
  }

  Value slice(const Expr& e) {
    Value holder;
    const Value& obj = view(*e.args[0], holder);
    const bool is_str = obj.j.is_string();
    if (!is_str && !obj.j.is_array()) fail("cannot slice " + repr(obj.j));
    const std::vector<uint32_t> cps =
        is_str ? codepoints(obj.j.get_ref<const std::string&>()) : std::vector<uint32_t>();
    const int64_t n =
        is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.j.size());
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
    // 128-bit index: start + step may pass INT64_MAX for a huge step.
    for (__int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (is_str)
        picked.push_back(cps[static_cast<size_t>(i)]);
      else
        out.push_back(obj.j[static_cast<size_t>(i)]);
    }
    return with_data(is_str ? str(from_cps(picked)) : json_value(std::move(out)), obj.taint.any());
  }

  std::vector<Value> eval_args(const Expr& e, size_t first) {
    std::vector<Value> args;
    for (size_t i = first; i < e.args.size(); ++i) args.push_back(eval(*e.args[i]));
    return args;
  }

  static bool any_data(const std::vector<Value>& values) {
    return std::any_of(values.begin(), values.end(), [](const Value& v) { return v.taint.any(); });
  }

  Value call(const Expr& e) {
    std::vector<Value> args = eval_args(e, 1);
    if (!e.args[0]) {
      if (const Value* f = lookup_ref(e.name); f != nullptr && f->macro) {
        return call_macro(*f->macro, e, args);
      }
      return with_data(call_global(e, args), any_data(args));
    }
    Value holder;
    const Value& self = view(*e.args[0], holder);
    return with_data(call_method(self, e.name, args), self.taint.any() || any_data(args));
  }

  Value call_method(const Value& self, const std::string& m, const std::vector<Value>& args) {
    auto arg = [&](size_t i) -> const Value* { return i < args.size() ? &args[i] : nullptr; };
    if (self.j.is_string()) {
      const std::string& s = self.j.get_ref<const std::string&>();
      if (m == "strip") return str(strip_chars(s, arg(0), true, true));
      if (m == "lstrip") return str(strip_chars(s, arg(0), true, false));
      if (m == "rstrip") return str(strip_chars(s, arg(0), false, true));
      if (m == "upper" || m == "lower") return str(change_case(s, m == "upper"));
      if (m == "startswith" || m == "endswith") {
        const std::string x = text(args.at(0).j);
        budget_.charge(x.size());
        return json_value(Json(m == "startswith" ? s.starts_with(x) : s.ends_with(x)));
      }
      if (m == "split") return split(s, arg(0), arg(1) ? to_int(*arg(1)) : -1);
      if (m == "replace") return str(replace_all(s, text(args.at(0).j), text(args.at(1).j)));
      if (m == "title" || m == "capitalize") return str(titlecase(s, m == "title"));
      if (m == "find") {
        const size_t p = find(s, text(args.at(0).j));
        return json_value(Json(p == std::string::npos ? int64_t{-1} : static_cast<int64_t>(p)));
      }
    }
    if (self.j.is_object()) {
      if (m == "get") {
        Value v = attribute(self, text(args.at(0).j));
        return v.undefined ? (arg(1) ? *arg(1) : json_value(Json())) : v;
      }
      if (m == "items" || m == "keys" || m == "values") return dict_view(self.j, m);
    }
    fail("unsupported method '" + m + "' on " + repr(self.j));
  }

  // A macro call: its body rendered in a frame of its own (arguments, then defaults
  // evaluated there), seeing the template's variables but not the caller's; the text it
  // writes, with its data ranges, is the value.
  Value call_macro(const Node& m, const Expr& e, std::vector<Value>& args) {
    DepthGuard guard(macro_depth_);
    std::map<std::string, Value> params;
    size_t positional = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& kw = e.kwargs[i + 1];
      std::string name;
      if (kw.empty()) {
        if (positional >= m.targets.size())
          fail("macro '" + m.text + "' takes " + std::to_string(m.targets.size()) + " arguments");
        name = m.targets[positional++];
      } else if (std::find(m.targets.begin(), m.targets.end(), kw) != m.targets.end()) {
        name = kw;
      } else {
        fail("macro '" + m.text + "' has no parameter '" + kw + "'");
      }
      if (!params.emplace(name, std::move(args[i])).second)
        fail("macro '" + m.text + "' got parameter '" + name + "' twice");
    }
    const size_t saved_frame = frame_;
    scopes_.emplace_back();
    frame_ = scopes_.size() - 1;
    for (size_t k = 0; k < m.targets.size(); ++k) {
      auto given = params.find(m.targets[k]);
      scopes_.back()[m.targets[k]] = given != params.end() ? std::move(given->second)
                                     : m.defaults[k]       ? eval(*m.defaults[k])
                                                           : Value::undef();
    }
    PromptText caller_out = std::exchange(out_, PromptText{});
    render_nodes(m.body);
    PromptText text = std::exchange(out_, std::move(caller_out));
    scopes_.resize(frame_);
    frame_ = saved_frame;
    Value v = str(std::move(text.text));
    v.taint.ranges = std::move(text.data);
    return v;
  }

  Value dict_view(const Json& obj, const std::string& which) {
    budget_.charge(budget_.weight(obj));
    Json out = Json::array();
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (which == "items")
        out.push_back(Json::array({it.key(), *it}));
      else
        out.push_back(which == "keys" ? Json(it.key()) : *it);
    }
    return json_value(std::move(out));
  }

  Value call_global(const Expr& e, const std::vector<Value>& args) {
    const std::string& f = e.name;
    if (f == "raise_exception")
      fail("template error: " + (args.empty() ? "" : output_text(args[0])));
    if (f == "namespace") {
      Json obj = Json::object();
      for (size_t i = 0; i < args.size(); ++i) obj[e.kwargs[i + 1]] = args[i].j;
      return json_value(std::move(obj));
    }
    if (f == "range") return range(args);
    if (f == "strftime_now")
      return str(strftime_now(args.empty() ? "%Y-%m-%d" : output_text(args[0])));
    fail("unknown function '" + f + "'");
  }

  Value range(const std::vector<Value>& args) {
    int64_t start = 0, stop = 0, step = 1;
    if (args.size() == 1)
      stop = to_int(args[0]);
    else if (args.size() >= 2) {
      start = to_int(args[0]);
      stop = to_int(args[1]);
      if (args.size() > 2) step = to_int(args[2]);
    }
    if (step == 0) fail("range step 0");
    const __int128 count = range_count(start, stop, step);
    if (count > kMaxRange) fail_limit("range too large");
    budget_.charge(static_cast<uint64_t>(count) * kValueCost);
    Json out = Json::array();
    for (__int128 k = 0; k < count; ++k) out.push_back(static_cast<int64_t>(start + k * step));
    return json_value(std::move(out));
  }

  // strftime with the buffer grown until the text fits. A trailing space makes a
  // successful result non-empty, so strftime's 0 always means "too small" (its buffer is
  // then indeterminate and must not be read).
  std::string strftime_now(const std::string& format) {
    const std::time_t now =
        fixed_time_ ? static_cast<std::time_t>(*fixed_time_) : std::time(nullptr);
    std::tm tm{};
    if (fixed_time_)
      gmtime_r(&now, &tm);
    else
      localtime_r(&now, &tm);
    const std::string fmt = format + ' ';
    for (size_t size = 128; size <= budget_.max_bytes(); size *= 4) {
      budget_.charge(size);
      std::string buf(size, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
      if (n > 0) {
        buf.resize(n - 1);
        return buf;
      }
    }
    fail_limit("strftime_now text too long");
  }

  // ------------------------------------------------ strings (capped and charged)

  Value str(std::string s) {
    if (s.size() > budget_.max_bytes())
      fail_limit("a string grew past " + std::to_string(budget_.max_bytes()) + " bytes");
    return json_value(Json(std::move(s)));
  }
  std::string text(const Json& j) { return to_text(j, budget_.max_bytes()); }
  // For error messages: short, and never a limit error itself.
  static std::string repr(const Json& j) {
    try {
      return py_repr(j, 200);
    } catch (const LimitError&) {
      return "(a large value)";
    }
  }
  std::string output_text(const Value& v) { return v.undefined ? "" : text(v.j); }

  std::vector<uint32_t> codepoints(const std::string& s) {
    budget_.charge(s.size());
    return to_cps(s);
  }

  // std::string::find compares the needle at each candidate: up to n * m steps.
  size_t find(const std::string& haystack, const std::string& needle, size_t pos = 0) {
    budget_.charge(
        sat_mul(haystack.size() - std::min(pos, haystack.size()) + 1, needle.size() + 1));
    return haystack.find(needle, pos);
  }

  std::string strip_chars(const std::string& s, const Value* chars, bool left, bool right) {
    const std::string set = (chars && !chars->undefined && chars->j.is_string())
                                ? chars->j.get<std::string>()
                                : " \t\n\r\f\v";
    budget_.charge(sat_mul(s.size(), set.size()));
    size_t b = 0, e = s.size();
    if (left)
      while (b < e && set.find(s[b]) != std::string::npos) ++b;
    if (right)
      while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
    return s.substr(b, e - b);
  }

  std::string change_case(const std::string& s, bool upper) {
    auto cps = codepoints(s);
    for (auto& c : cps) c = case_map(c, upper);
    return from_cps(cps);
  }

  // Python's str.title() (every_word) / str.capitalize().
  std::string titlecase(const std::string& s, bool every_word) {
    auto cps = codepoints(s);
    bool start = true;
    for (auto& c : cps) {
      const bool alnum = (c < 0x80 && std::isalnum(static_cast<int>(c))) || c >= 0xC0;
      c = case_map(c, start);
      start = every_word ? !alnum : false;
    }
    return from_cps(cps);
  }

  std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string out;
    size_t pos = 0;
    for (size_t m; (m = find(s, from, pos)) != std::string::npos; pos = m + from.size()) {
      out.append(s, pos, m - pos);
      out += to;
      if (out.size() > budget_.max_bytes()) str(std::move(out));  // fails
    }
    out.append(s, pos, std::string::npos);
    return out;
  }

  Value split(const std::string& s, const Value* sep, int64_t maxsplit) {
    Json parts = Json::array();
    auto add = [&](std::string part) {
      budget_.charge(kValueCost + part.size());
      parts.push_back(std::move(part));
    };
    if (sep == nullptr || sep->undefined || sep->j.is_null()) {  // split on whitespace runs
      budget_.charge(s.size());
      size_t i = 0;
      while (i < s.size()) {
        while (i < s.size() && is_space(s[i])) ++i;
        if (i >= s.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
          add(s.substr(i));
          break;
        }
        size_t j = i;
        while (j < s.size() && !is_space(s[j])) ++j;
        add(s.substr(i, j - i));
        i = j;
      }
      return json_value(std::move(parts));
    }
    const std::string d = text(sep->j);
    if (d.empty()) fail("empty separator");
    size_t pos = 0;
    for (size_t m; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                   (m = find(s, d, pos)) != std::string::npos;
         pos = m + d.size()) {
      add(s.substr(pos, m - pos));
    }
    add(s.substr(pos));
    return json_value(std::move(parts));
  }

  int64_t to_int(const Value& v) {
    if (v.j.is_number_integer()) return v.j.get<int64_t>();
    if (v.j.is_number()) {
      const double d = v.j.get<double>();
      // [-2^63, 2^63): the doubles that convert without UB.
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) fail("integer overflow");
      return static_cast<int64_t>(d);
    }
    if (v.j.is_boolean()) return v.j.get<bool>() ? 1 : 0;
    fail("expected a number, got " + repr(v.j));
  }

  // ------------------------------------------------ filters and tests

  Value filter(const Expr& e) {
    Value holder;
    const Value& v = view(*e.args[0], holder);
    std::vector<Value> args = eval_args(e, 1);
    return with_data(apply_filter(e, v, args), v.taint.any() || any_data(args));
  }

  Value apply_filter(const Expr& e, const Value& v, const std::vector<Value>& args) {
    const std::string& f = e.name;
    auto kwarg = [&](std::string_view name, size_t pos) -> const Value* {
      for (size_t i = 0; i < args.size(); ++i) {
        if (e.kwargs[i + 1] == name) return &args[i];
      }
      return pos < args.size() && e.kwargs[pos + 1].empty() ? &args[pos] : nullptr;
    };
    if (f == "trim") return str(strip_chars(output_text(v), nullptr, true, true));
    if (f == "length" || f == "count") {
      if (v.j.is_string())
        return json_value(
            Json(static_cast<int64_t>(codepoints(v.j.get_ref<const std::string&>()).size())));
      return json_value(Json(static_cast<int64_t>(v.undefined ? 0 : v.j.size())));
    }
    if (f == "tojson") return tojson(v, kwarg("indent", 0));
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
    if (f == "join") return join(v, kwarg("d", 0));
    if (f == "first" || f == "last") {
      const auto items = items_of(v);
      if (items.empty()) return Value::undef();
      return json_value(f == "first" ? items.front() : items.back());
    }
    if (f == "list") return json_value(Json(items_of(v)));
    if (f == "items") return v.j.is_object() ? dict_view(v.j, "items") : json_value(Json::array());
    if (f == "replace")
      return str(replace_all(output_text(v), output_text(args.at(0)), output_text(args.at(1))));
    if (f == "int") {
      if (!v.j.is_string()) return json_value(Json(to_int(v)));
      return json_value(Json(std::stoll(v.j.get<std::string>())));  // std::out_of_range past int64
    }
    if (f == "abs") {
      if (v.j.is_number_integer()) return v.j.get<int64_t>() < 0 ? negate(v) : v;
      if (v.j.is_number()) return json_value(Json(std::fabs(v.j.get<double>())));
      fail("abs of " + repr(v.j));
    }
    if (f == "reverse") {
      if (v.j.is_string()) {
        auto cps = codepoints(v.j.get_ref<const std::string&>());
        std::reverse(cps.begin(), cps.end());
        return str(from_cps(cps));
      }
      auto items = items_of(v);
      std::reverse(items.begin(), items.end());
      return json_value(Json(std::move(items)));
    }
    if (f == "selectattr" || f == "rejectattr") return select_attr(v, args, f == "selectattr");
    if (f == "map") {
      const Value* attr = kwarg("attribute", 99);
      if (attr == nullptr) fail("map() needs attribute=");
      Json arr = Json::array();
      for (const auto& item : items_of(v))
        arr.push_back(attribute(json_value(item), output_text(*attr)).j);
      return json_value(std::move(arr));
    }
    fail("unsupported filter '" + f + "'");
  }

  Value tojson(const Value& v, const Value* indent_arg) {
    const int64_t indent = indent_arg && !indent_arg->j.is_null() ? to_int(*indent_arg) : -1;
    if (indent > static_cast<int64_t>(budget_.max_bytes())) fail_limit("tojson indent too large");
    budget_.weight(v.j);  // rejects values nested too deeply to print
    std::string out;
    dump_json(v.j, indent, 0, budget_.max_bytes(), out);
    budget_.charge(out.size());
    return str(std::move(out));
  }

  Value join(const Value& v, const Value* sep_arg) {
    const std::string sep = sep_arg ? output_text(*sep_arg) : "";
    std::string out;
    bool first = true;
    for (const auto& item : items_of(v)) {
      if (!first) out += sep;
      first = false;
      out += text(item);
      budget_.charge(sep.size() + 1);
      if (out.size() > budget_.max_bytes()) return str(std::move(out));  // fails
    }
    return str(std::move(out));
  }

  Value select_attr(const Value& v, const std::vector<Value>& args, bool keep_matching) {
    if (args.empty()) fail("selectattr needs an attribute");
    const std::string attr = output_text(args[0]);
    Json arr = Json::array();
    for (const auto& item : items_of(v)) {
      const Value a = attribute(json_value(item), attr);
      bool match = truthy(a);
      if (args.size() >= 2) {
        const std::string t = output_text(args[1]);
        if (t == "equalto" || t == "eq" || t == "==")
          match = args.size() >= 3 && !a.undefined && equal(a, args[2]);
        else if (t == "defined")
          match = !a.undefined;
        else if (t == "undefined")
          match = a.undefined;
        else if (t == "none")
          match = !a.undefined && a.j.is_null();
        else if (t == "string")
          match = a.j.is_string();
        else
          fail("unsupported selectattr test '" + t + "'");
      }
      if (match == keep_matching) arr.push_back(item);
    }
    return json_value(std::move(arr));
  }

  bool test(const Expr& e) {
    Value holder;
    const Value& v = view(*e.args[0], holder);
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
    if (t == "odd" || t == "even") return (floor_mod(to_int(v), 2) != 0) == (t == "odd");
    if (t == "equalto" || t == "eq" || t == "sameas") {
      if (e.args.size() < 2) fail("test '" + t + "' needs an argument");
      return !v.undefined && equal(v, eval(*e.args[1]));
    }
    fail("unsupported test '" + t + "'");
  }

  // ------------------------------------------------ operators

  Value binary(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return json_value(Json(equal(l, r)));
    if (op == "!=") return json_value(Json(!equal(l, r)));
    if (op == "in" || op == "not in") {
      const bool found = contains(r, l);
      return json_value(Json(op == "in" ? found : !found));
    }
    if (op == "~") return concat(l, output_text(l), r, output_text(r));
    if (op == "+" && l.j.is_string() && r.j.is_string()) {
      return concat(l, l.j.get_ref<const std::string&>(), r, r.j.get_ref<const std::string&>());
    }
    if (op == "+" && l.j.is_array() && r.j.is_array()) {
      budget_.charge(budget_.weight(l.j) + budget_.weight(r.j));
      Json out = l.j;
      out.insert(out.end(), r.j.begin(), r.j.end());
      return with_data(json_value(std::move(out)), l.taint.any() || r.taint.any());
    }
    if (op == "*" && l.j.is_string() && r.j.is_number_integer())
      return repeat(l, r.j.get<int64_t>());
    if (!l.j.is_number() || !r.j.is_number() || l.undefined || r.undefined) {
      fail("unsupported operands for '" + op + "': " + repr(l.j) + ", " + repr(r.j));
    }
    return arithmetic(op, l.j, r.j);
  }

  // l ~ r: the data ranges of both sides, in place.
  Value concat(const Value& l, const std::string& ls, const Value& r, const std::string& rs) {
    if (ls.size() + rs.size() > budget_.max_bytes())
      fail_limit("a string grew past " + std::to_string(budget_.max_bytes()) + " bytes");
    budget_.charge(ls.size() + rs.size());
    Value out = str(ls + rs);
    out.taint = concat_taint(l, ls.size(), r, rs.size());
    return out;
  }

  Value repeat(const Value& l, int64_t n) {
    const std::string& s = l.j.get_ref<const std::string&>();
    if (n <= 0 || s.empty()) return str("");
    // Divide rather than multiply: s.size() * n can wrap.
    if (static_cast<uint64_t>(n) > budget_.max_bytes() / s.size())
      fail_limit("string repetition too large");
    budget_.charge(s.size() * static_cast<uint64_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return with_data(str(std::move(out)), l.taint.any());
  }

  Value arithmetic(const std::string& op, const Json& lj, const Json& rj) {
    const bool ints = lj.is_number_integer() && rj.is_number_integer();
    const double a = lj.get<double>(), b = rj.get<double>();
    if (op == "<") return json_value(Json(a < b));
    if (op == ">") return json_value(Json(a > b));
    if (op == "<=") return json_value(Json(a <= b));
    if (op == ">=") return json_value(Json(a >= b));
    if (ints && op != "/") {
      const int64_t x = lj.get<int64_t>(), y = rj.get<int64_t>();
      if (op == "+" || op == "-" || op == "*") return json_value(Json(checked(op[0], x, y)));
      if (y == 0) fail("division by zero");
      if (op == "//") return json_value(Json(floor_div(x, y)));
      if (op == "%") return json_value(Json(floor_mod(x, y)));
    }
    if (op == "+") return json_value(Json(a + b));
    if (op == "-") return json_value(Json(a - b));
    if (op == "*") return json_value(Json(a * b));
    if (b == 0) fail("division by zero");
    if (op == "/") return json_value(Json(a / b));
    if (op == "//") return json_value(Json(std::floor(a / b)));
    if (op == "%") return json_value(Json(std::fmod(a, b)));
    fail("unknown operator '" + op + "'");
  }

  bool contains(const Value& haystack, const Value& needle) {
    const Json& r = haystack.j;
    if (r.is_string())
      return find(r.get_ref<const std::string&>(), output_text(needle)) != std::string::npos;
    if (r.is_array()) {
      budget_.charge(budget_.weight(r));
      return std::any_of(r.begin(), r.end(), [&](const Json& x) { return x == needle.j; });
    }
    if (r.is_object()) return needle.j.is_string() && r.contains(needle.j.get<std::string>());
    return false;
  }

  // Comparing costs what walking both values costs.
  bool equal(const Value& l, const Value& r) {
    if (l.undefined || r.undefined) return l.undefined && r.undefined;
    budget_.charge(budget_.weight(l.j) + budget_.weight(r.j));
    return l.j == r.j;
  }

  Budget budget_;
  const std::vector<std::string>& trusted_strings_;
  const std::optional<int64_t> fixed_time_;
  std::vector<std::map<std::string, Value>> scopes_;
  size_t frame_ = 0;  // first scope of the running macro (0: none)
  PromptText out_;
  int64_t iterations_ = 0;  // loop iterations so far (kMaxLoopIterations)
  int eval_depth_ = 0;
  int macro_depth_ = 0;
};

}  // namespace
}  // namespace jinja_detail

Result<PromptText> JinjaTemplate::render(const nlohmann::ordered_json& context,
                                         const RenderOptions& options) const {
  try {
    jinja_detail::Renderer r(context, options);
    return r.run(root_->branches.front().second);
  } catch (const jinja_detail::LimitError& e) {
    return resource_exhausted(std::string("chat template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("chat template: out of memory");
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace hypura::tokenizer
