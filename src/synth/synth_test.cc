// Synthetic model tests: tensor plans against llama-quantize's real choices (golden
// models), block statistics, chunking-independent determinism, vocabulary resizing, and
// tiny models of every architecture read back by our reader and by the gguf PyPI package.
#include "synth/synth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "gguf/writer.h"
#include "quant/quant.h"

namespace hypura::synth {
namespace {

namespace fs = std::filesystem;
using gguf::GgmlType;
using nlohmann::json;

const std::string kGolden = HYPURA_GOLDEN_DIR;
const std::string kSource = HYPURA_SOURCE_DIR;

// A scratch directory removed at the end of each test.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("hypura-synth-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// A small byte-level BPE vocabulary: 256 single-character tokens "c0".."c255" would not
// exercise merges, so: tokens "a".."z", every two-letter "xy" for x,y in a..h, and the
// specials; merges "x y" for the pairs. bos 0, eos 1.
std::string write_test_vocab(const TempDir& dir) {
  std::vector<std::string> tokens = {"<s>", "</s>"};
  for (char c = 'a'; c <= 'z'; ++c) tokens.push_back(std::string(1, c));
  std::vector<std::string> merges;
  for (char x = 'a'; x <= 'h'; ++x) {
    for (char y = 'a'; y <= 'h'; ++y) {
      tokens.push_back(std::string{x, y});
      merges.push_back(std::string{x, ' ', y});
    }
  }
  gguf::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<gguf::Value> types;
  for (size_t i = 0; i < tokens.size(); ++i) {
    types.push_back(
        gguf::Value{gguf::ValueType::INT32, gguf::ValueType::UINT8, int64_t{i < 2 ? 3 : 1}});
  }
  w.add_metadata("tokenizer.ggml.token_type",
                 gguf::Value{gguf::ValueType::ARRAY, gguf::ValueType::INT32, std::move(types)});
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.bos_token_id", 0);
  w.add_u32("tokenizer.ggml.eos_token_id", 1);
  w.add_string("tokenizer.chat_template", "{{ messages }}");
  std::string path = dir.file("vocab.gguf");
  EXPECT_TRUE(w.write(path, std::vector<std::vector<uint8_t>>{}).is_ok());
  return path;
}

// ---- tensor plans -------------------------------------------------------------------

Arch golden_arch(const std::string& model) {
  if (model.rfind("mixtral", 0) == 0) return Arch::kMixtral;
  return parse_arch(model.substr(0, model.find('-'))).value();
}

// The spec a golden model was made with, from its manifest metadata.
SynthSpec golden_spec(const std::string& model, const json& md) {
  SynthSpec spec;
  spec.arch = golden_arch(model);
  std::string a = arch_gguf_name(spec.arch) + std::string(".");
  Shape& s = spec.shape;
  s.n_vocab = 384;
  s.n_embd = md[a + "embedding_length"];
  s.n_layer = md[a + "block_count"];
  s.n_head = md[a + "attention.head_count"];
  s.n_head_kv = md[a + "attention.head_count_kv"];
  s.head_dim = md.value(a + "attention.key_length", 0);
  s.n_ff = md[a + "feed_forward_length"];
  s.n_expert = md.value(a + "expert_count", 0);
  s.n_expert_used = md.value(a + "expert_used_count", 0);
  s.n_ff_exp = md.value(a + "expert_feed_forward_length", 0);
  spec.vocab_from = "unused";
  return spec;
}

// Every tensor name, type and shape that llama-quantize produced for the golden Q4_K_M
// models is what the planner produces for the same shapes (tied heads where golden has
// no output.weight).
TEST(SynthPlan, MatchesLlamaQuantizeOnGoldenModels) {
  std::ifstream in(kGolden + "/manifest.json");
  ASSERT_TRUE(in) << "golden manifest missing";
  json manifest = json::parse(in);
  int checked = 0;
  for (const auto& [model, entry] : manifest["models"].items()) {
    if (model.find("q4_k_m") == std::string::npos) continue;
    SynthSpec spec = golden_spec(model, entry["metadata"]);
    std::map<std::string, std::pair<std::string, std::vector<int64_t>>> want;
    for (const json& t : entry["tensors"]) want[t["name"]] = {t["type"], t["ne"]};
    spec.tied_embeddings = !want.count("output.weight");
    Result<SynthSpec> valid = validate(spec);
    ASSERT_TRUE(valid.is_ok()) << model << ": " << valid.status().message();
    std::map<std::string, std::pair<std::string, std::vector<int64_t>>> got;
    for (const TensorPlan& t : plan_tensors(*valid)) got[t.name] = {gguf::type_name(t.type), t.ne};
    EXPECT_EQ(got, want) << model;
    ++checked;
  }
  EXPECT_EQ(checked, 6);
}

// Parameter counts of the presets against the public models they copy.
TEST(SynthPlan, PresetParameterCounts) {
  struct Case {
    const char* preset;
    double params;  // public figure
  } cases[] = {{"1b", 1.100e9},
               {"8b", 8.030e9},
               {"70b", 70.55e9},
               {"mixtral-8x7b", 46.70e9},
               {"qwen3-30b-a3b", 30.53e9},
               {"gpt-oss-20b", 20.91e9},
               {"gpt-oss-120b", 116.83e9},
               {"deepseek-v3", 671.0e9},
               {"deepseek-v2-lite", 15.7e9}};
  for (const Case& c : cases) {
    Preset p = find_preset(c.preset).value();
    SynthSpec spec;
    spec.arch = p.default_arch;
    spec.shape = preset_shape(p, spec.arch).value();
    spec.vocab_from = "unused";
    SynthSpec valid = validate(spec).value();
    SynthSummary sum = summarize(plan_tensors(valid));
    EXPECT_NEAR(static_cast<double>(sum.n_params) / c.params, 1.0, 0.01) << c.preset;
  }
}

// --header-only: a 377 GiB deepseek-v3 file that opens and plans but takes no disk.
TEST(SynthWrite, HeaderOnlyIsASparseFileOfFullSize) {
  TempDir dir;
  Preset p = find_preset("deepseek-v3").value();
  SynthSpec spec;
  spec.arch = p.default_arch;
  spec.shape = preset_shape(p, spec.arch).value();
  spec.vocab_from = write_test_vocab(dir);
  spec.header_only = true;
  Vocab vocab = load_vocab(spec.vocab_from, spec.shape.n_vocab).value();
  SynthSpec valid = validate(spec).value();
  const std::string path = dir.file("v3.gguf");
  ASSERT_TRUE(write_model(valid, vocab, path).is_ok());
  auto file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  EXPECT_EQ(file->tensors().size(), plan_tensors(valid).size());
  EXPECT_GT(fs::file_size(path), summarize(plan_tensors(valid)).data_bytes);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_blocks) * 512, uint64_t{64} << 20) << "not sparse";
}

