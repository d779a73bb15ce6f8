#include "grammar/json_schema.h"

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "grammar/automaton.h"

namespace hypura::grammar {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxNodes = 20000;
constexpr size_t kMaxLiteralBytes = 1 << 20;
constexpr size_t kMaxProps = 64;
constexpr int kMaxSchemaDepth = 64;        // nesting of subschemas and $ref chains while compiling
constexpr size_t kMaxOneOf = 64;           // alternatives compared pairwise
constexpr size_t kMaxAlternatives = 1024;  // of a union once flattened: each is tried per value

bool is_annotation(std::string_view key) {
  static const std::set<std::string_view> kAnnotations = {
      "title", "description", "default",  "examples",  "$comment", "$schema",
      "$id",   "deprecated",  "readOnly", "writeOnly", "$defs",    "definitions"};
  return kAnnotations.count(key) != 0;
}

bool is_supported(std::string_view key) {
  static const std::set<std::string_view> kKeywords = {
      "type",      "properties", "required", "additionalProperties",
      "items",     "minItems",   "maxItems", "uniqueItems",
      "minLength", "maxLength",  "enum",     "const",
      "anyOf",     "oneOf",      "allOf",    "$ref"};
  return kKeywords.count(key) != 0 || is_annotation(key);
}

// A JSON value as it is written in a document: compact, its strings' escapes applied.
std::string compact(const json& v) {
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A property name as it appears between a key's quotes.
std::string key_text(const std::string& name) {
  const std::string quoted = compact(json(name));
  return quoted.substr(1, quoted.size() - 2);
}

std::string child_path(const std::string& path, std::string_view key) {
  std::string p = path + "/";
  for (char c : key) {  // JSON pointer escapes
    if (c == '~') {
      p += "~0";
    } else if (c == '/') {
      p += "~1";
    } else {
      p += c;
    }
  }
  return p;
}

Status error_at(const std::string& path, const std::string& what) {
  return invalid_argument("JSON schema at " + path + ": " + what);
}

Status unsupported_keyword(const std::string& path, std::string_view key,
                           std::string_view why = "") {
  return invalid_argument("JSON schema keyword \"" + std::string(key) + "\" at " + path +
                          " is not supported" + std::string(why));
}

// The JSON types a node's documents may have, as bits.
enum TypeBits : uint32_t {
  kTObject = 1,
  kTArray = 2,
  kTString = 4,
  kTInteger = 8,
  kTFraction = 16,
  kTBool = 32,
  kTNull = 64
};

uint32_t literal_type(const std::string& text) {
  switch (text[0]) {
    case '{':
      return kTObject;
    case '[':
      return kTArray;
    case '"':
      return kTString;
    case 't':
    case 'f':
      return kTBool;
    case 'n':
      return kTNull;
    default:  // a number: 1.0 counts as an integer to a validator, so both
      return text.find_first_of(".eE") == std::string::npos ? kTInteger : kTInteger | kTFraction;
  }
}

class Compiler {
 public:
  explicit Compiler(const json& doc) : doc_(doc) {}

  Result<std::shared_ptr<const Grammar>> run();
  Result<int32_t> any();

 private:
  Result<int32_t> compile(const json& s, const std::string& path, int depth);
  Result<int32_t> compile_keywords(const json& s, const std::string& path, int depth);
  Result<int32_t> compile_ref(const json& ref, const std::string& path, int depth);
  Result<int32_t> compile_union(const json& s, const char* key, const std::string& path, int depth);
  Result<int32_t> compile_enum(const json& s, const std::string& path, int depth);
  Result<int32_t> compile_type(const std::string& type, const json& s, const std::string& path,
                               int depth);
  Result<int32_t> compile_object(const json& s, const std::string& path, int depth);
  Result<int32_t> compile_array(const json& s, const std::string& path, int depth);
  Result<int32_t> compile_subschema_or_bool(const json* v, const std::string& path, int depth);
  Result<int32_t> add(Node n);
  Result<int32_t> literal(std::vector<std::string> texts);

  void flatten_unions();
  void compute_need();
  bool accepts(int32_t node, const std::string& text) const;
  void filter_literals();
  uint32_t type_bits(int32_t node, int depth) const;
  bool disjoint(int32_t a, int32_t b, int depth) const;
  Status check_one_ofs() const;

  const json& doc_;
  Grammar g_;
  std::map<std::string, int32_t> refs_;  // $ref -> its node (placeholder while compiling)
  int32_t any_ = kNoNode;
  size_t literal_bytes_ = 0;
  struct OneOf {
    std::string path;
    std::vector<int32_t> alternatives;
  };
  std::vector<OneOf> one_ofs_;
  std::vector<std::pair<int32_t, int32_t>> filters_;  // literal node, schema its values must match
  mutable std::unique_ptr<std::array<State, 3>> scratch_;  // accepts()' states, allocated once
};

Result<int32_t> Compiler::add(Node n) {
  if (g_.nodes.size() >= kMaxNodes) {
    return invalid_argument("JSON schema is too large (more than " + std::to_string(kMaxNodes) +
                            " nodes)");
  }
  g_.nodes.push_back(std::move(n));
  return static_cast<int32_t>(g_.nodes.size() - 1);
}

Result<int32_t> Compiler::literal(std::vector<std::string> texts) {
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  for (const std::string& t : texts) literal_bytes_ += t.size();
  if (literal_bytes_ > kMaxLiteralBytes) {
    return invalid_argument("JSON schema enum/const values are larger than " +
                            std::to_string(kMaxLiteralBytes) + " bytes");
  }
  Node n;
  n.kind = NodeKind::kLiteral;
  n.literals = std::move(texts);
  return add(std::move(n));
}

// Any JSON value: a union of any object, any array, a string, a number, true/false/null.
Result<int32_t> Compiler::any() {
  if (any_ != kNoNode) return any_;
  HYPURA_ASSIGN_OR_RETURN(any_, add(Node{}));
  Node obj;
  obj.kind = NodeKind::kObject;
  obj.additional = any_;
  Node arr;
  arr.kind = NodeKind::kArray;
  arr.items = any_;
  Node str;
  str.kind = NodeKind::kString;
  Node num;
  num.kind = NodeKind::kNumber;
  std::vector<int32_t> alts;
  for (Node* n : {&obj, &arr, &str, &num}) {
    HYPURA_ASSIGN_OR_RETURN(int32_t id, add(std::move(*n)));
    alts.push_back(id);
  }
  HYPURA_ASSIGN_OR_RETURN(int32_t lit, literal({"false", "null", "true"}));
  alts.push_back(lit);
  g_.nodes[any_].alternatives = std::move(alts);
  return any_;
}

Result<int32_t> Compiler::compile(const json& s, const std::string& path, int depth) {
  if (depth > kMaxSchemaDepth)
    return error_at(path, "nests deeper than " + std::to_string(kMaxSchemaDepth));
  if (s.is_boolean()) {
    if (s.get<bool>()) return any();
    return add(Node{});  // false: a union of nothing
  }
  if (!s.is_object()) return error_at(path, "a schema must be an object or a boolean");
  for (const auto& [key, value] : s.items()) {
    if (!is_supported(key)) return unsupported_keyword(path, key);
  }
  return compile_keywords(s, path, depth);
}

// The keywords of s other than annotations and `except`.
std::vector<std::string> constraint_keys(const json& s,
                                         std::initializer_list<std::string_view> except = {}) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : s.items()) {
    if (is_annotation(key) || std::find(except.begin(), except.end(), key) != except.end())
      continue;
    keys.push_back(key);
  }
  return keys;
}

