// Unit tests on hand-built vocabularies and on the golden vocab files: special tokens,
// BOS/EOS, pieces, round trips, end-of-generation ids, streaming UTF-8.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gguf/gguf.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace {

namespace fs = std::filesystem;
const fs::path kGolden = fs::path(HYPURA_GOLDEN_DIR) / "tokenizer";

std::unique_ptr<Tokenizer> golden(const std::string& name) {
  auto file = gguf::GgufFile::open((kGolden / ("ggml-vocab-" + name + ".gguf")).string());
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  auto tok = Tokenizer::from_metadata(file->metadata());
  EXPECT_TRUE(tok.is_ok()) << tok.status().message();
  return std::move(tok).value();
}

std::vector<std::string> golden_texts(const std::string& name) {
  std::ifstream in(kGolden / ("ggml-vocab-" + name + ".gguf.inp"), std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string inp = ss.str(), sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0, m; (m = inp.find(sep, pos)) != std::string::npos; pos = m + sep.size()) {
    out.push_back(inp.substr(pos, m - pos));
  }
  return out;
}

// A tiny SPM vocabulary: <unk> <s> </s>, byte tokens for 0xE2 0x82 0xAC, and pieces
// whose scores make "▁ab" win over "▁a"+"b".
Vocab tiny_spm() {
  Vocab v;
  v.model = VocabModel::kSpm;
  v.tokens = {"<unk>", "<s>", "</s>", "<0xE2>", "<0x82>", "<0xAC>", "\xE2\x96\x81", "a", "b",
              "\xE2\x96\x81" "a", "ab", "\xE2\x96\x81" "ab", "<ctl>"};
  v.scores = {0, 0, 0, 0, 0, 0, -1, -2, -2, -3, -5, -4, 0};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl, TokenType::kByte,
             TokenType::kByte,    TokenType::kByte,    TokenType::kNormal,  TokenType::kNormal,
             TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal,
             TokenType::kControl};
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = true;
  return v;
}

TEST(Tokenizer, SpmMergesByScoreAndFallsBackToBytes) {
  auto tok = Tokenizer::from_vocab(tiny_spm());
  ASSERT_TRUE(tok.is_ok()) << tok.status().message();
  // "▁ab" (score -4) beats "ab" (-5); "▁" + "a" first forms "▁a" (-3), then "▁a"+"b"
  // is "▁ab". The euro sign is not a token: its three bytes come out as byte tokens.
  EXPECT_EQ((*tok)->encode("ab", false, false), (std::vector<int32_t>{11}));
  EXPECT_EQ((*tok)->encode("ab\xE2\x82\xAC", true, false), (std::vector<int32_t>{1, 11, 3, 4, 5}));
  EXPECT_EQ((*tok)->detokenize((*tok)->encode("ab a", false, false)), "ab a");
}

TEST(Tokenizer, ControlTokensNeedParseSpecial) {
  auto tok = Tokenizer::from_vocab(tiny_spm()).value();
  // Without parse_special "<ctl>" is text (bytes unknown to this vocab fall to <unk>).
  const auto plain = tok->encode("<ctl>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 12), 0);
  const auto special = tok->encode("a<ctl>a", false, true);
  // Text after a special token gets the space prefix again, as in llama.cpp.
  EXPECT_EQ(special, (std::vector<int32_t>{9, 12, 9}));
  EXPECT_EQ(tok->token_to_piece(12), "");
  EXPECT_EQ(tok->token_to_piece(12, true), "<ctl>");
  EXPECT_EQ(tok->token_to_piece(9), " a");
  EXPECT_EQ(tok->token_to_piece(4), "\x82");
  EXPECT_EQ(tok->token_to_piece(-1), "");
  EXPECT_EQ(tok->token_to_piece(1000), "");
}

TEST(Tokenizer, RejectsInconsistentVocab) {
  Vocab v = tiny_spm();
  v.scores.pop_back();
  EXPECT_FALSE(Tokenizer::from_vocab(v).is_ok());
  EXPECT_FALSE(Tokenizer::from_vocab(Vocab{}).is_ok());
}

TEST(Tokenizer, MetadataErrorsNameTheKey) {
  gguf::Metadata md;
  auto r = Tokenizer::from_metadata(md);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tokenizer.ggml.model"), std::string::npos);
  gguf::Value model;
  model.type = gguf::ValueType::STRING;
  model.data = std::string("t5");
  md.add("tokenizer.ggml.model", model);
  r = Tokenizer::from_metadata(md);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("t5"), std::string::npos);
}

