// Internals of the Jinja interpreter (jinja.h), shared by its parser (jinja_parse.cc)
// and renderer (jinja_render.cc): the syntax trees and the error type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja.h"

namespace hypura::tokenizer {

using Json = nlohmann::ordered_json;

namespace jinja_detail {

// Thrown inside the interpreter, turned into a Status at the API boundary.
struct JinjaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown when a render goes over one of its RenderLimits (kResourceExhausted).
struct LimitError : JinjaError {
  using JinjaError::JinjaError;
};

[[noreturn]] inline void fail(const std::string& msg) {
  throw JinjaError(msg);
}
[[noreturn]] void fail_limit(const std::string& msg);

// Limits that keep a hostile template (GGUF metadata is untrusted) from exhausting the
// stack, memory or time; work, bytes and time are in RenderLimits.
constexpr int kMaxNesting = 64;                 // expression and block nesting depth
constexpr int kMaxEvalDepth = 256;              // evaluation recursion (a + b + ... terms)
constexpr int kMaxValueDepth = 128;             // nesting of lists and dicts in a value
constexpr int64_t kMaxLoopIterations = 100000;  // per render, all loops together
constexpr int64_t kMaxRange = 100000;           // elements of range()
constexpr uint64_t kValueCost = 32;             // work units per JSON value (vs 1 per byte)

// Counts nesting on construction; fails past `limit`. Parsing recurses once per
// nesting level; evaluation also once per operator in a chain like a + b + c, hence a
// larger limit there.
class DepthGuard {
 public:
  explicit DepthGuard(int& depth, int limit = kMaxNesting) : depth_(depth) {
    if (++depth_ > limit) {
      --depth_;
      fail("template nests too deeply");
    }
  }
  ~DepthGuard() { --depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  int& depth_;
};

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// An expression tree node.
struct Expr;
using ExprPtr = std::shared_ptr<const Expr>;

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kList,
    kDict,
    kAttr,
    kIndex,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNot,
    kNeg,
    kBinary,
    kAnd,
    kOr,
    kCond
  } kind;
  Json literal;
  std::string name;                 // name, attribute, function/filter/test, operator
  std::vector<ExprPtr> args;        // operands (nullptr allowed for slice parts)
  std::vector<std::string> kwargs;  // keyword names for call args ("" = positional)
  bool negate = false;              // "is not"
};

}  // namespace jinja_detail

// A statement tree node; a template is a list of these.
struct JinjaTemplate::Node {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kBreak, kContinue, kMacro } kind;
  std::string text;                  // kText; kMacro name
  jinja_detail::ExprPtr expr;        // kOutput, kFor iterable, kSet value
  jinja_detail::ExprPtr filter;      // kFor "if" filter
  std::vector<std::string> targets;  // kFor loop variables; kSet name [, attribute];
                                     // kMacro parameters
  std::vector<std::pair<jinja_detail::ExprPtr, std::vector<std::shared_ptr<const Node>>>>
      branches;                                              // kIf
  std::vector<std::shared_ptr<const Node>> body, else_body;  // kFor; kMacro body
  std::vector<jinja_detail::ExprPtr> defaults;  // kMacro: per parameter, nullptr for none
};

namespace jinja_detail {

using Node = JinjaTemplate::Node;
using NodePtr = std::shared_ptr<const Node>;
using NodeList = std::vector<NodePtr>;

// Parses a template into statement nodes (jinja_parse.cc). Throws JinjaError.
NodeList parse_template(std::string_view source);

// Text helpers (jinja_text.cc). Builders throw LimitError past max_bytes.
// Python strings index, slice and measure by codepoint.
std::vector<uint32_t> to_cps(std::string_view s);
std::string from_cps(const std::vector<uint32_t>& cps, size_t begin = 0, size_t end = SIZE_MAX);
uint32_t case_map(uint32_t c, bool upper);
std::string python_float(double d);
std::string py_repr(const Json& j, size_t max_bytes);
std::string to_text(const Json& j, size_t max_bytes);  // str(x): strings as they are
// indent < 0: compact. REQUIRES: indent < 2^31, j nested at most kMaxValueDepth deep.
void dump_json(const Json& j, int64_t indent, size_t depth, size_t max_bytes, std::string& out);

}  // namespace jinja_detail
}  // namespace hypura::tokenizer
