// ggml type traits, metadata value accessors and the Metadata table.
#include <array>
#include <cassert>
#include <cmath>
#include <limits>

#include "gguf/gguf.h"

namespace hypura::gguf {
namespace {

// Indexed by type id; {nullptr, 0, 0} marks retired or unassigned ids. Block sizes and
// bytes per block follow ggml's block structs (ggml-common.h).
constexpr int kNumTypeIds = 42;
constexpr std::array<TypeTraits, kNumTypeIds> kTypeTraits = {{
    {"F32", 1, 4},         // 0
    {"F16", 1, 2},         // 1
    {"Q4_0", 32, 18},      // 2
    {"Q4_1", 32, 20},      // 3
    {nullptr, 0, 0},       // 4: Q4_2, retired
    {nullptr, 0, 0},       // 5: Q4_3, retired
    {"Q5_0", 32, 22},      // 6
    {"Q5_1", 32, 24},      // 7
    {"Q8_0", 32, 34},      // 8
    {"Q8_1", 32, 36},      // 9: fp16 d and s + 32 int8 (gguf-py still says 40: stale)
    {"Q2_K", 256, 84},     // 10
    {"Q3_K", 256, 110},    // 11
    {"Q4_K", 256, 144},    // 12
    {"Q5_K", 256, 176},    // 13
    {"Q6_K", 256, 210},    // 14
    {"Q8_K", 256, 292},    // 15
    {"IQ2_XXS", 256, 66},  // 16
    {"IQ2_XS", 256, 74},   // 17
    {"IQ3_XXS", 256, 98},  // 18
    {"IQ1_S", 256, 50},    // 19
    {"IQ4_NL", 32, 18},    // 20
    {"IQ3_S", 256, 110},   // 21
    {"IQ2_S", 256, 82},    // 22
    {"IQ4_XS", 256, 136},  // 23
    {"I8", 1, 1},          // 24
    {"I16", 1, 2},         // 25
    {"I32", 1, 4},         // 26
    {"I64", 1, 8},         // 27
    {"F64", 1, 8},         // 28
    {"IQ1_M", 256, 56},    // 29
    {"BF16", 1, 2},        // 30
    {nullptr, 0, 0},       // 31: Q4_0_4_4, retired (repacking is done at load time now)
    {nullptr, 0, 0},       // 32: Q4_0_4_8, retired
    {nullptr, 0, 0},       // 33: Q4_0_8_8, retired
    {"TQ1_0", 256, 54},    // 34
    {"TQ2_0", 256, 66},    // 35
    {nullptr, 0, 0},       // 36: IQ4_NL_4_4, retired
    {nullptr, 0, 0},       // 37: IQ4_NL_4_8, retired
    {nullptr, 0, 0},       // 38: IQ4_NL_8_8, retired
    {"MXFP4", 32, 17},     // 39
    {"NVFP4", 64, 36},     // 40
    {"Q1_0", 128, 18},     // 41
}};

constexpr std::array<const char*, 13> kValueTypeNames = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};

}  // namespace

const TypeTraits* type_traits(uint32_t type_id) {
  if (type_id >= kTypeTraits.size() || kTypeTraits[type_id].name == nullptr) return nullptr;
  return &kTypeTraits[type_id];
}

const TypeTraits& type_traits(GgmlType type) {
  const TypeTraits* traits = type_traits(static_cast<uint32_t>(type));
  assert(traits != nullptr);
  return *traits;
}

const char* type_name(GgmlType type) {
  const TypeTraits* traits = type_traits(static_cast<uint32_t>(type));
  return traits ? traits->name : "unknown";
}

uint64_t row_bytes(GgmlType type, int64_t n) {
  const TypeTraits& t = type_traits(type);
  assert(n >= 0 && n % t.block_size == 0);
  return static_cast<uint64_t>(n / t.block_size) * static_cast<uint64_t>(t.type_size);
}

const char* value_type_name(ValueType type) {
  auto index = static_cast<uint32_t>(type);
  return index < kValueTypeNames.size() ? kValueTypeNames[index] : "unknown";
}

// ---- Value ----

std::optional<uint64_t> Value::as_u64() const {
  if (const auto* u = std::get_if<uint64_t>(&data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&data)) {
    if (*i >= 0) return static_cast<uint64_t>(*i);
  }
  return std::nullopt;
}

std::optional<int64_t> Value::as_i64() const {
  if (const auto* i = std::get_if<int64_t>(&data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&data)) {
    if (*u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return static_cast<int64_t>(*u);
    }
  }
  return std::nullopt;
}

std::optional<double> Value::as_f64() const {
  if (const auto* d = std::get_if<double>(&data)) return *d;
  if (const auto* u = std::get_if<uint64_t>(&data)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&data)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Value::as_bool() const {
  if (const auto* b = std::get_if<bool>(&data)) return *b;
  return std::nullopt;
}

const std::string* Value::as_string() const {
  return std::get_if<std::string>(&data);
}

const std::vector<Value>* Value::as_array() const {
  return std::get_if<std::vector<Value>>(&data);
}

// ---- Metadata ----

const Value* Metadata::find(std::string_view key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Metadata::add(std::string key, Value value) {
  assert(index_.count(key) == 0);
  index_.emplace(key, entries_.size());
  entries_.emplace_back(std::move(key), std::move(value));
}

std::optional<uint64_t> Metadata::get_u64(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_u64() : std::nullopt;
}

std::optional<double> Metadata::get_f64(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_f64() : std::nullopt;
}

std::optional<bool> Metadata::get_bool(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_bool() : std::nullopt;
}

std::optional<std::string> Metadata::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr || v->as_string() == nullptr) return std::nullopt;
  return *v->as_string();
}

const std::vector<Value>* Metadata::get_array(std::string_view key) const {
  const Value* v = find(key);
  return v ? v->as_array() : nullptr;
}

// ---- TensorInfo ----

int64_t TensorInfo::n_elements() const {
  // Shapes are validated on parse (product fits in int64), so no overflow here.
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

int64_t TensorInfo::n_rows() const {
  if (ne.empty()) return 0;
  int64_t n = 1;
  for (size_t i = 1; i < ne.size(); ++i) n *= ne[i];
  return n;
}

}  // namespace hypura::gguf