Result<int32_t> Compiler::compile_keywords(const json& s, const std::string& path, int depth) {
  for (const char* alone : {"$ref", "allOf", "anyOf", "oneOf"}) {
    if (!s.contains(alone)) continue;
    for (const std::string& other : constraint_keys(s, {alone})) {
      return unsupported_keyword(path, other, std::string(" beside \"") + alone + "\"");
    }
  }
  if (s.contains("$ref")) return compile_ref(s["$ref"], path, depth);
  if (s.contains("allOf")) {
    const json& all = s["allOf"];
    if (!all.is_array() || all.size() != 1) {
      return unsupported_keyword(path, "allOf", " (only with one schema)");
    }
    return compile(all[0], child_path(path, "allOf") + "/0", depth + 1);
  }
  if (s.contains("anyOf")) return compile_union(s, "anyOf", path, depth);
  if (s.contains("oneOf")) return compile_union(s, "oneOf", path, depth);
  if (s.contains("enum") || s.contains("const")) return compile_enum(s, path, depth);
  if (s.contains("uniqueItems") &&
      !(s["uniqueItems"].is_boolean() && !s["uniqueItems"].get<bool>())) {
    return unsupported_keyword(path, "uniqueItems", " (only false)");
  }
  const json* type = s.contains("type") ? &s["type"] : nullptr;
  if (type == nullptr) {
    // No type: the keywords say which one is meant (a narrower language is still valid).
    for (const char* k : {"properties", "required", "additionalProperties"}) {
      if (s.contains(k)) return compile_type("object", s, path, depth);
    }
    for (const char* k : {"items", "minItems", "maxItems"}) {
      if (s.contains(k)) return compile_type("array", s, path, depth);
    }
    for (const char* k : {"minLength", "maxLength"}) {
      if (s.contains(k)) return compile_type("string", s, path, depth);
    }
    return any();
  }
  if (type->is_string()) return compile_type(type->get<std::string>(), s, path, depth);
  if (!type->is_array() || type->empty())
    return error_at(path, "\"type\" must be a string or a non-empty array");
  Node u;
  for (const json& t : *type) {
    if (!t.is_string()) return error_at(path, "\"type\" must hold strings");
    HYPURA_ASSIGN_OR_RETURN(int32_t alt, compile_type(t.get<std::string>(), s, path, depth));
    u.alternatives.push_back(alt);
  }
  return add(std::move(u));
}

