// Writer tests: round trips of every value type and tensor layout, byte-identical rewrite
// of a golden model, streamed fills in bounded chunks, and split models.
#include "gguf/writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace hypura::gguf {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = HYPURA_GOLDEN_DIR;

// A per-test scratch directory, removed afterwards.
class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("hypura_gguf_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Value scalar(ValueType t,
             std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<Value>> d) {
  return Value{t, ValueType::UINT8, std::move(d)};
}

Value array(ValueType elem, std::vector<Value> v) {
  return Value{ValueType::ARRAY, elem, std::move(v)};
}

// Deterministic bytes for tensor i at byte offset o.
uint8_t pattern(size_t i, uint64_t o) {
  return static_cast<uint8_t>((i * 131 + o * 7 + (o >> 9)) & 0xff);
}

TEST(Writer, RoundTripsEveryValueType) {
  TempDir dir;
  GgufWriter w(64);
  w.add_string("general.architecture", "llama");
  w.add_u32("u32", 4000000000u);
  w.add_f32("f32", 0.1f);
  w.add_bool("bool", true);
  w.add_metadata("u8", scalar(ValueType::UINT8, uint64_t{255}));
  w.add_metadata("i8", scalar(ValueType::INT8, int64_t{-128}));
  w.add_metadata("u16", scalar(ValueType::UINT16, uint64_t{65535}));
  w.add_metadata("i16", scalar(ValueType::INT16, int64_t{-32768}));
  w.add_metadata("i32", scalar(ValueType::INT32, int64_t{-2147483647 - 1}));
  w.add_metadata("u64", scalar(ValueType::UINT64, uint64_t{~0ull}));
  w.add_metadata("i64", scalar(ValueType::INT64, int64_t{INT64_MIN}));
  w.add_metadata("f64", scalar(ValueType::FLOAT64, 1e300));
  w.add_string_array("strings", {"a", "", "ünïcode", std::string(1000, 'x')});
  w.add_metadata("empty", array(ValueType::INT32, {}));
  w.add_metadata("nested", array(ValueType::ARRAY,
                                 {array(ValueType::UINT8, {scalar(ValueType::UINT8, uint64_t{1})}),
                                  array(ValueType::STRING, {scalar(ValueType::STRING, "z")})}));
  w.add_tensor("a", GgmlType::F32, {3});
  w.add_tensor("b", GgmlType::Q4_K, {512, 3, 2});
  w.add_tensor("c", GgmlType::Q8_0, {64, 5});
  w.add_tensor("empty", GgmlType::F16, {0, 4});
  w.add_tensor("d", GgmlType::BF16, {7, 1, 1, 2});
  std::string path = dir.file("all.gguf");
  ASSERT_TRUE(w.write(path, [](size_t i, uint64_t o, std::span<uint8_t> out) {
    for (size_t k = 0; k < out.size(); ++k) out[k] = pattern(i, o + k);
    return Status::ok();
  }));

  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->metadata().get_u64("general.alignment"), 64u);
  // Every key written comes back with the same stored type and value, in order.
  ASSERT_EQ(f->metadata().size(), 16u);
  EXPECT_EQ(*f->metadata().get_f64("f32"), double{0.1f});
  EXPECT_EQ(f->metadata().find("i64")->as_i64(), INT64_MIN);
  const auto& strings = *f->metadata().get_array("strings");
  EXPECT_EQ(*strings[2].as_string(), "ünïcode");
  EXPECT_EQ(strings[3].as_string()->size(), 1000u);
  EXPECT_EQ((*f->metadata().get_array("nested"))[1].array_type, ValueType::STRING);

  ASSERT_EQ(f->tensors().size(), 5u);
  const uint64_t want_bytes[] = {12, 2 * 144 * 3 * 2, 2 * 34 * 5, 0, 7 * 2 * 2};
  for (size_t i = 0; i < 5; ++i) {
    const TensorInfo& t = f->tensors()[i];
    EXPECT_EQ(t.n_bytes, want_bytes[i]) << t.name;
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    std::vector<uint8_t> data(t.n_bytes);
    ASSERT_TRUE(f->read_tensor_data(t, data));
    for (uint64_t k = 0; k < data.size(); ++k) ASSERT_EQ(data[k], pattern(i, k)) << t.name << k;
  }
  EXPECT_EQ(f->tensors()[1].ne, (std::vector<int64_t>{512, 3, 2}));
  EXPECT_EQ(fs::file_size(path), f->data_offset() + w.data_bytes());
}

