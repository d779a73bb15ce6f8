// The hand-made hostile corpus (tests/hostile/): every file gets exactly its expected
// error (tests/hostile/expected.tsv), whether opened from disk or parsed from memory.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gguf/gguf.h"

namespace hypura::gguf {
namespace {

const std::string kHostile = std::string(HYPURA_SOURCE_DIR) + "/tests/hostile";

std::vector<std::pair<std::string, std::string>> load_expected() {
  std::ifstream in(kHostile + "/expected.tsv");
  std::vector<std::pair<std::string, std::string>> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    cases.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return cases;
}

TEST(HostileCorpus, EveryFileGetsItsError) {
  auto cases = load_expected();
  ASSERT_GE(cases.size(), 30u);
  for (const auto& [file, expected] : cases) {
    SCOPED_TRACE(file);
    std::string path = kHostile + "/" + file;
    auto opened = GgufFile::open(path);
    if (expected == "ok") {
      EXPECT_TRUE(opened.is_ok()) << opened.status().message();
      continue;
    }
    ASSERT_FALSE(opened.is_ok());
    EXPECT_EQ(opened.status().message(), path + ": " + expected);

    std::ifstream in(path, std::ios::binary);
    std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in),
                               std::istreambuf_iterator<char>()};
    auto parsed = GgufFile::parse(bytes, file);
    ASSERT_FALSE(parsed.is_ok());
    EXPECT_EQ(parsed.status().message(), file + ": " + expected);
  }
}

// Every .gguf in the folder is listed, so a new case cannot go untested.
TEST(HostileCorpus, EveryFileIsListed) {
  auto cases = load_expected();
  size_t n_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kHostile)) {
    if (entry.path().extension() != ".gguf") continue;
    ++n_files;
    std::string name = entry.path().filename().string();
    EXPECT_TRUE(
        std::any_of(cases.begin(), cases.end(), [&](const auto& c) { return c.first == name; }))
        << name << " has no line in expected.tsv";
  }
  EXPECT_EQ(n_files, cases.size());
}

// Header, one key "big" holding an array of n u8 zeros. Sized once up front (GCC 12
// misreports growing a vector here).
std::vector<uint8_t> big_u8_array_file(uint64_t n) {
  const size_t header = 24 + 8 + 3 + 4 + 4 + 8;
  std::vector<uint8_t> bytes(header + n, 0);
  size_t at = 0;
  auto put = [&](const void* p, size_t k) {
    std::memcpy(bytes.data() + at, p, k);
    at += k;
  };
  const uint32_t fields32[] = {0x46554747, 3};
  put(fields32, 8);
  const uint64_t counts[] = {0, 1, 3};  // tensors, kv, key length
  put(counts, sizeof(counts));
  put("big", 3);
  const uint32_t types[] = {static_cast<uint32_t>(ValueType::ARRAY),
                            static_cast<uint32_t>(ValueType::UINT8)};
  put(types, sizeof(types));
  put(&n, 8);
  return bytes;
}

// The metadata value budget stops files whose small values would cost far more memory
// than their bytes (48-byte Values for 1-byte u8 elements).
TEST(HostileCorpus, MetadataValueBudget) {
  auto r = GgufFile::parse(big_u8_array_file((1ull << 22) + 1), "big");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("more than 4194304 metadata values"), std::string::npos)
      << r.status().message();
}

// In a child process: whether parsing `bytes` with `bytes_limit` of address space ends in
// the value-budget error rather than an allocation failure.
bool parse_fails_cleanly_within(const std::vector<uint8_t>& bytes, uint64_t bytes_limit) {
  const rlimit limit{bytes_limit, bytes_limit};
  setrlimit(RLIMIT_AS, &limit);
  auto r = GgufFile::parse(bytes, "big");
  return !r.is_ok() &&
         r.status().message().find("30000000 elements: more than 4194304 metadata values") !=
             std::string::npos;
}

// Issue 14: a 30M-element u8 array (30 MB of file) made the reader reserve 30M 48-byte
// Values (1.4 GB) before the budget check, which aborted under `ulimit -v 1G`. The count
// is now checked first: the parse fails cleanly inside a 1 GiB address space.
TEST(HostileCorpus, HugeArrayFailsWithinOneGiB) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves more address space than the limit";
#endif
  const std::vector<uint8_t> bytes = big_u8_array_file(30'000'000);
  EXPECT_EXIT(std::exit(parse_fails_cleanly_within(bytes, 1ull << 30) ? 0 : 1),
              ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace hypura::gguf
