// Jinja subset, parsing: lexer (template -> text and tag pieces, whitespace control
// resolved), expression tokenizer and parser (-> Expr trees), statement parser (-> Node
// trees).
#include <algorithm>
#include <cctype>
#include <charconv>

#include "tokenizer/jinja.h"
#include "tokenizer/jinja_internal.h"

namespace hypura::tokenizer {
namespace jinja_detail {
namespace {

// ---------------------------------------------------------------- lexer

struct Piece {
  enum class Kind { kText, kExpr, kStmt } kind;
  std::string text;  // literal text, or the tag's inner source
};

std::string_view trim_view(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Position of the "}}" / "%}" that closes a tag opened at `from`, skipping quoted strings.
size_t find_tag_end(std::string_view src, size_t from, char close_first) {
  char quote = 0;
  for (size_t i = from; i + 1 < src.size(); ++i) {
    const char c = src[i];
    if (quote) {
      if (c == '\\')
        ++i;
      else if (c == quote)
        quote = 0;
    } else if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == close_first && src[i + 1] == '}') {
      return i;
    }
  }
  fail("unclosed tag");
}

// Splits the template into pieces with transformers' settings: trim_blocks (drop the
// newline after a block or comment tag) and lstrip_blocks (drop spaces and tabs between
// a line start and a block or comment tag), plus explicit "-" whitespace control.
std::vector<Piece> lex(std::string_view src) {
  std::vector<Piece> pieces;
  size_t pos = 0;
  while (pos <= src.size()) {
    size_t p = pos;
    while (p + 1 < src.size() &&
           !(src[p] == '{' && (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#')))
      ++p;
    if (p + 1 >= src.size()) {
      if (pos < src.size()) pieces.push_back({Piece::Kind::kText, std::string(src.substr(pos))});
      break;
    }
    const char kind = src[p + 1];
    const bool block = kind != '{';  // statements and comments
    size_t end;
    if (kind == '#') {
      end = src.find("#}", p + 2);
      if (end == std::string_view::npos) fail("unclosed comment");
    } else {
      end = find_tag_end(src, p + 2, kind == '{' ? '}' : '%');
    }
    const bool left_trim = p + 2 < src.size() && src[p + 2] == '-';
    const bool right_trim = end > p + 2 && src[end - 1] == '-';
    std::string_view text = src.substr(pos, p - pos);
    if (left_trim) {
      while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
    } else if (block && !(p + 2 < src.size() && src[p + 2] == '+')) {
      size_t q = p;
      while (q > pos && (src[q - 1] == ' ' || src[q - 1] == '\t')) --q;
      if (q == 0 || src[q - 1] == '\n') text = src.substr(pos, q - pos);
    }
    if (!text.empty()) pieces.push_back({Piece::Kind::kText, std::string(text)});
    if (kind != '#') {
      const size_t inner_from =
          p + 2 + (left_trim || (p + 2 < src.size() && src[p + 2] == '+') ? 1 : 0);
      const size_t inner_to = end - (right_trim ? 1 : 0);
      pieces.push_back({kind == '{' ? Piece::Kind::kExpr : Piece::Kind::kStmt,
                        std::string(trim_view(src.substr(inner_from, inner_to - inner_from)))});
    }
    pos = end + 2;
    if (right_trim) {
      while (pos < src.size() && is_space(src[pos])) ++pos;
    } else if (block) {
      if (pos < src.size() && src[pos] == '\n')
        ++pos;
      else if (pos + 1 < src.size() && src[pos] == '\r' && src[pos + 1] == '\n')
        pos += 2;
    }
  }
  return pieces;
}

// ---------------------------------------------------------------- expression tokens

struct Tok {
  enum class Kind { kName, kString, kInt, kFloat, kOp, kEnd } kind;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

void append_escape(std::string& out, std::string_view s, size_t& i) {
  const char c = s[i];
  switch (c) {
    case 'n':
      out += '\n';
      break;
    case 't':
      out += '\t';
      break;
    case 'r':
      out += '\r';
      break;
    case '0':
      out += '\0';
      break;
    case 'u':
    case 'x': {
      const size_t digits = c == 'u' ? 4 : 2;
      if (i + digits >= s.size()) fail("bad escape");
      uint32_t cp = 0;
      std::from_chars(s.data() + i + 1, s.data() + i + 1 + digits, cp, 16);
      i += digits;
      // UTF-8 encode
      if (cp < 0x80) {
        out += static_cast<char>(cp);
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
      break;
    }
    default:
      out += c;
      break;  // \\ \' \" and unknown escapes
  }
}

std::vector<Tok> tokenize(std::string_view s) {
  static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "+", "-", "*",
                               "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                               "{",  "}",  ".",  ",",  ":",  "|",  "="};
  std::vector<Tok> toks;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      toks.push_back({Tok::Kind::kName, std::string(s.substr(i, j - i))});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        Tok t{Tok::Kind::kFloat, std::string(s.substr(i, j - i))};
        t.f = std::stod(t.text);
        toks.push_back(t);
      } else {
        Tok t{Tok::Kind::kInt, std::string(s.substr(i, j - i))};
        std::from_chars(s.data() + i, s.data() + j, t.i);
        toks.push_back(t);
      }
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string str;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] == '\\' && j + 1 < s.size()) {
          ++j;
          append_escape(str, s, j);
        } else {
          str += s[j];
        }
      }
      if (j >= s.size()) fail("unterminated string");
      toks.push_back({Tok::Kind::kString, str});
      i = j + 1;
    } else {
      bool matched = false;
      for (const char* op : kOps) {
        const std::string_view o(op);
        if (s.substr(i, o.size()) == o) {
          toks.push_back({Tok::Kind::kOp, std::string(o)});
          i += o.size();
          matched = true;
          break;
        }
      }
      if (!matched) fail(std::string("unexpected character '") + c + "'");
    }
  }
  toks.push_back({Tok::Kind::kEnd, ""});
  return toks;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks) : toks_(std::move(toks)) {}