TEST(Writer, KeepsStoredTypes) {
  TempDir dir;
  GgufWriter w;
  std::vector<std::pair<std::string, Value>> values = {
      {"u8", scalar(ValueType::UINT8, uint64_t{7})},
      {"i16", scalar(ValueType::INT16, int64_t{-7})},
      {"f64", scalar(ValueType::FLOAT64, 0.1)},
      {"arr", array(ValueType::FLOAT32, {scalar(ValueType::FLOAT32, double{1.5f})})},
  };
  for (const auto& [k, v] : values) w.add_metadata(k, v);
  std::string path = dir.file("types.gguf");
  ASSERT_TRUE(w.write(path, std::vector<std::vector<uint8_t>>{}));
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  for (const auto& [k, v] : values) {
    ASSERT_NE(f->metadata().find(k), nullptr) << k;
    EXPECT_TRUE(*f->metadata().find(k) == v) << k;
  }
}

// Reading a golden model and writing it back gives the same bytes.
TEST(Writer, RewritesGoldenModelByteIdentical) {
  TempDir dir;
  for (const char* name : {"llama-q4_k_m.gguf", "qwen3moe-f32.gguf"}) {
    SCOPED_TRACE(name);
    std::string src = kGolden + "/" + name;
    auto f = GgufFile::open(src);
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    GgufWriter w(static_cast<uint32_t>(f->alignment()));
    for (const auto& [k, v] : f->metadata().entries()) w.add_metadata(k, v);
    std::vector<std::vector<uint8_t>> data;
    for (const TensorInfo& t : f->tensors()) {
      w.add_tensor(t.name, t.type, t.ne);
      data.emplace_back(t.n_bytes);
      ASSERT_TRUE(f->read_tensor_data(t, data.back()));
    }
    std::string out = dir.file(name);
    ASSERT_TRUE(w.write(out, data));
    EXPECT_TRUE(read_file(out) == read_file(src));
  }
}

TEST(Writer, StreamsInBoundedChunksInOrder) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("x", GgmlType::F32, {1000, 10});
  w.add_tensor("y", GgmlType::Q8_0, {32, 1});
  uint64_t max_chunk = 0;
  std::vector<std::pair<size_t, uint64_t>> calls;
  uint64_t last_done = 0;
  std::string path = dir.file("chunks.gguf");
  Status st = w.write(
      path,
      [&](size_t i, uint64_t o, std::span<uint8_t> out) {
        calls.emplace_back(i, o);
        max_chunk = std::max<uint64_t>(max_chunk, out.size());
        for (size_t k = 0; k < out.size(); ++k) out[k] = pattern(i, o + k);
        return Status::ok();
      },
      /*chunk_bytes=*/4096,
      [&](uint64_t done, uint64_t total) {
        EXPECT_GE(done, last_done);
        EXPECT_LE(done, total);
        last_done = done;
      });
  ASSERT_TRUE(st) << st.message();
  EXPECT_EQ(max_chunk, 4096u);
  // 40000 bytes in 4096-byte chunks = 10 calls, then one for y.
  ASSERT_EQ(calls.size(), 11u);
  EXPECT_EQ(calls[9], (std::pair<size_t, uint64_t>{0, 36864}));
  EXPECT_EQ(calls[10], (std::pair<size_t, uint64_t>{1, 0}));
  EXPECT_EQ(last_done, w.data_bytes());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  std::vector<uint8_t> y(34);
  ASSERT_TRUE(f->read_tensor_data(*f->find_tensor("y"), y));
  EXPECT_EQ(y[33], pattern(1, 33));
}

