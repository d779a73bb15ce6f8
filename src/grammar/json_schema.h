// Grammar: a JSON schema compiled into the graph of nodes the automaton (automaton.h)
// walks, so that constrained sampling (token_mask.h) only lets a model write documents
// that parse and validate.
//
// Supported (docs/SERVER.md "Structured output" lists the same):
//   type            object, array, string, number, integer, boolean, null, or a list
//   object          properties, required, additionalProperties (true, false or a schema;
//                   absent: no other keys when "properties" is given, as Ollama's grammar
//                   does, else any value), at most 64 properties per object
//   array           items (a schema, true or false), minItems, maxItems,
//                   uniqueItems false
//   string          minLength, maxLength (in characters)
//   enum, const     values of any type, written as their compact JSON text
//   anyOf, oneOf    oneOf only when its alternatives cannot match the same document
//   allOf           with one schema
//   $ref            local JSON pointers ("#", "#/$defs/X", "#/definitions/X", ...),
//                   recursion included
//   annotations     title, description, default, examples, $comment, $schema, $id,
//                   deprecated, readOnly, writeOnly, $defs, definitions (no effect)
// Any other keyword (pattern, format, minimum, ...) is an error that names it and where it
// is: a constraint is never silently dropped.
// The schema comes from a request: past 20,000 nodes, 1 MiB of enum/const text, 64 levels
// of subschemas, 64 oneOf alternatives or 1,024 alternatives of one union, it is an error.
//
// The language is narrower than the schema's where JSON allows several spellings, so that
// generation cannot wander: whitespace between tokens is nothing, one space, or a newline
// and at most 20 spaces or tabs; before the document the same; after it nothing. Numbers
// are plain (integers have no fraction or exponent; at most 18 integer digits, 16
// fraction digits, 3 exponent digits). Object keys that are not a named property contain
// no backslash escape; enum and const values are written in their compact form. Strings
// never contain a \u escape of a surrogate. Documents nest at most kMaxDepth deep.
//
// Thread-safety: a Grammar is immutable after compilation and may be shared by any number
// of threads (each with its own Matcher).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hypura::grammar {

// Frames one automaton thread may hold (the root, each open object or array, a key).
inline constexpr int kMaxDepth = 40;

enum class NodeKind : uint8_t { kObject, kArray, kString, kNumber, kInteger, kLiteral, kUnion };

inline constexpr uint32_t kUnbounded = UINT32_MAX;
inline constexpr int32_t kNoNode = -1;

struct Node {
  NodeKind kind = NodeKind::kUnion;
  // kObject: property names as they appear between the quotes (their JSON escapes
  // applied), sorted bytewise; prop_nodes[i] is the schema of prop_names[i].
  std::vector<std::string> prop_names;
  std::vector<int32_t> prop_nodes;
  uint64_t required = 0;         // bit i: prop_names[i] is required
  int32_t additional = kNoNode;  // the schema of other keys; kNoNode: none allowed
  // kArray
  int32_t items = kNoNode;  // kNoNode: no item allowed
  uint32_t min_items = 0;
  uint32_t max_items = kUnbounded;
  // kString: characters (code points)
  uint32_t min_length = 0;
  uint32_t max_length = kUnbounded;
  // kLiteral: the allowed documents' compact JSON texts, sorted bytewise, unique.
  std::vector<std::string> literals;
  // kUnion: alternatives, none of them a union (flattened at compile time).
  std::vector<int32_t> alternatives;
  // Frames a document of this node needs at least (nesting); kNever when it has none.
  int need = 1;
};

inline constexpr int kNever = 1 << 20;

struct Grammar {
  std::vector<Node> nodes;
  int32_t root = kNoNode;
};

// Compiles a JSON schema. Errors are kInvalidArgument, worded for an HTTP 400, e.g.
// `JSON schema keyword "pattern" at #/properties/name is not supported`.
Result<std::shared_ptr<const Grammar>> compile_json_schema(const nlohmann::json& schema);

// Ollama's `format: "json"` and OpenAI's `json_object`: any JSON object.
std::shared_ptr<const Grammar> any_json_object_grammar();

}  // namespace hypura::grammar