// The SPEC's file sizes, which are GiB as tools print them: Llama 3.3 70B Q4_K_M 39.6
// and Mixtral 8x7B Q5_K_M 30.9 (the real files carry a few MB of tokenizer besides).
TEST(SynthPlan, QuantMixSizesMatchRealFiles) {
  auto bytes = [](const char* preset, QuantMix mix) {
    Preset p = find_preset(preset).value();
    SynthSpec spec;
    spec.arch = p.default_arch;
    spec.shape = preset_shape(p, spec.arch).value();
    spec.mix = mix;
    spec.vocab_from = "unused";
    return static_cast<double>(summarize(plan_tensors(validate(spec).value())).data_bytes);
  };
  const double gib = 1024.0 * 1024.0 * 1024.0;
  EXPECT_NEAR(bytes("70b", QuantMix::kQ4_K_M) / (39.6 * gib), 1.0, 0.01);
  EXPECT_NEAR(bytes("mixtral-8x7b", QuantMix::kQ5_K_M) / (30.9 * gib), 1.0, 0.01);
}

// MXFP4_MOE as llama-quantize makes it: stacked experts MXFP4, the router and 1-D
// tensors F32, every other matrix Q8_0.
TEST(SynthPlan, Mxfp4MoeMix) {
  SynthSpec spec;
  spec.arch = Arch::kQwen3Moe;
  spec.shape = preset_shape(find_preset("tiny").value(), spec.arch).value();
  spec.mix = QuantMix::kMxfp4Moe;
  spec.vocab_from = "unused";
  int experts = 0;
  for (const TensorPlan& t : plan_tensors(validate(spec).value())) {
    const bool stacked = t.ne.size() == 3;
    experts += stacked;
    const GgmlType want = stacked ? GgmlType::MXFP4
                          : t.ne.size() == 1 || t.name.find("gate_inp") != std::string::npos
                              ? GgmlType::F32
                              : GgmlType::Q8_0;
    EXPECT_EQ(t.type, want) << t.name;
  }
  EXPECT_EQ(experts, 3 * spec.shape.n_layer);
  EXPECT_EQ(parse_mix("mxfp4_moe").value(), QuantMix::kMxfp4Moe);
  EXPECT_EQ(mix_file_type(QuantMix::kMxfp4Moe), 38u);
}