  ExprPtr parse_expression() { return parse_cond(); }
  ExprPtr parse_or_level() { return parse_or(); }
  bool at_end() const { return peek().kind == Tok::Kind::kEnd; }
  const Tok& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  bool is_name(std::string_view n, size_t k = 0) const {
    return peek(k).kind == Tok::Kind::kName && peek(k).text == n;
  }
  bool is_op(std::string_view o) const { return peek().kind == Tok::Kind::kOp && peek().text == o; }
  void expect_op(std::string_view o) {
    if (!is_op(o)) fail("expected '" + std::string(o) + "' but found '" + peek().text + "'");
    ++pos_;
  }
  std::string expect_name() {
    if (peek().kind != Tok::Kind::kName) fail("expected a name, found '" + peek().text + "'");
    return toks_[pos_++].text;
  }
  void skip() { ++pos_; }

 private:
  static ExprPtr make(Expr e) { return std::make_shared<const Expr>(std::move(e)); }

  ExprPtr parse_cond() {
    DepthGuard guard(depth_);
    ExprPtr value = parse_or();
    if (is_name("if")) {
      skip();
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        skip();
        other = parse_cond();
      }
      return make({Expr::Kind::kCond, {}, "", {cond, value, other}, {}});
    }
    return value;
  }
  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    for (int links = 0; is_name("or"); check_chain(++links)) {
      skip();
      left = make({Expr::Kind::kOr, {}, "", {left, parse_and()}, {}});
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    for (int links = 0; is_name("and"); check_chain(++links)) {
      skip();
      left = make({Expr::Kind::kAnd, {}, "", {left, parse_not()}, {}});
    }
    return left;
  }
  ExprPtr parse_not() {
    DepthGuard guard(depth_);
    if (is_name("not")) {
      skip();
      return make({Expr::Kind::kNot, {}, "", {parse_not()}, {}});
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    for (int links = 0;; check_chain(++links)) {
      std::string op;
      if (peek().kind == Tok::Kind::kOp &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = peek().text;
        skip();
      } else if (is_name("in")) {
        op = "in";
        skip();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        skip();
        skip();
      } else {
        return left;
      }
      left = make({Expr::Kind::kBinary, {}, op, {left, parse_math1()}, {}});
    }
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    for (int links = 0; is_op("+") || is_op("-"); check_chain(++links)) {
      const std::string op = peek().text;
      skip();
      left = make({Expr::Kind::kBinary, {}, op, {left, parse_concat()}, {}});
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    for (int links = 0; is_op("~"); check_chain(++links)) {
      skip();
      left = make({Expr::Kind::kBinary, {}, "~", {left, parse_math2()}, {}});
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_unary();
    for (int links = 0; is_op("*") || is_op("/") || is_op("//") || is_op("%");
         check_chain(++links)) {
      const std::string op = peek().text;
      skip();
      left = make({Expr::Kind::kBinary, {}, op, {left, parse_unary()}, {}});
    }
    return left;
  }
  ExprPtr parse_unary() {
    DepthGuard guard(depth_);
    if (is_op("-")) {
      skip();
      return make({Expr::Kind::kNeg, {}, "", {parse_unary()}, {}});
    }
    return parse_filters(parse_postfix(parse_primary()));
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Tok::Kind::kName && peek(1).kind == Tok::Kind::kOp &&
          peek(1).text == "=") {
        e.kwargs.push_back(peek().text);
        skip();
        skip();
      } else {
        e.kwargs.emplace_back();
      }
      e.args.push_back(parse_expression());
      if (!is_op(")")) expect_op(",");
    }
    expect_op(")");
  }

  ExprPtr parse_primary() {
    const Tok t = peek();
    skip();
    switch (t.kind) {
      case Tok::Kind::kString: {
        std::string s = t.text;
        while (peek().kind == Tok::Kind::kString) {  // adjacent literals concatenate
          s += peek().text;
          skip();
        }
        return make({Expr::Kind::kLiteral, Json(s), "", {}, {}});
      }
      case Tok::Kind::kInt:
        return make({Expr::Kind::kLiteral, Json(t.i), "", {}, {}});
      case Tok::Kind::kFloat:
        return make({Expr::Kind::kLiteral, Json(t.f), "", {}, {}});
      case Tok::Kind::kName: {
        if (t.text == "true" || t.text == "True")
          return make({Expr::Kind::kLiteral, Json(true), "", {}, {}});
        if (t.text == "false" || t.text == "False")
          return make({Expr::Kind::kLiteral, Json(false), "", {}, {}});
        if (t.text == "none" || t.text == "None")
          return make({Expr::Kind::kLiteral, Json(nullptr), "", {}, {}});
        if (is_op("(")) {
          Expr call{Expr::Kind::kCall, {}, t.text, {nullptr}, {""}};
          parse_call_args(call);
          return make(std::move(call));
        }
        return make({Expr::Kind::kName, {}, t.text, {}, {}});
      }
      case Tok::Kind::kOp:
        if (t.text == "(") {
          ExprPtr e = parse_expression();
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          Expr list{Expr::Kind::kList, {}, "", {}, {}};
          while (!is_op("]")) {
            list.args.push_back(parse_expression());
            if (!is_op("]")) expect_op(",");
          }
          expect_op("]");
          return make(std::move(list));
        }
        if (t.text == "{") {
          Expr dict{Expr::Kind::kDict, {}, "", {}, {}};
          while (!is_op("}")) {
            dict.args.push_back(parse_expression());
            expect_op(":");
            dict.args.push_back(parse_expression());
            if (!is_op("}")) expect_op(",");
          }
          expect_op("}");
          return make(std::move(dict));
        }
        break;
      default:
        break;
    }
    fail("unexpected '" + t.text + "' in expression");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    for (int links = 0;; check_chain(++links)) {
      if (is_op(".")) {
        skip();
        const std::string attr = expect_name();
        if (is_op("(")) {
          Expr call{Expr::Kind::kCall, {}, attr, {e}, {""}};
          parse_call_args(call);
          e = make(std::move(call));
        } else {
          e = make({Expr::Kind::kAttr, {}, attr, {e}, {}});
        }
      } else if (is_op("[")) {
        skip();
        ExprPtr parts[3];
        int n = 0;
        bool slice = false;
        while (!is_op("]")) {
          if (is_op(":")) {
            skip();
            slice = true;
            if (++n > 2) fail("bad slice");
            continue;
          }
          parts[n] = parse_expression();
        }
        expect_op("]");
        if (slice) {
          e = make({Expr::Kind::kSlice, {}, "", {e, parts[0], parts[1], parts[2]}, {}});
        } else {
          if (!parts[0]) fail("empty subscript");
          e = make({Expr::Kind::kIndex, {}, "", {e, parts[0]}, {}});
        }
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    for (int links = 0;; check_chain(++links)) {
      if (is_op("|")) {
        skip();
        Expr f{Expr::Kind::kFilter, {}, expect_name(), {e}, {""}};
        if (is_op("(")) parse_call_args(f);
        e = make(std::move(f));
      } else if (is_name("is")) {
        skip();
        Expr t{Expr::Kind::kTest, {}, "", {e}, {""}};
        if (is_name("not")) {
          skip();
          t.negate = true;
        }
        t.name = expect_name();
        const bool takes_arg = t.name == "equalto" || t.name == "eq" || t.name == "sameas";
        if (is_op("(")) {
          parse_call_args(t);
        } else if (takes_arg) {
          t.args.push_back(parse_primary());  // "is equalto 'x'" / "is sameas none"
          t.kwargs.emplace_back();
        }
        e = make(std::move(t));
      } else {
        return e;
      }
    }
  }

  // Operator chains (a + b + c ...) build left-nested trees whose evaluation and
  // destruction recurse once per link: bound them like nesting.
  static void check_chain(int links) {
    if (links > kMaxEvalDepth) fail("expression too long");
  }

  std::vector<Tok> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};

class StmtParser {
 public:
  explicit StmtParser(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {}

  NodeList parse_all() {
    std::string end;
    NodeList nodes = parse_until({}, &end);
    if (!end.empty()) fail("unexpected {% " + end + " %}");
    return nodes;
  }

 private:
  // Parses nodes until a statement whose keyword is in `stops` (returned in *stop, its
  // parser left positioned after the keyword in *rest).
  NodeList parse_until(std::initializer_list<std::string_view> stops, std::string* stop) {
    DepthGuard guard(depth_);
    NodeList nodes;
    while (pos_ < pieces_.size()) {
      const Piece& p = pieces_[pos_++];
      if (p.kind == Piece::Kind::kText) {
        nodes.push_back(std::make_shared<const Node>(
            Node{Node::Kind::kText, p.text, {}, {}, {}, {}, {}, {}, {}}));
        continue;
      }
      ExprParser ep(tokenize(p.text));
      if (p.kind == Piece::Kind::kExpr) {
        Node n{Node::Kind::kOutput, "", ep.parse_expression(), {}, {}, {}, {}, {}, {}};
        if (!ep.at_end()) fail("junk after expression: " + p.text);
        nodes.push_back(std::make_shared<const Node>(std::move(n)));
        continue;
      }
      const std::string kw = ep.expect_name();
      for (auto s : stops) {
        if (kw == s) {
          *stop = kw;
          rest_ = std::make_unique<ExprParser>(std::move(ep));
          return nodes;
        }
      }
      if (auto n = parse_statement(kw, ep)) nodes.push_back(std::move(n));
    }
    if (stops.size() != 0) fail("missing {% end... %}");
    *stop = "";
    return nodes;
  }

  NodePtr parse_statement(const std::string& kw, ExprParser& ep) {
    if (kw == "if") return parse_if(ep);
    if (kw == "for") return parse_for(ep);
    if (kw == "set") return parse_set(ep);
    if (kw == "macro") return parse_macro(ep);
    if (kw == "break")
      return std::make_shared<const Node>(Node{Node::Kind::kBreak, "", {}, {}, {}, {}, {}, {}, {}});
    if (kw == "continue")
      return std::make_shared<const Node>(
          Node{Node::Kind::kContinue, "", {}, {}, {}, {}, {}, {}, {}});
    if (kw == "generation" || kw == "endgeneration") return nullptr;  // training-mask markers
    fail("unsupported statement {% " + kw + " %}");
  }

  NodePtr parse_if(ExprParser& ep) {
    Node n{Node::Kind::kIf, "", {}, {}, {}, {}, {}, {}, {}};
    ExprPtr cond = ep.parse_expression();
    for (;;) {
      std::string stop;
      NodeList body = parse_until({"elif", "else", "endif"}, &stop);
      n.branches.emplace_back(cond, std::move(body));
      if (stop == "endif") break;
      if (stop == "else") {
        NodeList else_body = parse_until({"endif"}, &stop);
        n.branches.emplace_back(nullptr, std::move(else_body));
        break;
      }
      cond = rest_->parse_expression();  // elif
    }
    return std::make_shared<const Node>(std::move(n));
  }

  NodePtr parse_for(ExprParser& ep) {
    Node n{Node::Kind::kFor, "", {}, {}, {}, {}, {}, {}, {}};
    n.targets.push_back(ep.expect_name());
    while (ep.is_op(",")) {
      ep.skip();
      n.targets.push_back(ep.expect_name());
    }
    if (!ep.is_name("in")) fail("expected 'in' in for");
    ep.skip();
    n.expr = ep.parse_or_level();
    if (ep.is_name("if")) {
      ep.skip();
      n.filter = ep.parse_expression();
    }
    std::string stop;
    n.body = parse_until({"else", "endfor"}, &stop);
    if (stop == "else") n.else_body = parse_until({"endfor"}, &stop);
    return std::make_shared<const Node>(std::move(n));
  }

  NodePtr parse_set(ExprParser& ep) {
    Node n{Node::Kind::kSet, "", {}, {}, {}, {}, {}, {}, {}};
    n.targets.push_back(ep.expect_name());
    if (ep.is_op(".")) {
      ep.skip();
      n.targets.push_back(ep.expect_name());
    }
    if (!ep.is_op("=")) fail("unsupported {% set %} form (block set)");
    ep.skip();
    n.expr = ep.parse_expression();
    return std::make_shared<const Node>(std::move(n));
  }

  // {% macro name(param, param=default, ...) %} body {% endmacro %}
  NodePtr parse_macro(ExprParser& ep) {
    Node n{Node::Kind::kMacro, ep.expect_name(), {}, {}, {}, {}, {}, {}, {}};
    ep.expect_op("(");
    while (!ep.is_op(")")) {
      const std::string param = ep.expect_name();
      if (std::find(n.targets.begin(), n.targets.end(), param) != n.targets.end())
        fail("macro '" + n.text + "' repeats parameter '" + param + "'");
      n.targets.push_back(param);
      ExprPtr dflt;
      if (ep.is_op("=")) {
        ep.skip();
        dflt = ep.parse_expression();
      } else if (!n.defaults.empty() && n.defaults.back()) {
        fail("macro '" + n.text + "': parameter '" + param + "' without default after defaults");
      }
      n.defaults.push_back(std::move(dflt));
      if (!ep.is_op(")")) ep.expect_op(",");
    }
    ep.expect_op(")");
    if (!ep.at_end()) fail("junk after {% macro " + n.text + "(...) %}");
    std::string stop;
    n.body = parse_until({"endmacro"}, &stop);
    return std::make_shared<const Node>(std::move(n));
  }

  std::vector<Piece> pieces_;
  size_t pos_ = 0;
  int depth_ = 0;
  std::unique_ptr<ExprParser> rest_;  // the stop statement's remaining tokens
};

}  // namespace

NodeList parse_template(std::string_view source) {
  return StmtParser(lex(source)).parse_all();
}

}  // namespace jinja_detail

Result<JinjaTemplate> JinjaTemplate::parse(std::string_view source) {
  try {
    using jinja_detail::Node;
    JinjaTemplate t;
    // The root is a sequence: an if-node with one always-true branch holding it all.
    Node root{Node::Kind::kIf, "", {}, {}, {}, {}, {}, {}, {}};
    root.branches.emplace_back(nullptr, jinja_detail::parse_template(source));
    t.root_ = std::make_shared<const Node>(std::move(root));
    return t;
  } catch (const jinja_detail::JinjaError& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  } catch (const std::exception& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace hypura::tokenizer