// Resolves a local JSON pointer ("#", "#/$defs/Name") in the schema document.
const json* resolve_pointer(const json& doc, const std::string& pointer) {
  const json* at = &doc;
  size_t i = 1;  // after '#'
  if (i < pointer.size() && pointer[i] != '/') return nullptr;
  while (i < pointer.size()) {
    const size_t next = std::min(pointer.find('/', i + 1), pointer.size());
    std::string token;
    for (size_t k = i + 1; k < next; ++k) {
      if (pointer[k] == '~' && k + 1 < next && (pointer[k + 1] == '0' || pointer[k + 1] == '1')) {
        token += pointer[++k] == '0' ? '~' : '/';
      } else {
        token += pointer[k];
      }
    }
    if (at->is_object()) {
      auto it = at->find(token);
      if (it == at->end()) return nullptr;
      at = &*it;
    } else if (at->is_array()) {
      if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos ||
          token.size() > 9 || std::stoul(token) >= at->size()) {
        return nullptr;
      }
      at = &(*at)[std::stoul(token)];
    } else {
      return nullptr;
    }
    i = next;
  }
  return at;
}

Result<int32_t> Compiler::compile_ref(const json& ref, const std::string& path, int depth) {
  if (!ref.is_string()) return error_at(path, "\"$ref\" must be a string");
  const std::string& target = ref.get_ref<const std::string&>();
  if (auto it = refs_.find(target); it != refs_.end()) return it->second;
  if (target.empty() || target[0] != '#') {
    return unsupported_keyword(path, "$ref", " (only local references such as \"#/$defs/Name\")");
  }
  const json* schema = resolve_pointer(doc_, target);
  if (schema == nullptr)
    return error_at(path, "\"$ref\" \"" + target + "\" names nothing in the schema");
  // A placeholder first, so that recursive references find it; it becomes an alias.
  HYPURA_ASSIGN_OR_RETURN(int32_t placeholder, add(Node{}));
  refs_[target] = placeholder;
  HYPURA_ASSIGN_OR_RETURN(int32_t node, compile(*schema, target, depth + 1));
  g_.nodes[placeholder].alternatives = {node};
  return placeholder;
}