TEST(SynthPlan, ValidateRejectsImpossibleShapes) {
  SynthSpec base;
  base.shape = preset_shape(find_preset("tiny").value(), Arch::kLlama).value();
  base.vocab_from = "x";
  ASSERT_TRUE(validate(base).is_ok());
  SynthSpec s = base;
  s.shape.n_head_kv = 3;  // 4 heads do not split into 3 groups
  EXPECT_FALSE(validate(s).is_ok());
  s = base;
  s.shape.n_expert = 4;  // experts on a dense architecture
  EXPECT_FALSE(validate(s).is_ok());
  s = base;
  s.shape.n_ff = 500;  // not a multiple of 32 for a quantized mix...
  EXPECT_FALSE(validate(s).is_ok());
  s.mix = QuantMix::kF16;  // ...but fine in F16
  EXPECT_TRUE(validate(s).is_ok());
  s = base;
  s.vocab_from = "";
  EXPECT_FALSE(validate(s).is_ok());
  EXPECT_FALSE(preset_shape(find_preset("8b").value(), Arch::kQwen3Moe).is_ok());
  EXPECT_FALSE(preset_shape(find_preset("moe").value(), Arch::kLlama).is_ok());
  EXPECT_FALSE(parse_arch("gpt2").is_ok());
  EXPECT_EQ(parse_mix("q5_k_m").value(), QuantMix::kQ5_K_M);
  EXPECT_EQ(parse_mix("F32").value(), QuantMix::kF32);
}

// F32: every tensor F32 and general.file_type ALL_F32 (0), the input llama-quantize takes.
TEST(SynthPlan, F32MixIsAllF32) {
  SynthSpec spec;
  spec.arch = Arch::kQwen3Moe;
  spec.shape = preset_shape(find_preset("tiny").value(), spec.arch).value();
  spec.shape.n_vocab = 384;
  spec.mix = QuantMix::kF32;
  spec.vocab_from = "x";
  spec.logit_scale = 3;  // scales the head only
  for (const TensorPlan& t : plan_tensors(validate(spec).value())) {
    EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    const float base = 1.0f / std::sqrt(static_cast<float>(t.ne[0]));
    const float scale = t.name == "output.weight" ? 3.0f : 1.0f;
    if (t.name == "output.weight" || t.name == "blk.0.attn_q.weight") {
      EXPECT_FLOAT_EQ(t.values.std, scale * base) << t.name;
    }
  }
  EXPECT_EQ(mix_file_type(QuantMix::kF32), 0u);
  spec.logit_scale = 0;
  EXPECT_FALSE(validate(spec).is_ok());
}

// ---- random blocks ------------------------------------------------------------------

const GgmlType kGenerated[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::Q8_0,
                               GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K,
                               GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::MXFP4};

TEST(SynthBlocks, AnyByteRangeMatchesTheWholeTensor) {
  for (GgmlType type : kGenerated) {
    TensorBytes gen(type, {0.0f, 0.05f}, 7);
    std::vector<uint8_t> whole(100 * gen.unit_bytes() + 13);
    gen.fill(0, whole);
    std::vector<uint8_t> pieces(whole.size());
    for (uint64_t at = 0, step = 1; at < pieces.size(); at += step, step = step * 3 % 997 + 1) {
      uint64_t n = std::min<uint64_t>(step, pieces.size() - at);
      gen.fill(at, std::span<uint8_t>(pieces.data() + at, n));
    }
    EXPECT_EQ(pieces, whole) << gguf::type_name(type);
    std::vector<uint8_t> other(whole.size());
    TensorBytes(type, {0.0f, 0.05f}, 8).fill(0, other);
    EXPECT_NE(other, whole) << gguf::type_name(type) << ": the seed must matter";
  }
}

