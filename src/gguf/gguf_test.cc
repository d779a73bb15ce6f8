// Reader tests: type traits, the golden models against manifest.json, in-memory parsing,
// and clean failure on every truncation of a real header.
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace hypura::gguf {
namespace {

using nlohmann::json;

const std::string kGolden = HYPURA_GOLDEN_DIR;

json load_manifest() {
  std::ifstream in(kGolden + "/manifest.json");
  return json::parse(in);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(TypeTraits, KnownTypes) {
  EXPECT_STREQ(type_traits(GgmlType::Q4_K).name, "Q4_K");
  EXPECT_EQ(type_traits(GgmlType::Q4_K).block_size, 256);
  EXPECT_EQ(type_traits(GgmlType::Q4_K).type_size, 144);
  EXPECT_EQ(type_traits(GgmlType::Q8_0).type_size, 34);
  EXPECT_EQ(type_traits(GgmlType::Q6_K).type_size, 210);
  EXPECT_EQ(type_traits(GgmlType::BF16).type_size, 2);
  EXPECT_EQ(row_bytes(GgmlType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(GgmlType::F32, 3), 12u);
  EXPECT_STREQ(type_traits(39)->name, "MXFP4");  // gpt-oss's experts: E8M0 + 16 nibbles
  EXPECT_EQ(row_bytes(GgmlType::MXFP4, 2880), 90u * 17u);
}

TEST(TypeTraits, RetiredAndUnknownIds) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(type_traits(id), nullptr) << id;
  }
  int known = 0;
  for (uint32_t id = 0; id < 64; ++id) known += type_traits(id) != nullptr;
  EXPECT_EQ(known, 34);  // ids 0-41 minus the eight retired ones
}

// Compares one manifest metadata value with the parsed one.
void expect_value(const std::string& key, const json& want, const Value& got) {
  if (want.is_string()) {
    const std::string& s = want.get_ref<const std::string&>();
    if (s.rfind("<array of ", 0) == 0) {
      ASSERT_NE(got.as_array(), nullptr) << key;
      EXPECT_EQ(std::to_string(got.as_array()->size()), s.substr(10, s.size() - 11)) << key;
    } else {
      ASSERT_NE(got.as_string(), nullptr) << key;
      EXPECT_EQ(*got.as_string(), s) << key;
    }
  } else if (want.is_boolean()) {
    EXPECT_EQ(got.as_bool(), want.get<bool>()) << key;
  } else if (want.is_number_integer()) {
    EXPECT_EQ(got.as_i64(), want.get<int64_t>()) << key;
  } else if (want.is_number_float()) {
    ASSERT_TRUE(got.as_f64().has_value()) << key;
    // The manifest prints the float32 value as a double: equal to ~1e-15 relative.
    EXPECT_NEAR(*got.as_f64(), want.get<double>(), 1e-12 * std::abs(want.get<double>())) << key;
  } else if (want.is_array()) {
    ASSERT_NE(got.as_array(), nullptr) << key;
    ASSERT_EQ(got.as_array()->size(), want.size()) << key;
    for (size_t i = 0; i < want.size(); ++i) expect_value(key, want[i], (*got.as_array())[i]);
  } else {
    FAIL() << key << ": unexpected manifest value " << want.dump();
  }
}

void expect_matches_manifest(const GgufFile& f, const json& m) {
  EXPECT_EQ(f.architecture(), m["arch"].get<std::string>());
  EXPECT_EQ(f.total_bytes(), m["size_bytes"].get<uint64_t>());
  // Every manifest key is present with its value; the file has no others.
  for (const auto& [key, want] : m["metadata"].items()) {
    const Value* got = f.metadata().find(key);
    ASSERT_NE(got, nullptr) << key;
    expect_value(key, want, *got);
  }
  EXPECT_EQ(f.metadata().size(), m["metadata"].size());
  const json& tensors = m["tensors"];
  ASSERT_EQ(f.tensors().size(), tensors.size());
  int64_t n_params = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, tensors[i]["name"].get<std::string>());
    EXPECT_STREQ(type_name(t.type), tensors[i]["type"].get<std::string>().c_str()) << t.name;
    EXPECT_EQ(t.ne, tensors[i]["ne"].get<std::vector<int64_t>>()) << t.name;
    EXPECT_EQ(t.offset % f.alignment(), 0u) << t.name;
    EXPECT_EQ(f.find_tensor(t.name), &t);
    n_params += t.n_elements();
  }
  EXPECT_EQ(n_params, m["n_params"].get<int64_t>());
}

