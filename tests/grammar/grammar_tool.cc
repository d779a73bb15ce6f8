// hypura_grammar_tool: the grammar module from outside, for scripts.
//
//   hypura_grammar_tool check
//       Reads one JSON object per line: {"schema": S, "docs": [text...], "walks": N, "seed": K}.
//       Writes one per line: {"error": message} when S does not compile, else
//       {"accept": [bool...], "walks": [text...]}: whether each doc is a whole document of
//       the grammar, and N random documents the automaton generates (random walks over a
//       byte alphabet that meets every lexer state). test_jsonschema.py checks both against
//       Python's jsonschema.
//
//   hypura_grammar_tool bench MODEL.gguf [REPEATS]
//       Times VocabIndex construction on the model's vocabulary and the token mask at every
//       token position of a few documents (each document tokenized by the model's own
//       tokenizer and fed back token by token), printing per-schema mean / p50 / max, beside
//       the plain way (each token's bytes through the automaton, every step).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/automaton.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace {

using json = nlohmann::json;
using namespace hypura;
using namespace hypura::grammar;
using Clock = std::chrono::steady_clock;

bool accepts_doc(const Grammar& g, std::string_view doc, std::array<State, 3>& s) {
  initial_state(g, g.root, &s[0]);
  const State* after = nullptr;
  if (!step_bytes(g, s[0], doc, &s[1], &s[2], &after)) return false;
  return accepts_end(g, *after, after == &s[1] ? &s[2] : &s[1]);
}

const std::string kWalkBytes =
    "{}[]\",:0123456789.-+eE tnrulfasbdxyzABZ\\/\n\t\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e";

// A random document: random allowed bytes, preferring ones that close as it grows.
std::string walk(const Grammar& g, std::mt19937_64& rng, std::array<State, 3>& s) {
  for (int attempt = 0; attempt < 5; ++attempt) {
    State* cur = &s[0];
    initial_state(g, g.root, cur);
    std::string doc;
    for (int n = 0; n < 3000; ++n) {
      if (accepts_end(g, *cur, &s[2]) && (n > 400 || rng() % 3 == 0)) return doc;
      State* next = cur == &s[0] ? &s[1] : &s[0];
      std::string options;
      for (char c : kWalkBytes) {
        if (step(g, *cur, static_cast<uint8_t>(c), next)) options += c;
      }
      if (options.empty()) break;  // whole, with nothing to add
      char c = options[rng() % options.size()];
      const size_t pressure = n > 100 ? 2 : 8;
      for (char pick : options) {
        if ((pick == '"' || pick == '}' || pick == ']' || pick == ',') && rng() % pressure == 0)
          c = pick;
      }
      step(g, *cur, static_cast<uint8_t>(c), next);
      cur = next;
      doc += c;
    }
    if (accepts_end(g, *cur, &s[2])) return doc;
  }
  return "";
}

int check() {
  auto states = std::make_unique<std::array<State, 3>>();
  std::string line;
  while (std::getline(std::cin, line)) {
    const json in = json::parse(line);
    json out;
    Result<std::shared_ptr<const Grammar>> g = compile_json_schema(in["schema"]);
    if (!g.is_ok()) {
      out["error"] = g.status().message();
    } else {
      out["accept"] = json::array();
      for (const json& doc : in.value("docs", json::array())) {
        out["accept"].push_back(accepts_doc(**g, doc.get<std::string>(), *states));
      }
      std::mt19937_64 rng(in.value("seed", 1));
      out["walks"] = json::array();
      for (int i = 0; i < in.value("walks", 0); ++i) {
        const std::string doc = walk(**g, rng, *states);
        if (!doc.empty()) out["walks"].push_back(doc);
      }
    }
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n" << std::flush;
  }
  return 0;
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct BenchCase {
  const char* name;
  const char* schema;  // "" for format "json"
  const char* doc;
};

const BenchCase kCases[] = {
    {"json (free object)", "",
     R"({"name": "Ada Lovelace", "born": 1815, "languages": ["English", "French"], "notes": "First to publish an algorithm for a machine; her notes on the Analytical Engine run longer than the paper they annotate.", "nested": {"a": [1, 2.5, -3], "b": null, "c": true}})"},
    {"person (properties, required, no additional)",
     R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
        "email": {"type": "string", "maxLength": 64}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
        "required": ["name", "age"], "additionalProperties": false})",
     R"({"name": "Grace Hopper", "age": 85, "email": "grace@navy.example", "tags": ["compilers", "COBOL", "navy"]})"},
    {"union (anyOf objects, enum)",
     R"({"type": "array", "items": {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"], "additionalProperties": false},
        {"type": "object", "properties": {"kind": {"const": "rect"}, "w": {"type": "number"}, "h": {"type": "number"}}, "required": ["kind", "w", "h"], "additionalProperties": false},
        {"enum": ["none", "unknown"]}]}})",
     R"([{"kind": "circle", "r": 1.5}, {"kind": "rect", "w": 2, "h": 3}, "none", {"kind": "circle", "r": 10}])"},
};