// Dequantized with our reference dequantizers: mean ~0 and the requested std for every
// type; F16/F32 honour a mean too (norm gains).
TEST(SynthBlocks, DequantizedStatistics) {
  const int64_t n = 256 * 512;
  for (GgmlType type : kGenerated) {
    for (float mean : {0.0f, 1.0f}) {
      if (mean != 0.0f && type != GgmlType::F32 && type != GgmlType::F16) continue;
      const float std = 0.03f;
      TensorBytes gen(type, {mean, std}, 1);
      std::vector<uint8_t> bytes(quant::row_size(type, n));
      gen.fill(0, bytes);
      std::vector<float> x(n);
      quant::dequantize_row(type, bytes.data(), x.data(), n);
      double sum = 0, sum2 = 0;
      for (float v : x) {
        ASSERT_TRUE(std::isfinite(v));
        sum += v;
        sum2 += static_cast<double>(v) * v;
      }
      double m = sum / n;
      double sd = std::sqrt(sum2 / n - m * m);
      EXPECT_NEAR(m, mean, 0.05 * std) << gguf::type_name(type);
      EXPECT_NEAR(sd / std, 1.0, 0.05) << gguf::type_name(type);
    }
  }
  // MXFP4's power-of-two scales reach any std, e.g. 1/sqrt(2880) (gpt-oss's fan-in).
  for (float std : {1.0f / std::sqrt(2880.0f), 0.05f, 0.011f}) {
    TensorBytes gen(GgmlType::MXFP4, {0.0f, std}, 3);
    std::vector<uint8_t> bytes(quant::row_size(GgmlType::MXFP4, n));
    gen.fill(0, bytes);
    std::vector<float> x(n);
    quant::dequantize_row(GgmlType::MXFP4, bytes.data(), x.data(), n);
    double sum2 = 0;
    for (float v : x) sum2 += static_cast<double>(v) * v;
    EXPECT_NEAR(std::sqrt(sum2 / n) / std, 1.0, 0.05) << std;
  }
}

// ---- vocabulary -----------------------------------------------------------------------

const gguf::Value* entry(const Vocab& v, const std::string& key) {
  for (const auto& [k, value] : v.entries) {
    if (k == key) return &value;
  }
  return nullptr;
}

TEST(SynthVocab, PadsWithUnusedTokens) {
  TempDir dir;
  std::string path = write_test_vocab(dir);
  Vocab same = load_vocab(path, 0).value();
  EXPECT_EQ(same.n_vocab, 92);  // 2 specials + 26 letters + 64 pairs
  Vocab v = load_vocab(path, 100).value();
  EXPECT_EQ(v.n_vocab, 100);
  const auto& tokens = *entry(v, "tokenizer.ggml.tokens")->as_array();
  ASSERT_EQ(tokens.size(), 100u);
  EXPECT_EQ(*tokens[91].as_string(), "hh");
  EXPECT_EQ(*tokens[92].as_string(), "<unused_0>");
  EXPECT_EQ(*tokens[99].as_string(), "<unused_7>");
  const auto& types = *entry(v, "tokenizer.ggml.token_type")->as_array();
  ASSERT_EQ(types.size(), 100u);
  EXPECT_EQ(types[99].type, gguf::ValueType::INT32);
  EXPECT_EQ(*types[99].as_i64(), 5);  // UNUSED
  EXPECT_EQ(entry(v, "tokenizer.ggml.merges")->as_array()->size(), 64u);
  EXPECT_EQ(*entry(v, "tokenizer.chat_template")->as_string(), "{{ messages }}");
}

TEST(SynthVocab, TruncationDropsMergesPastTheEnd) {
  TempDir dir;
  std::string path = write_test_vocab(dir);
  // Keep the specials, the letters, and the pairs "aa".."ah" (ids 28..35).
  Vocab v = load_vocab(path, 36).value();
  EXPECT_EQ(entry(v, "tokenizer.ggml.tokens")->as_array()->size(), 36u);
  const auto& merges = *entry(v, "tokenizer.ggml.merges")->as_array();
  ASSERT_EQ(merges.size(), 8u);
  EXPECT_EQ(*merges[7].as_string(), "a h");
  // eos id 1 no longer fits a 1-token vocabulary.
  Result<Vocab> bad = load_vocab(path, 1);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("eos_token_id"), std::string::npos);
}

// ---- whole files -----------------------------------------------------------------------

SynthSpec tiny_spec(Arch arch, const std::string& vocab, QuantMix mix = QuantMix::kQ4_K_M) {
  SynthSpec spec;
  spec.arch = arch;
  spec.shape = preset_shape(find_preset("tiny").value(), arch).value();
  spec.shape.n_vocab = 92;
  spec.mix = mix;
  spec.vocab_from = vocab;
  return validate(spec).value();
}

Status synth_file(const SynthSpec& spec, const std::string& path) {
  HYPURA_ASSIGN_OR_RETURN(Vocab vocab, load_vocab(spec.vocab_from, spec.shape.n_vocab));
  return write_model(spec, vocab, path);
}

// SynthSpec::chat_template replaces the vocabulary source's template (one key, not two).
TEST(SynthFile, ChatTemplateReplacesTheVocabularys) {
  TempDir dir;
  SynthSpec spec = tiny_spec(Arch::kLlama, write_test_vocab(dir));
  spec.chat_template = "{{ 'mine' }}";
  const std::string path = dir.file("templated.gguf");
  ASSERT_TRUE(synth_file(spec, path).is_ok());
  auto file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  EXPECT_EQ(file->metadata().get_string("tokenizer.chat_template").value_or(""), "{{ 'mine' }}");
}

