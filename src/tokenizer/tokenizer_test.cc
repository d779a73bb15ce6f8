// Unit tests on hand-built vocabularies and on the golden vocab files: special tokens,
// BOS/EOS, pieces, round trips, end-of-generation ids, streaming UTF-8.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/testing/test_util.h"
#include "tokenizer/unicode.h"

namespace hypura::tokenizer {
namespace {

const Tokenizer* golden(const std::string& name) {
  const Tokenizer* tok = testing_util::golden_tokenizer(name);
  EXPECT_NE(tok, nullptr) << name;
  return tok;
}

std::vector<std::string> golden_texts(const std::string& name) {
  const std::string inp =
      testing_util::read_file(testing_util::golden_dir() / ("ggml-vocab-" + name + ".gguf.inp"));
  const std::string sep = "\n__ggml_vocab_test__\n";
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
  v.tokens = {"<unk>",
              "<s>",
              "</s>",
              "<0xE2>",
              "<0x82>",
              "<0xAC>",
              "\xE2\x96\x81",
              "a",
              "b",
              "\xE2\x96\x81"
              "a",
              "ab",
              "\xE2\x96\x81"
              "ab",
              "<ctl>"};
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

// Issue 14.5: in a PromptText, control tokens are parsed only where no data range is
// touched; user-defined tokens and plain text behave as before.
TEST(Tokenizer, ControlTokensAreNotParsedInData) {
  auto tok = Tokenizer::from_vocab(tiny_spm()).value();
  PromptText p;
  p.append_template("a<ctl>");
  p.append_data("a<ctl>");
  p.append_template("<ct");
  p.append_data("l>");  // a token split across template text and data is not one
  p.append_template("<ctl>");
  auto n_ctl = [](const std::vector<int32_t>& ids) {
    return std::count(ids.begin(), ids.end(), 12);
  };
  EXPECT_EQ(n_ctl(tok->encode(p, false)), 2);
  EXPECT_EQ(n_ctl(tok->encode(p.text, false, true)), 4);
  // No data: the same as parse_special everywhere.
  PromptText plain;
  plain.append_template("a<ctl>a");
  EXPECT_EQ(tok->encode(plain, true), tok->encode("a<ctl>a", true, true));
}

TEST(PromptText, SliceAndAppendKeepTheRanges) {
  PromptText p;
  p.append_template("ab");
  p.append_data("cd");
  p.append_data("ef");
  p.append_template("gh");
  EXPECT_EQ(p.data, (std::vector<TextRange>{{2, 6}}));
  EXPECT_EQ(p.slice(3, 7).data, (std::vector<TextRange>{{0, 3}}));
  PromptText q = p.slice(4);
  q.append(p);
  EXPECT_EQ(q.text, "efghabcdefgh");
  EXPECT_EQ(q.data, (std::vector<TextRange>{{0, 2}, {6, 10}}));
  p.erase_prefix(100);
  EXPECT_TRUE(p.text.empty() && p.data.empty());
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

// GGUF metadata values for hand-built metadata.
gguf::Value str(std::string s) {
  gguf::Value v;
  v.type = gguf::ValueType::STRING;
  v.data = std::move(s);
  return v;
}

gguf::Value arr(gguf::ValueType t, std::vector<gguf::Value> items) {
  gguf::Value v;
  v.type = gguf::ValueType::ARRAY;
  v.array_type = t;
  v.data = std::move(items);
  return v;
}

// A tiny byte-level BPE vocabulary over "a", "b", "c" with ranked merges.
Vocab tiny_bpe(const std::string& pre) {
  Vocab v;
  v.model = VocabModel::kBpe;
  v.pre = pre;
  v.tokens = {"a",
              "b",
              "c",
              "ab",
              "bc",
              "abc",
              "ca",
              "\xC4\xA0" /* "Ġ": space */,
              "\xC4\xA0"
              "a",
              "<eos>"};
  v.types.assign(v.tokens.size(), TokenType::kNormal);
  v.types.back() = TokenType::kControl;
  v.merges = {"b c", "a b", "\xC4\xA0 a", "a bc", "c a"};  // rank = index
  v.eos_id = 9;
  return v;
}

TEST(Tokenizer, BpeMergesLowestRankFirst) {
  auto tok = Tokenizer::from_vocab(tiny_bpe("gpt-2")).value();
  // "abc": "b c" (rank 0) beats "a b" (1), then "a bc" (3) gives "abc".
  EXPECT_EQ(tok->encode("abc", false, false), (std::vector<int32_t>{5}));
  // "cab": "c a" (4) vs "a b" (1): "ab" wins, leaving c + ab.
  EXPECT_EQ(tok->encode("cab", false, false), (std::vector<int32_t>{2, 3}));
  // " a" is a word of its own: Ġ + a merge.
  EXPECT_EQ(tok->encode("c a", false, false), (std::vector<int32_t>{2, 8}));
  // Bytes with no token at all are dropped (llama.cpp does the same).
  EXPECT_EQ(tok->encode("a!", false, false), (std::vector<int32_t>{0}));
  EXPECT_TRUE(tok->is_end_of_generation(9));
  EXPECT_EQ(tok->token_to_piece(8), " a");
}

TEST(Tokenizer, Llama3TakesWholeWordTokensWithoutMerging) {
  Vocab v = tiny_bpe("llama-bpe");
  v.tokens.push_back("cab");  // a whole-word token that the merges cannot build
  v.types.push_back(TokenType::kNormal);
  auto llama3 = Tokenizer::from_vocab(v).value();
  EXPECT_EQ(llama3->encode("cab", false, false), (std::vector<int32_t>{10}));
  v.pre = "qwen2";  // same regex family, but merges always apply
  auto qwen2 = Tokenizer::from_vocab(v).value();
  EXPECT_EQ(qwen2->encode("cab", false, false), (std::vector<int32_t>{2, 3}));
}

// o200k_harmony (gpt-oss): the message markup is user-defined (parsed without
// parse_special and printed); with <|return|> and <|call|> present, <|end|> is printed
// and does not end generation.
TEST(Tokenizer, HarmonyMarkupTokens) {
  Vocab v = tiny_bpe("gpt-4o");
  for (const char* t : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>",
                        "<|return|>", "<|call|>"}) {
    v.tokens.push_back(t);
    v.types.push_back(TokenType::kControl);
  }
  auto tok = Tokenizer::from_vocab(v).value();
  EXPECT_EQ(tok->encode("<|start|>a<|message|>b<|end|>", false, false),
            (std::vector<int32_t>{10, 0, 12, 1, 14}));
  EXPECT_EQ(tok->token_to_piece(11), "<|channel|>");
  EXPECT_EQ(tok->token_to_piece(14), "<|end|>");
  EXPECT_FALSE(tok->is_end_of_generation(14));
  EXPECT_TRUE(tok->is_end_of_generation(15));
  EXPECT_TRUE(tok->is_end_of_generation(16));
  EXPECT_EQ(tok->token_to_piece(15), "");  // <|return|> stays a control token
  EXPECT_TRUE(tok->harmony());
  // Without <|return|>/<|call|> (Phi-3's <|end|>), <|end|> still ends generation.
  Vocab phi = tiny_bpe("gpt-2");
  phi.tokens.push_back("<|end|>");
  phi.types.push_back(TokenType::kControl);
  EXPECT_TRUE(Tokenizer::from_vocab(phi).value()->is_end_of_generation(10));
  EXPECT_FALSE(Tokenizer::from_vocab(phi).value()->harmony());
}

// GLM-4 files name their BOS ([gMASK]) themselves; without one there is none, not GPT-2's 11.
TEST(Tokenizer, Glm4HasNoDefaultBos) {
  std::vector<gguf::Value> texts;
  for (int i = 0; i < 12; ++i) texts.push_back(str(std::string(1, static_cast<char>('a' + i))));
  for (const char* pre : {"glm4", "gpt-2"}) {
    gguf::Metadata md;
    md.add("tokenizer.ggml.model", str("gpt2"));
    md.add("tokenizer.ggml.pre", str(pre));
    md.add("tokenizer.ggml.tokens", arr(gguf::ValueType::STRING, texts));
    md.add("tokenizer.ggml.merges", arr(gguf::ValueType::STRING, {}));
    EXPECT_EQ(Tokenizer::from_metadata(md).value()->bos_id(), pre == std::string("glm4") ? -1 : 11);
  }
}

TEST(Tokenizer, MetadataWithBadArraysIsRejected) {
  gguf::Value one;
  one.type = gguf::ValueType::INT32;
  one.data = int64_t{9};
  {
    gguf::Metadata md;
    md.add("tokenizer.ggml.model", str("llama"));
    md.add("tokenizer.ggml.tokens", arr(gguf::ValueType::STRING, {str("a"), one}));
    auto r = Tokenizer::from_metadata(md);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("tokenizer.ggml.tokens[1]"), std::string::npos)
        << r.status().message();
  }
  {
    gguf::Metadata md;
    md.add("tokenizer.ggml.model", str("llama"));
    md.add("tokenizer.ggml.tokens", arr(gguf::ValueType::STRING, {str("a"), str("b")}));
    md.add("tokenizer.ggml.token_type", arr(gguf::ValueType::INT32, {one, one}));
    auto r = Tokenizer::from_metadata(md);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("token_type[0]"), std::string::npos);
  }
  {
    gguf::Metadata md;  // BPE without merges
    md.add("tokenizer.ggml.model", str("gpt2"));
    md.add("tokenizer.ggml.tokens", arr(gguf::ValueType::STRING, {str("a")}));
    auto r = Tokenizer::from_metadata(md);
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("tokenizer.ggml.merges"), std::string::npos);
  }
}

