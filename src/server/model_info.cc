#include "server/model_info.h"

#include <sys/stat.h>

#include <cstdio>
#include <ctime>
#include <filesystem>

#include "gguf/gguf.h"
#include "server/api_response.h"

namespace hypura::server {
namespace {

using json = nlohmann::json;

json value_to_json(const gguf::Value& v);

json array_to_json(const std::vector<gguf::Value>& items) {
  if (items.size() > kMaxInfoArray) return nullptr;  // vocabularies, merges: too big to show
  json out = json::array();
  for (const gguf::Value& item : items) out.push_back(value_to_json(item));
  return out;
}

json value_to_json(const gguf::Value& v) {
  if (const auto* a = v.as_array()) return array_to_json(*a);
  if (const auto* s = v.as_string()) return *s;
  if (auto b = v.as_bool(); b && v.type == gguf::ValueType::BOOL) return *b;
  if (v.type == gguf::ValueType::FLOAT32 || v.type == gguf::ValueType::FLOAT64) {
    return v.as_f64().value_or(0.0);
  }
  if (auto u = v.as_u64()) return *u;
  if (auto i = v.as_i64()) return *i;
  return nullptr;
}

// FNV-1a, 64 bits: the fingerprint's building block (not a cryptographic hash).
uint64_t fnv1a(std::string_view s, uint64_t h) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string fingerprint(const std::string& key) {
  std::string hex;
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 4; ++i) {
    h = fnv1a(key, h + static_cast<uint64_t>(i));
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    hex += buf;
  }
  return hex;
}

}  // namespace

std::string format_parameter_size(uint64_t n_params) {
  char buf[32];
  const double n = static_cast<double>(n_params);
  if (n >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  } else if (n >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n_params));
  }
  return buf;
}

std::string file_type_name(uint64_t file_type) {
  // llama.cpp's LLAMA_FTYPE_MOSTLY_* numbering, as stored in general.file_type.
  static const std::pair<uint64_t, const char*> kNames[] = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},       {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},      {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"},    {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"},    {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"},    {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"},    {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"},   {38, "MXFP4_MOE"},
  };
  for (const auto& [id, name] : kNames) {
    if (id == file_type) return name;
  }
  return "unknown";
}

ModelInfo model_info_from_gguf(const gguf::GgufFile& file, const std::string& path,
                               const std::string& alias, int64_t context_length) {
  ModelInfo info;
  info.name = alias.empty() ? std::filesystem::path(path).stem().string() : alias;
  if (info.name.find(':') == std::string::npos) info.name += ":latest";
  info.family = file.architecture();
  uint64_t n_params = 0;
  for (const gguf::TensorInfo& t : file.tensors())
    n_params += static_cast<uint64_t>(t.n_elements());
  info.parameter_size = format_parameter_size(n_params);
  auto file_type = file.metadata().get_u64("general.file_type");
  info.quantization_level = file_type ? file_type_name(*file_type) : "unknown";
  info.size_bytes = file.total_bytes();
  for (const auto& [key, value] : file.metadata().entries())
    info.model_info[key] = value_to_json(value);
  info.model_info["general.parameter_count"] = n_params;
  info.chat_template = file.metadata().get_string("tokenizer.chat_template").value_or("");
  info.context_length = context_length;
  struct stat st {};
  int64_t mtime_ns = 0;
  if (::stat(path.c_str(), &st) == 0) {
    mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  }
  info.modified_at = rfc3339(mtime_ns);
  info.created = mtime_ns / 1'000'000'000;
  info.digest =
      fingerprint(path + "|" + std::to_string(info.size_bytes) + "|" + std::to_string(mtime_ns));
  return info;
}

}  // namespace hypura::server
