// The schema compiler and the automaton against documents and non-documents.
#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "grammar/automaton.h"

namespace hypura::grammar {
namespace {

using json = nlohmann::json;

std::shared_ptr<const Grammar> compile_ok(const json& schema) {
  Result<std::shared_ptr<const Grammar>> g = compile_json_schema(schema);
  EXPECT_TRUE(g.is_ok()) << schema.dump() << ": " << g.status().message();
  return g.is_ok() ? *g : nullptr;
}

// Whether the automaton takes `doc` whole: every byte, then the end of input.
bool matches(const Grammar& g, std::string_view doc) {
  auto s = std::make_unique<std::array<State, 3>>();
  initial_state(g, g.root, &(*s)[0]);
  const State* after = nullptr;
  if (!step_bytes(g, (*s)[0], doc, &(*s)[1], &(*s)[2], &after)) return false;
  return accepts_end(g, *after, after == &(*s)[1] ? &(*s)[2] : &(*s)[1]);
}

// Whether `prefix` may begin a document.
bool prefix_ok(const Grammar& g, std::string_view prefix) {
  auto s = std::make_unique<std::array<State, 3>>();
  initial_state(g, g.root, &(*s)[0]);
  const State* after = nullptr;
  return step_bytes(g, (*s)[0], prefix, &(*s)[1], &(*s)[2], &after);
}

struct Case {
  const char* doc;
  bool valid;
};

void expect_cases(const json& schema, std::initializer_list<Case> cases) {
  auto g = compile_ok(schema);
  ASSERT_NE(g, nullptr);
  for (const Case& c : cases) {
    EXPECT_EQ(matches(*g, c.doc), c.valid) << schema.dump() << " on " << c.doc;
  }
}

TEST(JsonSchema, AnyObject) {
  auto g = any_json_object_grammar();
  for (const char* doc :
       {R"({})", R"({"a":1})", R"({"a": [1, 2.5, -3e+2, "x", true, false, null, {}]})",
        "{\n  \"k\": {\"n\": {\"m\": []}},\n  \"s\": \"\\u00e9\\n\\\"\"\n}", R"({"é": "ü€𝄞"})"}) {
    EXPECT_TRUE(matches(*g, doc)) << doc;
  }
  for (const char* doc : {"",
                          "[]",
                          "1",
                          R"("a")",
                          R"({"a":1,})",
                          R"({"a" 1})",
                          R"({a:1})",
                          R"({"a":01})",
                          R"({"a":1.})",
                          R"({"a":.5})",
                          R"({"a":tru})",
                          R"({"a":1}x)",
                          R"({"a":1} )",
                          " {}",
                          R"({"a":"\x"})",
                          "{\"a\":\"\x01\"}",
                          R"({"a\u0062":1})",
                          R"({"a":"\ud800"})",
                          "{\"a\":\"\xc0\xaf\"}",
                          "{\"a\":\"\xed\xa0\x80\"}",
                          "{\"a\":\"\xf4\x90\x80\x80\"}",
                          "{\"a\":\"\xe2\x82\"}"}) {
    EXPECT_FALSE(matches(*g, doc)) << doc;
  }
}

TEST(JsonSchema, Whitespace) {
  auto g = any_json_object_grammar();
  EXPECT_TRUE(matches(*g, "{ \"a\" : 1 , \"b\" :2 }"));
  EXPECT_TRUE(matches(*g, "{\n\t\t\"a\": 1\n}"));
  EXPECT_TRUE(matches(*g, "{\n" + std::string(20, ' ') + "\"a\": 1}"));
  EXPECT_FALSE(matches(*g, "{\n" + std::string(21, ' ') + "\"a\": 1}"));  // bounded
  EXPECT_FALSE(matches(*g, "{  \"a\": 1}"));                              // two spaces
  EXPECT_FALSE(matches(*g, "{\n\n\"a\": 1}"));
  EXPECT_FALSE(matches(*g, "{\t\"a\": 1}"));
}

TEST(JsonSchema, ObjectProperties) {
  const json schema = json::parse(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name", "age"], "additionalProperties": false})");
  expect_cases(schema, {{R"({"name":"Ann","age":31})", true},
                        {R"({"age": 31, "name": "Ann", "tags": ["a", "b"]})", true},
                        {R"({"name":"Ann"})", false},                    // age missing
                        {R"({"name":"Ann","age":31.5})", false},         // not an integer
                        {R"({"name":"Ann","age":31,"x":1})", false},     // additional
                        {R"({"name":"Ann","age":31,"age":32})", false},  // duplicate
                        {R"({"name":1,"age":31})", false},
                        {R"({"name":"Ann","age":31,"tags":[1]})", false}});
  auto g = compile_ok(schema);
  EXPECT_TRUE(prefix_ok(*g, R"({"na)"));
  EXPECT_FALSE(prefix_ok(*g, R"({"nx)"));                            // no such property
  EXPECT_FALSE(prefix_ok(*g, R"({"name":"A","name)"));               // used
  EXPECT_FALSE(prefix_ok(*g, R"({"name":"A","age":1,"tags":[],)"));  // nothing left to add
}

TEST(JsonSchema, AdditionalProperties) {
  // Absent beside "properties": no other keys (as Ollama's grammar); true: any.
  expect_cases(json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})"),
               {{R"({"a":1})", true}, {R"({"a":1,"b":"x"})", false}});
  expect_cases(
      json::parse(
          R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": true})"),
      {{R"({"a":1,"b":"x"})", true},
       {R"({"b":[{}]})", true},
       {R"({"a":"x"})", false},
       {R"({"a":1,"a":2})", false},
       {R"({"a\\b":1})", false}});
  expect_cases(json::parse(R"({"type": "object", "additionalProperties": {"type": "boolean"}})"),
               {{R"({"x":true,"y":false})", true}, {R"({"x":1})", false}});
  // A required name outside "properties" follows additionalProperties.
  expect_cases(
      json::parse(
          R"({"type": "object", "required": ["k"], "additionalProperties": {"type": "null"}})"),
      {{R"({"k":null})", true}, {R"({})", false}, {R"({"k":1})", false}});
}

TEST(JsonSchema, Arrays) {
  expect_cases(
      json::parse(
          R"({"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3})"),
      {{"[1]", true},
       {"[1, 2.5, -0]", true},
       {"[]", false},
       {"[1,2,3,4]", false},
       {"[1,]", false},
       {R"(["1"])", false}});
  expect_cases(json::parse(R"({"type": "array", "items": false})"), {{"[]", true}, {"[1]", false}});
  expect_cases(json::parse(R"({"type": "array"})"), {{R"([1, "a", [null]])", true}});
}

TEST(JsonSchema, Strings) {
  expect_cases(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"),
               {{R"("ab")", true},
                {R"("abc")", true},
                {R"("a")", false},
                {R"("abcd")", false},
                {R"("é€𝄞")", true},
                {R"("\n\t\"")", true},
                {R"("\u00e9\u20ac")", true},
                {R"("é")", false}});
}

TEST(JsonSchema, Numbers) {
  expect_cases(json{{"type", "integer"}}, {{"0", true},
                                           {"-12", true},
                                           {"1.0", false},
                                           {"1e3", false},
                                           {"-", false},
                                           {"00", false},
                                           {"+1", false},
                                           {"123456789012345678", true},
                                           {"1234567890123456789", false}});
  expect_cases(json{{"type", "number"}}, {{"0.5", true},
                                          {"-1.25E-3", true},
                                          {"1e+300", true},
                                          {"1.", false},
                                          {"1e", false},
                                          {"1e1234", false},
                                          {"NaN", false}});
}

TEST(JsonSchema, EnumAndConst) {
  expect_cases(json::parse(R"({"enum": ["red", "green", 1, 12, null, {"a": [1, 2]}]})"),
               {{R"("red")", true},
                {R"("green")", true},
                {"1", true},
                {"12", true},
                {"null", true},
                {R"({"a":[1,2]})", true},
                {R"("blue")", false},
                {"2", false},
                {"123", false},
                {R"("re")", false}});
  expect_cases(json::parse(R"({"const": "x"})"), {{R"("x")", true}, {R"("y")", false}});
  // Other keywords beside enum keep only the values that satisfy them.
  expect_cases(json::parse(R"({"type": "string", "enum": ["a", "bb", 3], "maxLength": 1})"),
               {{R"("a")", true}, {R"("bb")", false}, {"3", false}});
  expect_cases(json{{"type", "boolean"}}, {{"true", true}, {"false", true}, {"1", false}});
  expect_cases(json{{"type", "null"}}, {{"null", true}, {"nul", false}});
}

TEST(JsonSchema, Unions) {
  expect_cases(
      json::parse(R"({"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]})"),
      {{R"("a")", true}, {"5", true}, {"null", true}, {"true", false}, {"5.5", false}});
  expect_cases(json::parse(R"({"type": ["string", "null"]})"),
               {{R"("a")", true}, {"null", true}, {"1", false}});
  // Objects that differ only later: both alternatives stay alive until a key decides.
  const json pets = json::parse(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
       "required": ["kind", "lives"], "additionalProperties": false},
      {"type": "object", "properties": {"kind": {"const": "dog"}, "bark": {"type": "string"}},
       "required": ["kind"], "additionalProperties": false}]})");
  expect_cases(pets, {{R"({"kind":"cat","lives":9})", true},
                      {R"({"kind":"dog"})", true},
                      {R"({"kind":"dog","bark":"woof"})", true},
                      {R"({"kind":"cat"})", false},
                      {R"({"kind":"dog","lives":9})", false},
                      {R"({"lives":9,"kind":"cat"})", true}});
}

