// The token mask against the plain reference: every token's bytes fed to the automaton one
// by one (and end-of-generation tokens allowed exactly when the document is whole).
#include "grammar/token_mask.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace hypura::grammar {
namespace {

using json = nlohmann::json;

// A vocabulary shaped like a byte-level BPE one: every byte, JSON fragments, words with
// and without a leading space, runs of spaces, pieces that split UTF-8 characters, empty
// (control) tokens and two end tokens.
struct TestVocab {
  std::vector<std::string> pieces;
  std::vector<int32_t> end_ids;
};

TestVocab make_vocab(uint64_t seed) {
  TestVocab v;
  for (int b = 0; b < 256; ++b) v.pieces.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p :
       {"{\"",     "\":",     "\": ",      "\", \"", "},",       "}}",       "\"}",
        "\"]",     "[\"",     "[{",        "}]",     "\n",       "\n  ",     "\n    ",
        "  ",      "    ",    "        ",  "true",   "false",    "null",     " true",
        " null",   "\":\"",   "\\n",       "\\\"",   "\\u00",    "e9",       "\\",
        "\"\"",    "name",    "age",       " name",  "\"name\"", "\"age",    "12",
        "3.",      "-1",      "e+",        "1e5",    "\xc3",     "\xa9",     "\xc3\xa9",
        "caf\xc3", "\xa9\"",  "\xe2\x82",  "\xac",   "\xf0\x9f", "\x98\x80", "\xe2\x82\xac\"}",
        "red",     "\"red\"", "green",     "\"gr",   "een\"",    "cat",      "\"cat\",",
        "dog",     "kind",    "\"kind\":", "lives",  "9}",       ",\n",      ", "}) {
    v.pieces.push_back(p);
  }
  std::mt19937_64 rng(seed);
  const std::string alphabet =
      "abcdefghijklmnopqrstuvwxyz ABC{}[]\":,0123456789.-\\\n\xc3\xa9\xe2\x82\xac";
  for (int i = 0; i < 1500; ++i) {
    std::string p;
    const int len = 1 + static_cast<int>(rng() % 7);
    for (int k = 0; k < len; ++k) p += alphabet[rng() % alphabet.size()];
    v.pieces.push_back(p);
  }
  v.pieces.push_back("");  // control tokens carry no bytes
  v.pieces.push_back("");
  v.end_ids = {static_cast<int32_t>(v.pieces.size()), static_cast<int32_t>(v.pieces.size() + 1)};
  v.pieces.push_back("");  // the end tokens' pieces are not used
  v.pieces.push_back("<|im_end|>");
  return v;
}

bool bit(const std::vector<uint64_t>& m, int32_t id) {
  return (m[id >> 6] >> (id & 63)) & 1;
}

// The reference mask: each token's bytes through the automaton, no trie, no tables.
std::vector<uint64_t> reference_mask(const Grammar& g, const std::string& doc, const TestVocab& v) {
  auto s = std::make_unique<std::array<State, 5>>();
  initial_state(g, g.root, &(*s)[0]);
  const State* at = nullptr;
  EXPECT_TRUE(step_bytes(g, (*s)[0], doc, &(*s)[1], &(*s)[2], &at));
  (*s)[3] = *at;
  std::vector<uint64_t> m((v.pieces.size() + 63) / 64);
  for (size_t id = 0; id < v.pieces.size(); ++id) {
    const bool end =
        std::find(v.end_ids.begin(), v.end_ids.end(), static_cast<int32_t>(id)) != v.end_ids.end();
    const State* after = nullptr;
    const bool ok = end ? accepts_end(g, (*s)[3], &(*s)[4])
                        : !v.pieces[id].empty() &&
                              step_bytes(g, (*s)[3], v.pieces[id], &(*s)[1], &(*s)[2], &after);
    if (ok) m[id >> 6] |= uint64_t{1} << (id & 63);
  }
  return m;
}