TEST(Tokenizer, SpmGoldenVocabSpecialsAndRoundTrip) {
  const Tokenizer* tok = golden("llama-spm");
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
    const Tokenizer* tok = golden(name);
    for (const auto& text : golden_texts(name)) {
      EXPECT_EQ(tok->detokenize(tok->encode(text, false, false)), text) << name;
    }
  }
}

TEST(Tokenizer, BpeAddsBosOnlyWhenAsked) {
  const Tokenizer* gpt2 = golden("gpt-2");
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->encode("Hello", true, false), gpt2->encode("Hello", false, false));
  const Tokenizer* ds = golden("deepseek-llm");
  EXPECT_TRUE(ds->add_bos());
  EXPECT_EQ(ds->encode("Hello", true, false).front(), 100000);
  // <|endoftext|> is gpt-2's EOS and ends generation.
  EXPECT_TRUE(gpt2->is_end_of_generation(50256));
}

TEST(Tokenizer, BpeInvalidUtf8BecomesReplacementChar) {
  const Tokenizer* tok = golden("gpt-2");
  EXPECT_EQ(tok->encode("a\xFF"
                        "b",
                        false, false),
            tok->encode("a\xEF\xBF\xBD"
                        "b",
                        false, false));
}

TEST(Tokenizer, Phi3EndOfTurnTokens) {
  const Tokenizer* tok = golden("phi-3");
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
  const Tokenizer* tok = golden("gpt-2");
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

// Real models from test-models/ (skipped when absent): end-of-turn tokens, chat prompts
// and a few ids. SmolLM2's ids agree with an independent implementation's self-check
// list (a project that tokenizes SmolLM2 with its own BPE code); Gemma 3's with
// transformers' GGUF tokenizer converter (see docs/TOKENIZER.md, "Verification").
TEST(RealModels, SmolLm2) {
  const Tokenizer* tok = testing_util::real_model_tokenizer({"gpt2/smollm"}, "smollm2");
  if (tok == nullptr) GTEST_SKIP() << "SmolLM2 not in test-models/ (scripts/fetch-models.sh)";
  EXPECT_EQ(tok->encode("Hello, we can use", false, false),
            (std::vector<int32_t>{19556, 28, 392, 416, 722}));
  EXPECT_EQ(tok->encode("Hello world! 123", false, false),
            (std::vector<int32_t>{19556, 905, 17, 216, 33, 34, 35}));
  EXPECT_EQ(tok->encode("Caf\xC3\xA9 d\xC3\xA9j\xC3\xA0 vu.", false, false),
            (std::vector<int32_t>{51, 1939, 2756, 32564, 90, 16739, 386, 101, 30}));
  EXPECT_EQ(tok->encode("  multiple   spaces", false, false),
            (std::vector<int32_t>{216, 2701, 256, 5600}));
  EXPECT_TRUE(tok->is_end_of_generation(tok->find_token("<|im_end|>")));
  const ChatTemplate ct = ChatTemplate::for_tokenizer(*tok);
  EXPECT_EQ(ct.family(), ChatFamily::kChatml);
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  const auto ids = tok->encode(*ct.render(m, true), true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), tok->find_token("<|im_start|>"));
}