Result<int32_t> Compiler::compile_union(const json& s, const char* key, const std::string& path,
                                        int depth) {
  const json& alts = s[key];
  if (!alts.is_array() || alts.empty())
    return error_at(path, std::string("\"") + key + "\" must be a non-empty array");
  Node u;
  for (size_t i = 0; i < alts.size(); ++i) {
    HYPURA_ASSIGN_OR_RETURN(
        int32_t alt, compile(alts[i], child_path(path, key) + "/" + std::to_string(i), depth + 1));
    u.alternatives.push_back(alt);
  }
  if (std::string_view(key) == "oneOf") {
    if (alts.size() > kMaxOneOf) {
      return unsupported_keyword(path, key,
                                 " with more than " + std::to_string(kMaxOneOf) + " alternatives");
    }
    one_ofs_.push_back({child_path(path, key), u.alternatives});
  }
  return add(std::move(u));
}

Result<int32_t> Compiler::compile_enum(const json& s, const std::string& path, int depth) {
  std::vector<std::string> texts;
  if (s.contains("enum")) {
    const json& values = s["enum"];
    if (!values.is_array()) return error_at(path, "\"enum\" must be an array");
    for (const json& v : values) texts.push_back(compact(v));
  }
  if (s.contains("const")) {
    const std::string c = compact(s["const"]);
    if (s.contains("enum") && std::find(texts.begin(), texts.end(), c) == texts.end()) {
      texts.clear();
    } else {
      texts = {c};
    }
  }
  HYPURA_ASSIGN_OR_RETURN(int32_t lit, literal(std::move(texts)));
  // Other keywords beside enum/const: only the values that also satisfy them are kept.
  if (!constraint_keys(s, {"enum", "const"}).empty()) {
    json rest = s;
    rest.erase("enum");
    rest.erase("const");
    HYPURA_ASSIGN_OR_RETURN(int32_t filter, compile_keywords(rest, path, depth));
    filters_.push_back({lit, filter});
  }
  return lit;
}

// A count keyword (minItems, maxLength, ...): a non-negative integer.
Status get_count(const json& s, const char* key, const std::string& path, uint32_t* out) {
  if (!s.contains(key)) return Status::ok();
  const json& v = s[key];
  if (!v.is_number() || v.get<double>() < 0 ||
      v.get<double>() != static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
    return error_at(path, std::string("\"") + key + "\" must be a non-negative integer");
  }
  *out = static_cast<uint32_t>(std::min(v.get<double>(), static_cast<double>(kUnbounded - 1)));
  return Status::ok();
}

Result<int32_t> Compiler::compile_subschema_or_bool(const json* v, const std::string& path,
                                                    int depth) {
  if (v == nullptr) return any();
  if (v->is_boolean() && !v->get<bool>()) return kNoNode;
  return compile(*v, path, depth + 1);
}

Result<int32_t> Compiler::compile_object(const json& s, const std::string& path, int depth) {
  Node n;
  n.kind = NodeKind::kObject;
  // additionalProperties absent beside "properties": no other keys, as Ollama's and
  // llama.cpp's grammars do (a narrower language, so documents still validate): otherwise a
  // small model fills the object with keys of its own before the ones asked for.
  if (s.contains("additionalProperties") || !s.contains("properties")) {
    HYPURA_ASSIGN_OR_RETURN(
        n.additional, compile_subschema_or_bool(
                          s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr,
                          child_path(path, "additionalProperties"), depth));
  }
  std::map<std::string, int32_t> props;  // key text -> schema, sorted bytewise
  if (s.contains("properties")) {
    const json& p = s["properties"];
    if (!p.is_object()) return error_at(path, "\"properties\" must be an object");
    for (const auto& [name, sub] : p.items()) {
      HYPURA_ASSIGN_OR_RETURN(
          int32_t node, compile(sub, child_path(child_path(path, "properties"), name), depth + 1));
      props[key_text(name)] = node;
    }
  }
  std::set<std::string> required;
  if (s.contains("required")) {
    const json& r = s["required"];
    if (!r.is_array()) return error_at(path, "\"required\" must be an array of strings");
    for (const json& name : r) {
      if (!name.is_string()) return error_at(path, "\"required\" must be an array of strings");
      const std::string text = key_text(name.get<std::string>());
      if (!props.count(text)) {
        if (n.additional == kNoNode) {
          return error_at(path, "required property " + compact(name) +
                                    " is not in \"properties\" and additionalProperties is false");
        }
        props[text] = n.additional;  // required, and held to the additional schema
      }
      required.insert(text);
    }
  }
  if (props.size() > kMaxProps) {
    return error_at(path,
                    "more than " + std::to_string(kMaxProps) + " properties are not supported");
  }
  for (const auto& [text, node] : props) {
    if (required.count(text)) n.required |= uint64_t{1} << n.prop_names.size();
    n.prop_names.push_back(text);
    n.prop_nodes.push_back(node);
  }
  return add(std::move(n));
}