// Every architecture in every mix: our reader validates the file and sees the planned
// tensors, and the gguf package agrees (metadata keys, llama.cpp's tensor set, statistics).
TEST(SynthFile, EveryArchitectureReadsBack) {
  TempDir dir;
  std::string vocab = write_test_vocab(dir);
  std::string check =
      std::string(HYPURA_PYTHON) + " " + kSource + "/src/synth/testing/check_synth.py";
  for (Arch arch : {Arch::kLlama, Arch::kQwen2, Arch::kQwen3, Arch::kGemma3, Arch::kMixtral,
                    Arch::kQwen3Moe, Arch::kGptOss}) {
    for (QuantMix mix : {QuantMix::kF32, QuantMix::kF16, QuantMix::kQ8_0, QuantMix::kQ4_K_M,
                         QuantMix::kQ5_K_M, QuantMix::kMxfp4Moe}) {
      SynthSpec spec = tiny_spec(arch, vocab, mix);
      std::string path = dir.file(std::string(arch_cli_name(arch)) + "-" + mix_name(mix) + ".gguf");
      ASSERT_TRUE(synth_file(spec, path).is_ok()) << path;
      Result<gguf::GgufFile> file = gguf::GgufFile::open(path);
      ASSERT_TRUE(file.is_ok()) << file.status().message();
      std::vector<TensorPlan> plan = plan_tensors(spec);
      ASSERT_EQ(file->tensors().size(), plan.size());
      for (size_t i = 0; i < plan.size(); ++i) {
        EXPECT_EQ(file->tensors()[i].name, plan[i].name);
        EXPECT_EQ(file->tensors()[i].type, plan[i].type) << plan[i].name;
        EXPECT_EQ(file->tensors()[i].ne, plan[i].ne) << plan[i].name;
      }
      EXPECT_EQ(file->architecture(), arch_gguf_name(arch));
      EXPECT_EQ(file->metadata().get_u64("general.file_type"), mix_file_type(mix));
      check += " " + path + " " + arch_cli_name(arch);
    }
  }
  // One Python run for all files: its start-up (numpy, gguf) costs most of the time.
  if (!fs::exists(HYPURA_PYTHON))
    GTEST_SKIP() << "no " << HYPURA_PYTHON << ": gguf cross-check skipped";
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

TEST(SynthFile, SameSeedSameBytes) {
  TempDir dir;
  std::string vocab = write_test_vocab(dir);
  SynthSpec spec = tiny_spec(Arch::kQwen3Moe, vocab);
  ASSERT_TRUE(synth_file(spec, dir.file("a.gguf")).is_ok());
  ASSERT_TRUE(synth_file(spec, dir.file("b.gguf")).is_ok());
  spec.seed += 1;
  ASSERT_TRUE(synth_file(spec, dir.file("c.gguf")).is_ok());
  std::vector<uint8_t> a = read_file(dir.file("a.gguf"));
  EXPECT_GT(a.size(), 1000000u);
  EXPECT_EQ(a, read_file(dir.file("b.gguf")));
  std::vector<uint8_t> c = read_file(dir.file("c.gguf"));
  ASSERT_EQ(c.size(), a.size());
  EXPECT_NE(c, a);
}

// The real vocabularies the presets use by default (scripts/fetch-models.sh fetches them).
TEST(SynthFile, RealVocabularies) {
  std::string models = kSource + "/test-models";
  std::string bpe = default_vocab_source(Arch::kLlama, models);
  if (bpe.empty()) GTEST_SKIP() << "no test models (run scripts/fetch-models.sh)";
  Vocab padded = load_vocab(bpe, 128256).value();  // 8b / 70b: SmolLM2's BPE, padded
  EXPECT_EQ(entry(padded, "tokenizer.ggml.tokens")->as_array()->size(), 128256u);
  EXPECT_EQ(*entry(padded, "tokenizer.ggml.model")->as_string(), "gpt2");
  EXPECT_NE(entry(padded, "tokenizer.chat_template"), nullptr);
  Vocab cut = load_vocab(bpe, 32000).value();  // 1b / moe / mixtral: truncated
  size_t merges = entry(cut, "tokenizer.ggml.merges")->as_array()->size();
  EXPECT_GT(merges, 20000u);
  EXPECT_LT(merges, 48900u);
}

}  // namespace
}  // namespace hypura::synth