int bench(const std::string& model, int repeats) {
  Result<gguf::GgufFile> file = gguf::GgufFile::open(model);
  if (!file.is_ok()) {
    std::fprintf(stderr, "%s\n", file.status().message().c_str());
    return 1;
  }
  Result<std::unique_ptr<tokenizer::Tokenizer>> tok =
      tokenizer::Tokenizer::from_metadata(file->metadata());
  if (!tok.is_ok()) {
    std::fprintf(stderr, "%s\n", tok.status().message().c_str());
    return 1;
  }
  const tokenizer::Tokenizer& t = **tok;
  auto t0 = Clock::now();
  std::vector<std::string> pieces(static_cast<size_t>(t.n_vocab()));
  for (int32_t id = 0; id < t.n_vocab(); ++id) pieces[id] = t.token_to_piece(id);
  const std::vector<int32_t> ends(t.end_of_generation_ids().begin(),
                                  t.end_of_generation_ids().end());
  VocabIndex index(pieces, ends);
  std::printf(
      "vocabulary: %d tokens, %zu trie nodes, longest piece %zu bytes; index built in %.1f ms\n",
      t.n_vocab(), index.n_trie_nodes(), index.max_piece_bytes(), ms_since(t0));
  std::vector<uint64_t> mask(static_cast<size_t>((t.n_vocab() + 63) / 64));
  for (const BenchCase& c : kCases) {
    std::shared_ptr<const Grammar> g =
        *c.schema ? *compile_json_schema(json::parse(c.schema)) : any_json_object_grammar();
    const std::vector<int32_t> ids = t.encode(c.doc, false, false);
    std::vector<double> ms;
    size_t allowed_sum = 0;
    for (int r = 0; r < repeats; ++r) {
      TokenMatcher m(g, index);
      for (int32_t id : ids) {
        t0 = Clock::now();
        m.fill_mask(mask);
        ms.push_back(ms_since(t0));
        if (r == 0) {
          for (uint64_t w : mask) allowed_sum += static_cast<size_t>(__builtin_popcountll(w));
        }
        if (!((mask[id >> 6] >> (id & 63)) & 1) || !m.accept(id)) {
          std::printf("  %s: token %d (%s) refused\n", c.name, id,
                      json(t.token_to_piece(id)).dump().c_str());
          return 1;
        }
      }
      if (!m.finished()) std::printf("  %s: document not finished\n", c.name);
    }
    // The plain way, for comparison: every token's bytes through the automaton, each step.
    double naive_ms = 0;
    {
      auto st = std::make_unique<std::array<State, 4>>();
      initial_state(*g, g->root, &(*st)[0]);
      for (int32_t id : ids) {
        t0 = Clock::now();
        const State* after = nullptr;
        for (int32_t v = 0; v < t.n_vocab(); ++v) {
          if (!pieces[v].empty()) step_bytes(*g, (*st)[0], pieces[v], &(*st)[1], &(*st)[2], &after);
        }
        naive_ms += ms_since(t0);
        step_bytes(*g, (*st)[0], pieces[id], &(*st)[1], &(*st)[2], &after);
        (*st)[3] = *after;
        (*st)[0] = (*st)[3];
      }
    }
    std::sort(ms.begin(), ms.end());
    double sum = 0;
    for (double v : ms) sum += v;
    std::printf(
        "%-46s %3zu tokens: mask mean %.3f ms, p50 %.3f, p90 %.3f, max %.3f; allowed %.0f tokens "
        "on "
        "average; every token checked alone: %.1f ms\n",
        c.name, ids.size(), sum / ms.size(), ms[ms.size() / 2], ms[ms.size() * 9 / 10], ms.back(),
        static_cast<double>(allowed_sum) / ids.size(), naive_ms / ids.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "check") return check();
  if (mode == "bench" && argc > 2) return bench(argv[2], argc > 3 ? std::atoi(argv[3]) : 3);
  std::fprintf(stderr, "usage: hypura_grammar_tool check | bench MODEL.gguf [REPEATS]\n");
  return 2;
}