Result<int32_t> Compiler::compile_array(const json& s, const std::string& path, int depth) {
  Node n;
  n.kind = NodeKind::kArray;
  const json* items = s.contains("items") ? &s["items"] : nullptr;
  if (items != nullptr && items->is_array()) {
    return unsupported_keyword(path, "items", " as an array (tuples; use one schema)");
  }
  HYPURA_ASSIGN_OR_RETURN(n.items,
                          compile_subschema_or_bool(items, child_path(path, "items"), depth));
  HYPURA_RETURN_IF_ERROR(get_count(s, "minItems", path, &n.min_items));
  HYPURA_RETURN_IF_ERROR(get_count(s, "maxItems", path, &n.max_items));
  return add(std::move(n));
}

Result<int32_t> Compiler::compile_type(const std::string& type, const json& s,
                                       const std::string& path, int depth) {
  if (type == "object") return compile_object(s, path, depth);
  if (type == "array") return compile_array(s, path, depth);
  if (type == "boolean") return literal({"false", "true"});
  if (type == "null") return literal({"null"});
  Node n;
  if (type == "string") {
    n.kind = NodeKind::kString;
    HYPURA_RETURN_IF_ERROR(get_count(s, "minLength", path, &n.min_length));
    HYPURA_RETURN_IF_ERROR(get_count(s, "maxLength", path, &n.max_length));
  } else if (type == "number") {
    n.kind = NodeKind::kNumber;
  } else if (type == "integer") {
    n.kind = NodeKind::kInteger;
  } else {
    return error_at(path, "unknown type \"" + type + "\"");
  }
  return add(std::move(n));
}

// Unions hold no unions: each alternative that is one is replaced by its own, recursively
// (a union reaching itself adds nothing).
void Compiler::flatten_unions() {
  std::vector<std::vector<int32_t>> flat(g_.nodes.size());
  for (size_t u = 0; u < g_.nodes.size(); ++u) {
    if (g_.nodes[u].kind != NodeKind::kUnion) continue;
    std::vector<uint8_t> seen(g_.nodes.size());
    std::vector<int32_t> todo = {static_cast<int32_t>(u)};
    seen[u] = 1;
    while (!todo.empty()) {
      const int32_t at = todo.back();
      todo.pop_back();
      for (int32_t alt : g_.nodes[at].alternatives) {
        if (seen[alt]) continue;
        seen[alt] = 1;
        if (g_.nodes[alt].kind == NodeKind::kUnion) {
          todo.push_back(alt);
        } else {
          flat[u].push_back(alt);
        }
      }
    }
    std::sort(flat[u].begin(), flat[u].end());
  }
  for (size_t u = 0; u < g_.nodes.size(); ++u) {
    if (g_.nodes[u].kind == NodeKind::kUnion) g_.nodes[u].alternatives = std::move(flat[u]);
  }
}