TEST(JsonSchema, RefsAndDefs) {
  const json tree = json::parse(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}}})");
  expect_cases(tree, {{R"({"v":1})", true},
                      {R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4}]})", true},
                      {R"({"v":1,"kids":[{}]})", false}});
  expect_cases(json::parse(R"({"type": "object", "properties": {"self": {"$ref": "#"}}})"),
               {{R"({"self":{"self":{}}})", true}, {R"({"self":1})", false}});
  expect_cases(
      json::parse(
          R"({"definitions": {"a/b": {"type": "integer"}}, "allOf": [{"$ref": "#/definitions/a~1b"}]})"),
      {{"3", true}, {"\"3\"", false}});
}

TEST(JsonSchema, DeepNestingStaysCompletable) {
  // Recursion without a bound: values are refused before they would nest too deep, so
  // every accepted prefix can still be finished.
  auto g = any_json_object_grammar();
  std::string doc = "{\"a\":";
  for (int i = 0; i < 2 * kMaxDepth; ++i) doc += "[";
  EXPECT_FALSE(prefix_ok(*g, doc));
  std::string ok =
      "{\"a\":" + std::string(kMaxDepth - 3, '[') + std::string(kMaxDepth - 3, ']') + "}";
  EXPECT_TRUE(matches(*g, ok));
}

TEST(JsonSchema, Errors) {
  const std::pair<const char*, const char*> bad[] = {
      {R"({"type": "string", "pattern": "^a$"})", "\"pattern\" at # is not supported"},
      {R"({"type": "string", "format": "date"})", "\"format\""},
      {R"({"type": "integer", "minimum": 0})", "\"minimum\""},
      {R"({"type": "object", "properties": {"x": {"type": "number", "multipleOf": 2}}})",
       "\"multipleOf\" at #/properties/x"},
      {R"({"type": "array", "items": [{"type": "string"}]})", "\"items\""},
      {R"({"type": "array", "uniqueItems": true})", "\"uniqueItems\""},
      {R"({"type": "whatever"})", "unknown type"},
      {R"({"$ref": "https://example.com/s.json"})", "\"$ref\""},
      {R"({"$ref": "#/$defs/missing"})", "names nothing"},
      {R"({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})",
       "no document"},
      {R"({"oneOf": [{"type": "integer"}, {"type": "number"}]})", "\"oneOf\""},
      {R"({"allOf": [{"type": "integer"}, {"type": "number"}]})", "\"allOf\""},
      {R"({"type": "object", "required": ["a"], "additionalProperties": false})",
       "required property"},
      {R"({"enum": []})", "no document"},
      {R"({"type": "string", "minLength": 3, "maxLength": 2})", "no document"},
      {R"(3)", "must be an object or a boolean"},
      {R"({"$ref": "#/$defs/a", "type": "object"})", "beside \"$ref\""},
  };
  for (const auto& [schema, message] : bad) {
    Result<std::shared_ptr<const Grammar>> g = compile_json_schema(json::parse(schema));
    ASSERT_FALSE(g.is_ok()) << schema;
    EXPECT_NE(g.status().message().find(message), std::string::npos)
        << schema << ": " << g.status().message();
  }
}

TEST(JsonSchema, LimitsOfUntrustedSchemas) {
  json one_of = json::array();
  for (int i = 0; i < 65; ++i) one_of.push_back({{"const", i}});
  Result<std::shared_ptr<const Grammar>> g = compile_json_schema({{"oneOf", one_of}});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("more than 64 alternatives"), std::string::npos);
  json any_of = json::array();
  for (int i = 0; i < 1100; ++i) any_of.push_back({{"const", i}});
  g = compile_json_schema({{"anyOf", any_of}});
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("more than 1024 alternatives"), std::string::npos);
  json big_enum = json::array();  // one literal node: fine
  for (int i = 0; i < 5000; ++i) big_enum.push_back("value " + std::to_string(i));
  EXPECT_TRUE(compile_json_schema({{"type", "string"}, {"enum", big_enum}}).is_ok());
}

TEST(JsonSchema, AnnotationsAreAccepted) {
  expect_cases(
      json::parse(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "T",
      "description": "d", "type": "object", "properties": {"a": {"type": "string", "default": "x",
      "examples": ["y"], "deprecated": false}}, "$defs": {"unused": {"pattern": "x"}}})"),
      {{R"({"a":"z"})", true}});
}

// Bytes a random walk picks from: JSON's punctuation, some letters and digits, escapes
// and pieces of multi-byte characters (so walks meet every lexer state).
const std::string kWalkBytes =
    "{}[]\",:0123456789.-+eE tnrulfasbd\\/\n\t\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\xed\x80";

// Random walks through the automaton end in documents that nlohmann's parser reads (the
// schema's side is checked against Python's jsonschema in tests/grammar/).
TEST(JsonSchema, RandomWalksParse) {
  auto g = any_json_object_grammar();
  std::mt19937_64 rng(18);
  auto states = std::make_unique<std::array<State, 3>>();
  int finished = 0;
  for (int walk = 0; walk < 60; ++walk) {
    State* cur = &(*states)[0];
    initial_state(*g, g->root, cur);
    std::string doc;
    for (int n = 0; n < 1500; ++n) {
      if (accepts_end(*g, *cur, &(*states)[2]) && (n > 300 || rng() % 4 == 0)) break;
      State* next = cur == &(*states)[0] ? &(*states)[1] : &(*states)[0];
      std::string options;
      for (char c : kWalkBytes) {
        if (step(*g, *cur, static_cast<uint8_t>(c), next)) options += c;
      }
      if (options.empty()) {  // only a whole document may take nothing more
        ASSERT_TRUE(accepts_end(*g, *cur, &(*states)[2])) << "dead end after " << doc;
        break;
      }
      char c = options[rng() % options.size()];
      for (char pick : options) {  // prefer closing as the document grows, so walks end
        if (n > 200 && (pick == '"' || pick == '}' || pick == ']') && rng() % 2 == 0) c = pick;
      }
      ASSERT_TRUE(step(*g, *cur, static_cast<uint8_t>(c), next));
      cur = next;
      doc += c;
    }
    if (!accepts_end(*g, *cur, &(*states)[2])) continue;  // did not close in time
    ++finished;
    const json parsed = json::parse(doc, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << doc;
    EXPECT_TRUE(parsed.is_object()) << doc;
  }
  EXPECT_GT(finished, 30);
}

}  // namespace
}  // namespace hypura::grammar
