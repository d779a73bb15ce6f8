#include "server/model_info.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gguf/gguf.h"

namespace hypura::server {
namespace {

using json = nlohmann::json;

TEST(ModelInfo, Formatting) {
  EXPECT_EQ(format_parameter_size(8'030'000'000), "8.0B");
  EXPECT_EQ(format_parameter_size(134'500'000), "134.5M");
  EXPECT_EQ(format_parameter_size(984'320), "984.3K");
  EXPECT_EQ(format_parameter_size(12), "12");
  EXPECT_EQ(file_type_name(15), "Q4_K_M");
  EXPECT_EQ(file_type_name(2), "Q4_0");
  EXPECT_EQ(file_type_name(999), "unknown");
}

// The golden random-weight llama, checked against the facts in its manifest.
TEST(ModelInfo, FromGoldenGguf) {
  const std::string dir = HYPURA_GOLDEN_DIR;
  const std::string path = dir + "/llama-q4_k_m.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  std::ifstream f(dir + "/manifest.json");
  const json manifest = json::parse(f)["models"]["llama-q4_k_m"];
  auto file = gguf::GgufFile::open(path);
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  ModelInfo info = model_info_from_gguf(*file, path, "", 512);
  EXPECT_EQ(info.name, "llama-q4_k_m:latest");
  EXPECT_EQ(info.family, "llama");
  EXPECT_EQ(info.quantization_level, "Q4_K_M");
  EXPECT_EQ(info.size_bytes, manifest["size_bytes"].get<uint64_t>());
  EXPECT_EQ(info.model_info["general.parameter_count"], manifest["n_params"]);
  EXPECT_EQ(info.parameter_size, format_parameter_size(manifest["n_params"].get<uint64_t>()));
  EXPECT_EQ(info.model_info["llama.block_count"], manifest["metadata"]["llama.block_count"]);
  EXPECT_EQ(info.model_info["general.architecture"], "llama");
  EXPECT_TRUE(info.model_info["tokenizer.ggml.tokens"].is_null());  // vocabulary: too big
  EXPECT_EQ(info.digest.size(), 64u);
  EXPECT_EQ(info.modified_at.size(), 30u);
  EXPECT_EQ(info.context_length, 512);
  EXPECT_EQ(model_info_from_gguf(*file, path, "mine", 512).name, "mine:latest");
  EXPECT_EQ(model_info_from_gguf(*file, path, "", 512).digest, info.digest);  // stable
}

}  // namespace
}  // namespace hypura::server