// need: the fewest frames a document of each node takes, a least fixpoint (a node whose
// every document would recurse forever keeps kNever). Values past kMaxDepth are as good as
// kNever, so kMaxDepth + 3 passes reach the fixpoint.
void Compiler::compute_need() {
  for (Node& n : g_.nodes) n.need = kNever;
  const auto cap = [](int v) { return v > kMaxDepth ? kNever : v; };
  for (int pass = 0; pass < kMaxDepth + 3; ++pass) {
    bool changed = false;
    for (Node& n : g_.nodes) {
      int need = kNever;
      switch (n.kind) {
        case NodeKind::kString:
          need = n.min_length <= n.max_length ? 1 : kNever;
          break;
        case NodeKind::kNumber:
        case NodeKind::kInteger:
          need = 1;
          break;
        case NodeKind::kLiteral:
          need = n.literals.empty() ? kNever : 1;
          break;
        case NodeKind::kArray:
          if (n.min_items > n.max_items) break;
          need = n.min_items == 0 ? 1
                                  : (n.items == kNoNode ? kNever : cap(1 + g_.nodes[n.items].need));
          break;
        case NodeKind::kObject: {
          int inner = 1;  // the key frame
          for (size_t i = 0; i < n.prop_nodes.size(); ++i) {
            if ((n.required >> i) & 1) inner = std::max(inner, g_.nodes[n.prop_nodes[i]].need);
          }
          need = cap(1 + inner);
          break;
        }
        case NodeKind::kUnion:
          for (int32_t alt : n.alternatives) need = std::min(need, g_.nodes[alt].need);
          break;
      }
      if (need < n.need) {
        n.need = need;
        changed = true;
      }
    }
    if (!changed) break;
  }
}

bool Compiler::accepts(int32_t node, const std::string& text) const {
  if (!scratch_) scratch_ = std::make_unique<std::array<State, 3>>();
  std::array<State, 3>* states = scratch_.get();
  initial_state(g_, node, &(*states)[0]);
  const State* after = nullptr;
  return step_bytes(g_, (*states)[0], text, &(*states)[1], &(*states)[2], &after) &&
         accepts_end(g_, *after, after == &(*states)[1] ? &(*states)[2] : &(*states)[1]);
}

void Compiler::filter_literals() {
  for (const auto& entry : filters_) {
    // Not a structured binding: lambdas may not capture those before C++20 in clang 15.
    const auto& filter = entry.second;
    std::vector<std::string>& texts = g_.nodes[entry.first].literals;
    texts.erase(std::remove_if(texts.begin(), texts.end(),
                               [&](const std::string& t) { return !accepts(filter, t); }),
                texts.end());
  }
}

uint32_t Compiler::type_bits(int32_t node, int depth) const {
  const Node& n = g_.nodes[node];
  switch (n.kind) {
    case NodeKind::kObject:
      return kTObject;
    case NodeKind::kArray:
      return kTArray;
    case NodeKind::kString:
      return kTString;
    case NodeKind::kNumber:
      return kTInteger | kTFraction;
    case NodeKind::kInteger:
      return kTInteger;
    case NodeKind::kLiteral: {
      uint32_t bits = 0;
      for (const std::string& t : n.literals) bits |= literal_type(t);
      return bits;
    }
    case NodeKind::kUnion: {
      uint32_t bits = 0;
      for (int32_t alt : n.alternatives) bits |= type_bits(alt, depth + 1);
      return bits;
    }
  }
  return 0;
}

