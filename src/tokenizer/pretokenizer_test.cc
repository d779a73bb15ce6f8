// Pre-tokenizer splits on hand-checked inputs, long runs (regex resource limits) and
// random bytes (coverage and no crash).
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/testing/test_util.h"
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

// gpt-4o (gpt-oss, llama4) as llama.cpp splits it: case runs split ASCII words, any
// non-ASCII letter joins either run, combining marks are not part of words.
TEST(PreTokenizer, Gpt4oCaseRunsAsLlamaCpp) {
  EXPECT_EQ(split("gpt-4o", "HelloWORLD camelCase XMLHttp"),
            (V{"Hello", "WORLD", " camel", "Case", " XMLHttp"}));
  EXPECT_EQ(split("gpt-4o", "\xC3\xA9\xC3\x89"), (V{"\xC3\xA9\xC3\x89"}));  // "éÉ": one word
  EXPECT_EQ(split("gpt-4o", "cafe\xCC\x81!"), (V{"cafe", "\xCC\x81!"}));    // e + U+0301
  EXPECT_EQ(split("gpt-4o", "DON'T don't 1234567"), (V{"DON'T", " don't", " ", "123", "456", "7"}));
  EXPECT_EQ(split("gpt-4o", "a/b//\n\nc"), (V{"a", "/b", "//\n\n", "c"}));
}

// DeepSeek-V3: digits in threes first, then CJK and kana runs, then words where one ASCII
// punctuation mark may lead ASCII letters.
TEST(PreTokenizer, DeepseekV3) {
  EXPECT_EQ(split("deepseek-v3", "12345 ab"), (V{"123", "45", " ab"}));
  EXPECT_EQ(split("deepseek-v3", ".world (x)"), (V{".world", " (", "x", ")"}));
  // "日本語のテキスト": the Han and kana run is one piece.
  EXPECT_EQ(split("deepseek-v3", "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE x"),
            (V{"\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE", " x"}));
  EXPECT_EQ(split("deepseek-v3", "cafe\xCC\x81 x"), (V{"cafe\xCC\x81", " x"}));
}

// GLM-4 uses Llama 3's split: digits in threes, one non-letter may lead a word.
TEST(PreTokenizer, Glm4IsLlama3Split) {
  for (const std::string pre : {"glm4", "chatglm-bpe"}) {
    EXPECT_EQ(split(pre, "ab 12345 $x\n\n y"),
              (V{"ab", " ", "123", "45", " $", "x", "\n\n", " y"}));
  }
}

// U+0085 is whitespace and U+180E is not, as in llama.cpp (PCRE2 alone says both are).
TEST(PreTokenizer, WhitespaceIsUnicodeWhiteSpace) {
  EXPECT_EQ(split("llama-bpe", "a\xC2\x85 b"), (V{"a", "\xC2\x85", " b"}));
  EXPECT_EQ(split("gpt-2", "x\xE1\xA0\x8E\xE1\xA0\x8E!"), (V{"x", "\xE1\xA0\x8E\xE1\xA0\x8E!"}));
}

TEST(PreTokenizer, LongRunsSplitCompletely) {
  for (const std::string pre :
       {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-v3", "gpt-4o", "default"}) {
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