// Generates with random allowed tokens, checking the mask against the reference at every
// step; returns the document.
std::string walk(std::shared_ptr<const Grammar> g, const TestVocab& v, const VocabIndex& index,
                 uint64_t seed, int max_tokens) {
  TokenMatcher m(g, index);
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> mask((v.pieces.size() + 63) / 64);
  std::string doc;
  for (int n = 0; n < max_tokens; ++n) {
    m.fill_mask(mask);
    EXPECT_EQ(mask, reference_mask(*g, doc, v)) << "after " << doc;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < static_cast<int32_t>(v.pieces.size()); ++id) {
      if (bit(mask, id)) allowed.push_back(id);
    }
    EXPECT_FALSE(allowed.empty()) << "dead end after " << doc;
    if (allowed.empty()) break;
    int32_t id = allowed[rng() % allowed.size()];
    const bool can_end = bit(mask, v.end_ids[0]);
    if (can_end && (n > max_tokens / 2 || rng() % 3 == 0)) break;
    if (id == v.end_ids[0] || id == v.end_ids[1]) break;
    EXPECT_TRUE(m.accept(id));
    doc += v.pieces[id];
    if (m.finished()) break;
  }
  return doc;
}

const char* kSchemas[] = {
    R"({"type": "object"})",
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
        "kind": {"enum": ["red", "green", "cat"]}}, "required": ["name", "age"], "additionalProperties": false})",
    R"({"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "number"}, {"type": "null"}]}, "maxItems": 4})",
    R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer"}},
        "required": ["kind", "lives"], "additionalProperties": false},
        {"type": "object", "properties": {"kind": {"const": "dog"}}, "required": ["kind"]}]})",
    R"({"type": "string", "minLength": 1})",
};

TEST(TokenMask, MatchesReferenceOnRandomWalks) {
  const TestVocab v = make_vocab(7);
  const VocabIndex index(v.pieces, v.end_ids);
  uint64_t seed = 1;
  for (const char* schema : kSchemas) {
    Result<std::shared_ptr<const Grammar>> g = compile_json_schema(json::parse(schema));
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    for (int i = 0; i < 6; ++i) {
      const std::string doc = walk(*g, v, index, seed++, 40);
      SCOPED_TRACE(doc);
    }
  }
}

TEST(TokenMask, EndOnlyWhenWholeAndFinishedStops) {
  const TestVocab v = make_vocab(3);
  const VocabIndex index(v.pieces, v.end_ids);
  TokenMatcher m(any_json_object_grammar(), index);
  std::vector<uint64_t> mask((v.pieces.size() + 63) / 64);
  m.fill_mask(mask);
  EXPECT_FALSE(bit(mask, v.end_ids[0]));
  EXPECT_TRUE(bit(mask, '{'));
  EXPECT_FALSE(bit(mask, '['));
  EXPECT_FALSE(bit(mask, static_cast<int32_t>(v.pieces.size()) - 4));  // an empty token
  ASSERT_TRUE(m.accept_bytes("{\"a\": \"caf\xc3"));                    // ends mid-character
  m.fill_mask(mask);
  EXPECT_TRUE(bit(mask, 0xa9));
  EXPECT_FALSE(bit(mask, '"'));
  ASSERT_TRUE(m.accept_bytes("\xa9\""));
  EXPECT_FALSE(m.finished());
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_TRUE(m.finished());
  m.fill_mask(mask);
  for (int32_t id = 0; id < static_cast<int32_t>(v.pieces.size()); ++id) {
    const bool end = id == v.end_ids[0] || id == v.end_ids[1];
    EXPECT_EQ(bit(mask, id), end) << id;
  }
}

TEST(TokenMask, TrieHoldsEveryTokenOnce) {
  const TestVocab v = make_vocab(5);
  const VocabIndex index(v.pieces, v.end_ids);
  size_t with_bytes = 0;
  for (size_t id = 0; id < v.pieces.size(); ++id) {
    EXPECT_EQ(index.piece(static_cast<int32_t>(id)), v.pieces[id]);
    with_bytes += !v.pieces[id].empty() && id < v.pieces.size() - 2;
  }
  // Shared prefixes are stored once: at most one node per byte of the pieces.
  size_t total = 0;
  for (const std::string& p : v.pieces) total += p.size();
  EXPECT_LE(index.n_trie_nodes(), total);
  EXPECT_GT(with_bytes, 256u);
}

}  // namespace
}  // namespace hypura::grammar
