// Pre-tokenizer splits on hand-checked inputs, long runs (regex resource limits) and
// random bytes (coverage and no crash).
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/test_util.h"
#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  bool ignore_merges = false;
  auto pt = PreTokenizer::create(PreTokenizer::regexes_for(pre, &ignore_merges));
  EXPECT_TRUE(pt.is_ok()) << pt.status().message();
  std::vector<std::string> out;
  for (const auto& [off, len] : (*pt)->split(text)) out.push_back(text.substr(off, len));
  return out;
}

using V = std::vector<std::string>;

TEST(PreTokenizer, Gpt2Words) {
  EXPECT_EQ(split("gpt-2", "Hello world, it's 2024!"),
            (V{"Hello", " world", ",", " it", "'s", " 2024", "!"}));
  // "\s+(?!\S)" leaves the last space to the next word; a lone "\n" before a letter
  // matches nothing and stays as its own piece.
  EXPECT_EQ(split("gpt-2", "a   b\n\nc"), (V{"a", "  ", " b", "\n", "\n", "c"}));
}

TEST(PreTokenizer, Llama3AndQwen2Digits) {
  EXPECT_EQ(split("llama-bpe", "12345 abc"), (V{"123", "45", " abc"}));
  EXPECT_EQ(split("qwen2", "12345"), (V{"1", "2", "3", "4", "5"}));
  // "\s*[\r\n]+" ends at the last newline; "\s+(?!\S)" leaves one space for " x".
  EXPECT_EQ(split("qwen2", "I'M here\n\n  x"), (V{"I", "'M", " here", "\n\n", " ", " x"}));
}

TEST(PreTokenizer, SmollmSplitsDigitsFirst) {
  EXPECT_EQ(split("smollm", "abc 123"), (V{"abc", " ", "1", "2", "3"}));
}

TEST(PreTokenizer, DeepseekDollarMeansEndOfPiece) {
  // "\s+$" takes trailing whitespace only at the very end, not before a final newline.
  EXPECT_EQ(split("deepseek-llm", "ab  "), (V{"ab", "  "}));
}

TEST(PreTokenizer, LongRunsSplitCompletely) {
  for (const std::string pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "default"}) {
    for (const std::string fill : {" ", "a", "!", "\n", " \n"}) {
      std::string text = "x";
      while (text.size() < 200000) text += fill;
      text += "y";
      const V pieces = split(pre, text);
      size_t total = 0;
      for (const auto& p : pieces) total += p.size();
      EXPECT_EQ(total, text.size()) << pre;
      // One run is one or two pieces (deepseek splits every newline on its own).
      const bool newline_pieces = pre == "deepseek-llm" && fill.find('\n') != std::string::npos;
      if (!newline_pieces) {
        EXPECT_LE(pieces.size(), 4u) << pre << " fill " << int(fill[0]);
      }
    }
  }
}

TEST(PreTokenizer, RandomBytesRoundTripThroughBpe) {
  const Tokenizer* tok = testing_util::golden_tokenizer("gpt-2");
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(42);
  for (int i = 0; i < 200; ++i) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = static_cast<char>(rng() % 256);
    for (bool special : {false, true}) {
      const auto ids = tok->encode(text, true, special);
      EXPECT_EQ(tok->detokenize(ids, false, special), utf8_sanitize(text));
    }
  }
}

}  // namespace
}  // namespace hypura::tokenizer