TEST(Writer, FillErrorRemovesFile) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("x", GgmlType::F32, {4096});
  std::string path = dir.file("fail.gguf");
  Status st = w.write(
      path,
      [](size_t, uint64_t o, std::span<uint8_t>) {
        return o > 0 ? io_error("disk on fire") : Status::ok();
      },
      1024);
  EXPECT_FALSE(st.is_ok());
  EXPECT_EQ(st.message(), "disk on fire");
  EXPECT_FALSE(fs::exists(path));
}

TEST(Writer, WrongDataSizeIsRejected) {
  TempDir dir;
  GgufWriter w;
  w.add_tensor("x", GgmlType::F32, {4});
  EXPECT_EQ(w.write(dir.file("x.gguf"), {std::vector<uint8_t>(15)}).code(),
            StatusCode::kInvalidArgument);
}

// Writes a model as `n` split files, tensors distributed round-robin.
void write_split(const TempDir& dir, int n, int skip_part = 0) {
  for (int part = 0; part < n; ++part) {
    GgufWriter w;
    if (part == 0) w.add_string("general.architecture", "llama");
    w.add_metadata("split.no", scalar(ValueType::UINT16, uint64_t(part)));
    w.add_metadata("split.count", scalar(ValueType::UINT16, uint64_t(n)));
    w.add_metadata("split.tensors.count", scalar(ValueType::INT32, int64_t(2 * n)));
    // std::string(1, 't') + ...: GCC 12 warns (-Wrestrict, falsely) on "t" + to_string().
    std::string t0 = std::string(1, 't').append(std::to_string(2 * part));
    std::string t1 = std::string(1, 't').append(std::to_string(2 * part + 1));
    w.add_tensor(t0, GgmlType::F32, {8});
    w.add_tensor(t1, GgmlType::F32, {8, 2});
    char name[64];
    std::snprintf(name, sizeof(name), "m-%05d-of-%05d.gguf", part + 1, n);
    if (part + 1 == skip_part) continue;
    ASSERT_TRUE(w.write(dir.file(name), [part](size_t i, uint64_t o, std::span<uint8_t> out) {
      for (size_t k = 0; k < out.size(); ++k) out[k] = pattern(part * 2 + i, o + k);
      return Status::ok();
    }));
  }
}

TEST(Split, OpensAsOneModel) {
  TempDir dir;
  write_split(dir, 3);
  // Any part's name opens the whole model.
  for (const char* first : {"m-00001-of-00003.gguf", "m-00003-of-00003.gguf"}) {
    auto f = GgufFile::open(dir.file(first));
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    EXPECT_EQ(f->paths().size(), 3u);
    ASSERT_EQ(f->tensors().size(), 6u);
    EXPECT_EQ(f->architecture(), "llama");
    const TensorInfo* t5 = f->find_tensor("t5");
    ASSERT_NE(t5, nullptr);
    EXPECT_EQ(t5->file_index, 2u);
    std::vector<uint8_t> data(t5->n_bytes);
    ASSERT_TRUE(f->read_tensor_data(*t5, data));
    EXPECT_EQ(data[10], pattern(5, 10));
    EXPECT_EQ(f->total_bytes(), fs::file_size(dir.file("m-00001-of-00003.gguf")) +
                                    fs::file_size(dir.file("m-00002-of-00003.gguf")) +
                                    fs::file_size(dir.file("m-00003-of-00003.gguf")));
  }
}

TEST(Split, MissingPartIsNotFound) {
  TempDir dir;
  write_split(dir, 3, /*skip_part=*/2);
  auto f = GgufFile::open(dir.file("m-00001-of-00003.gguf"));
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("m-00002-of-00003.gguf"), std::string::npos);
}

}  // namespace
}  // namespace hypura::gguf