TEST(GoldenModels, MatchManifest) {
  json manifest = load_manifest();
  ASSERT_EQ(manifest["models"].size(), 12u);
  for (const auto& [name, m] : manifest["models"].items()) {
    SCOPED_TRACE(name);
    auto f = GgufFile::open(kGolden + "/" + m["file"].get<std::string>());
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->version(), 3u);
    expect_matches_manifest(*f, m);
  }
}

TEST(GoldenModels, ParseFromMemoryEqualsOpen) {
  std::string path = kGolden + "/qwen2-q4_k_m.gguf";
  std::vector<uint8_t> bytes = read_file(path);
  auto a = GgufFile::parse(bytes, "qwen2");
  auto b = GgufFile::open(path);
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    EXPECT_EQ(a->tensors()[i].offset, b->tensors()[i].offset);
    EXPECT_EQ(a->tensors()[i].n_bytes, b->tensors()[i].n_bytes);
  }
  EXPECT_EQ(a->data_offset(), b->data_offset());
}

TEST(GoldenModels, TensorDataReadable) {
  auto f = GgufFile::open(kGolden + "/llama-f32.gguf");
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const TensorInfo* norm = f->find_tensor("blk.0.attn_norm.weight");
  ASSERT_NE(norm, nullptr);
  std::vector<float> w(norm->n_elements());
  ASSERT_TRUE(
      f->read_tensor_data(*norm, {reinterpret_cast<uint8_t*>(w.data()), w.size() * sizeof(float)}));
  // Norm weights are 1 + N(0, 0.1^2) (golden/README.md): the mean is near 1.
  double mean = 0;
  for (float x : w) mean += x;
  mean /= w.size();
  EXPECT_NEAR(mean, 1.0, 0.05);
}

TEST(GoldenModels, VocabOnlyFilesParse) {
  for (const char* name : {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"}) {
    auto f = GgufFile::open(kGolden + "/tokenizer/" + name);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_NE(f->metadata().get_array("tokenizer.ggml.tokens"), nullptr);
  }
}

// Every prefix of a real file's header must fail with a message, never crash.
TEST(Truncation, EveryHeaderPrefixFailsCleanly) {
  std::vector<uint8_t> bytes = read_file(kGolden + "/mixtral-q4_k_m.gguf");
  auto full = GgufFile::parse(bytes);
  ASSERT_TRUE(full.is_ok());
  uint64_t header = full->data_offset();
  for (uint64_t n = 0; n < header + 64; n += (n < 256 ? 1 : 7)) {
    auto r = GgufFile::parse(std::span(bytes).first(n));
    ASSERT_FALSE(r.is_ok()) << n;
    EXPECT_FALSE(r.status().message().empty());
  }
  auto cut = GgufFile::parse(std::span(bytes).first(bytes.size() - 1));
  ASSERT_FALSE(cut.is_ok());
  EXPECT_NE(cut.status().message().find("extends past end of file"), std::string::npos)
      << cut.status().message();
}

// Version 2 has the same layout as 3; a golden file relabelled as v2 parses the same.
TEST(Versions, Version2ParsesLikeVersion3) {
  std::vector<uint8_t> bytes = read_file(kGolden + "/qwen3-q4_k_m.gguf");
  bytes[4] = 2;
  auto f = GgufFile::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors().size(), 24u);
  bytes[4] = 4;
  auto v4 = GgufFile::parse(bytes);
  ASSERT_FALSE(v4.is_ok());
  EXPECT_EQ(v4.status().code(), StatusCode::kUnsupported);
}

TEST(Open, MissingFileIsNotFound) {
  auto r = GgufFile::open("/nonexistent/model.gguf");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace hypura::gguf