// Whether no document matches both nodes. Conservative: false when unsure.
bool Compiler::disjoint(int32_t a, int32_t b, int depth) const {
  if (depth > kMaxSchemaDepth) return false;
  if ((type_bits(a, 0) & type_bits(b, 0)) == 0) return true;
  const Node& na = g_.nodes[a];
  const Node& nb = g_.nodes[b];
  if (na.kind == NodeKind::kUnion || nb.kind == NodeKind::kUnion) {
    const Node& u = na.kind == NodeKind::kUnion ? na : nb;
    const int32_t other = na.kind == NodeKind::kUnion ? b : a;
    return std::all_of(u.alternatives.begin(), u.alternatives.end(),
                       [&](int32_t alt) { return disjoint(alt, other, depth + 1); });
  }
  if (na.kind == NodeKind::kLiteral || nb.kind == NodeKind::kLiteral) {
    const Node& lit = na.kind == NodeKind::kLiteral ? na : nb;
    const int32_t other = na.kind == NodeKind::kLiteral ? b : a;
    const Node& no = g_.nodes[other];
    for (const std::string& t : lit.literals) {
      if ((literal_type(t) & type_bits(other, 0)) == 0) continue;
      // Strings are exact both ways; numbers (1 == 1.0) and containers are not compared.
      if (literal_type(t) != kTString) return false;
      if (no.kind == NodeKind::kString && !accepts(other, t)) continue;
      if (no.kind == NodeKind::kLiteral &&
          !std::binary_search(no.literals.begin(), no.literals.end(), t))
        continue;
      return false;
    }
    return true;
  }
  if (na.kind == NodeKind::kObject && nb.kind == NodeKind::kObject) {
    // A discriminator: a property both require whose schemas are disjoint, or one that
    // one requires and the other forbids.
    for (size_t i = 0; i < na.prop_names.size(); ++i) {
      if (!((na.required >> i) & 1)) continue;
      auto it = std::lower_bound(nb.prop_names.begin(), nb.prop_names.end(), na.prop_names[i]);
      if (it == nb.prop_names.end() || *it != na.prop_names[i]) {
        if (nb.additional == kNoNode) return true;
        continue;
      }
      const size_t j = static_cast<size_t>(it - nb.prop_names.begin());
      if (((nb.required >> j) & 1) && disjoint(na.prop_nodes[i], nb.prop_nodes[j], depth + 1))
        return true;
    }
    for (size_t j = 0; j < nb.prop_names.size(); ++j) {
      if (((nb.required >> j) & 1) && na.additional == kNoNode &&
          !std::binary_search(na.prop_names.begin(), na.prop_names.end(), nb.prop_names[j])) {
        return true;
      }
    }
  }
  return false;
}

Status Compiler::check_one_ofs() const {
  for (const OneOf& o : one_ofs_) {
    for (size_t i = 0; i < o.alternatives.size(); ++i) {
      for (size_t j = i + 1; j < o.alternatives.size(); ++j) {
        if (!disjoint(o.alternatives[i], o.alternatives[j], 0)) {
          return unsupported_keyword(o.path, "oneOf",
                                     " when its alternatives " + std::to_string(i) + " and " +
                                         std::to_string(j) +
                                         " may match the same document (anyOf is supported)");
        }
      }
    }
  }
  return Status::ok();
}

Result<std::shared_ptr<const Grammar>> Compiler::run() {
  HYPURA_ASSIGN_OR_RETURN(g_.root, compile(doc_, "#", 0));
  flatten_unions();
  for (const Node& n : g_.nodes) {
    if (n.kind == NodeKind::kUnion && n.alternatives.size() > kMaxAlternatives) {
      return invalid_argument(
          "JSON schema has a union (anyOf, oneOf, type list, enum beside them) of more than " +
          std::to_string(kMaxAlternatives) + " alternatives");
    }
  }
  compute_need();
  filter_literals();
  compute_need();
  HYPURA_RETURN_IF_ERROR(check_one_ofs());
  if (g_.nodes[g_.root].need + 1 > kMaxDepth) {
    return invalid_argument("JSON schema has no document that nests at most " +
                            std::to_string(kMaxDepth - 1) +
                            " levels deep (a required property or item recurses forever, or no "
                            "value can satisfy it)");
  }
  return std::shared_ptr<const Grammar>(std::make_shared<Grammar>(std::move(g_)));
}

}  // namespace

Result<std::shared_ptr<const Grammar>> compile_json_schema(const json& schema) {
  return Compiler(schema).run();
}

std::shared_ptr<const Grammar> any_json_object_grammar() {
  static const std::shared_ptr<const Grammar> kGrammar = [] {
    Result<std::shared_ptr<const Grammar>> g = compile_json_schema(json{{"type", "object"}});
    assert(g.is_ok());
    return *g;
  }();
  return kGrammar;
}

}  // namespace hypura::grammar