TEST(RealModels, Qwen25) {
  const Tokenizer* tok = testing_util::real_model_tokenizer({"gpt2/qwen2"}, "qwen2");
  if (tok == nullptr) GTEST_SKIP() << "no Qwen2 model in test-models/ (scripts/fetch-models.sh)";
  const int32_t im_start = tok->find_token("<|im_start|>"), im_end = tok->find_token("<|im_end|>");
  EXPECT_TRUE(tok->is_end_of_generation(im_end));
  EXPECT_TRUE(tok->is_end_of_generation(tok->find_token("<|endoftext|>")));
  EXPECT_FALSE(tok->is_end_of_generation(im_start));
  const ChatTemplate ct = ChatTemplate::for_tokenizer(*tok);
  EXPECT_EQ(ct.family(), ChatFamily::kChatml);
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  const std::string text = ct.render(m, true)->text;
  EXPECT_TRUE(text.starts_with("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud."));
  const auto ids = tok->encode(text, true, true);
  EXPECT_EQ(ids.front(), im_start);  // no BOS: add_bos_token is false
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_start), 3);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), im_end), 2);
}

TEST(RealModels, Gemma3) {
  const Tokenizer* tok = testing_util::real_model_tokenizer({"llama/default"}, "gemma");
  if (tok == nullptr || tok->find_token("<start_of_turn>") < 0) {
    GTEST_SKIP() << "no Gemma 3 model in test-models/ (scripts/fetch-models.sh)";
  }
  EXPECT_TRUE(tok->is_end_of_generation(tok->find_token("<end_of_turn>")));
  EXPECT_TRUE(tok->is_end_of_generation(tok->eos_id()));
  // Ids that transformers' GGUF tokenizer converter (5.24) also gives for this file.
  EXPECT_EQ(tok->encode("Hello, we can use", false, false),
            (std::vector<int32_t>{9259, 236764, 692, 740, 1161}));
  EXPECT_EQ(tok->encode("\xC3\x85\xC3\x84\xC3\x96 fa\xC3\xA7"
                        "ade na\xC3\xAFve",
                        false, false),
            (std::vector<int32_t>{239685, 239122, 238255, 96008, 120362}));
  EXPECT_EQ(tok->encode("    indented code\n        more", false, false),
            (std::vector<int32_t>{140, 724, 16764, 3393, 107, 144, 5576}));
  // Gemma has no space prefix: "Hello" and " Hello" differ.
  EXPECT_NE(tok->encode("Hello", false, false), tok->encode(" Hello", false, false));
  EXPECT_EQ(tok->detokenize(tok->encode("Hello, world", false, false)), "Hello, world");
  const ChatTemplate ct = ChatTemplate::for_tokenizer(*tok);  // the base model has no template
  EXPECT_EQ(ct.family(), ChatFamily::kGemma);
  const std::vector<ChatMessage> m = {{"user", "Hi"}};
  const auto ids = tok->encode(*ct.render(m, true), true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], tok->bos_id());
  EXPECT_EQ(ids[1], tok->find_token("<start_of_turn>"));
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->bos_id()), 1);
}

}  // namespace
}  // namespace hypura::tokenizer