TEST(Tokenizer, SpmGoldenVocabSpecialsAndRoundTrip) {
  auto tok = golden("llama-spm");
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_TRUE(tok->is_end_of_generation(2));
  EXPECT_FALSE(tok->is_end_of_generation(1));
  EXPECT_EQ(tok->encode("Hello", true, false).front(), 1);
  // "<s>" is text without parse_special and the BOS token with it.
  EXPECT_NE(tok->encode("<s>Hi", false, false).front(), 1);
  EXPECT_EQ(tok->encode("<s>Hi", false, true).front(), 1);
  for (const auto& text : golden_texts("llama-spm")) {
    // The space prefix comes off again (llama.cpp keeps it after a removed BOS).
    EXPECT_EQ(tok->detokenize(tok->encode(text, false, false)), text);
  }
}

TEST(Tokenizer, BpeGoldenVocabRoundTrip) {
  for (const std::string name : {"gpt-2", "deepseek-llm"}) {
    auto tok = golden(name);
    for (const auto& text : golden_texts(name)) {
      EXPECT_EQ(tok->detokenize(tok->encode(text, false, false)), text) << name;
    }
  }
}

TEST(Tokenizer, BpeAddsBosOnlyWhenAsked) {
  auto gpt2 = golden("gpt-2");
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->encode("Hello", true, false), gpt2->encode("Hello", false, false));
  auto ds = golden("deepseek-llm");
  EXPECT_TRUE(ds->add_bos());
  EXPECT_EQ(ds->encode("Hello", true, false).front(), 100000);
  // <|endoftext|> is gpt-2's EOS and ends generation.
  EXPECT_TRUE(gpt2->is_end_of_generation(50256));
}

TEST(Tokenizer, BpeInvalidUtf8BecomesReplacementChar) {
  auto tok = golden("gpt-2");
  EXPECT_EQ(tok->encode("a\xFF" "b", false, false), tok->encode("a\xEF\xBF\xBD" "b", false, false));
}

TEST(Tokenizer, Phi3EndOfTurnTokens) {
  auto tok = golden("phi-3");
  const int32_t end = tok->find_token("<|end|>");
  ASSERT_GE(end, 0);
  EXPECT_TRUE(tok->is_end_of_generation(end));
  EXPECT_TRUE(tok->is_end_of_generation(tok->eos_id()));
  EXPECT_FALSE(tok->is_end_of_generation(tok->find_token("<|user|>")));
}

TEST(Unicode, CompletePrefixHoldsBackUnfinishedCharacters) {
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\xF0\x9F\x98"), 0u);
  EXPECT_EQ(utf8_complete_prefix("\x82"), 1u);  // stray continuation: never completes
  EXPECT_EQ(utf8_sanitize("a\xFF\xE2\x82"), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(bpe_text_to_bytes("\xC4\xA0hi"), " hi");  // "Ġ" is the space byte
}

TEST(StreamingDetokenizer, ReassemblesByteTokens) {
  auto tok = Tokenizer::from_vocab(tiny_spm()).value();
  StreamingDetokenizer detok(*tok);
  EXPECT_EQ(detok.push(9), " a");
  EXPECT_EQ(detok.push(3), "");  // 0xE2: first byte of the euro sign
  EXPECT_EQ(detok.pending_bytes(), 1u);
  EXPECT_EQ(detok.push(4), "");
  EXPECT_EQ(detok.push(5), "\xE2\x82\xAC");
  EXPECT_EQ(detok.push(3), "");
  EXPECT_EQ(detok.flush(), "\xEF\xBF\xBD");  // unfinished at the end: U+FFFD
  EXPECT_EQ(detok.push(1), "");              // control tokens print nothing
  StreamingDetokenizer special(*tok, true);
  EXPECT_EQ(special.push(2), "</s>");
}

TEST(StreamingDetokenizer, StreamEqualsWholeDecode) {
  auto tok = golden("gpt-2");
  for (const auto& text : golden_texts("gpt-2")) {
    StreamingDetokenizer detok(*tok);
    std::string streamed;
    for (int32_t id : tok->encode(text, false, false)) {
      const std::string piece = detok.push(id);
      EXPECT_EQ(utf8_sanitize(piece), piece) << "invalid UTF-8 streamed";
      streamed += piece;
    }
    streamed += detok.flush();
    EXPECT_EQ(streamed, text);
  }
}

}  // namespace
}  // namespace hypura::tokenizer
