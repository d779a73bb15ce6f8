// GGUF model files: types, metadata and tensor directory, parsed from untrusted bytes.
//
// Everything a later stage needs about a model file, without touching tensor data:
// the metadata key/values, and for each tensor its name, ggml type, shape and the byte
// range that holds it. Split models (name-00001-of-0000N.gguf) open as one GgufFile whose
// tensors carry the index of the file that holds them.
//
// The byte layout is documented where it is parsed (gguf.cc). Every count, length and
// offset is checked against the file size before use; failures return a Status that
// names the problem and the byte offset.
//
// Thread-safety: a GgufFile is immutable after open(); share it freely.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace hypura::gguf {

// ggml tensor type ids as stored in GGUF (ggml.h numbering; gaps are retired ids).
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
};

struct TypeTraits {
  const char* name;    // "Q4_K"
  int64_t block_size;  // elements per block
  int64_t type_size;   // bytes per block
};

// Traits of a type id, or nullptr when the id is not a known ggml type.
const TypeTraits* type_traits(uint32_t type_id);
const TypeTraits& type_traits(GgmlType type);  // REQUIRES: a known type
const char* type_name(GgmlType type);
// Bytes of a row of n elements. REQUIRES: n % block_size == 0.
uint64_t row_bytes(GgmlType type, int64_t n);

// Metadata value types (GGUF numbering).
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
const char* value_type_name(ValueType type);

// One metadata value. Integers widen to 64 bits, floats to double; the stored type is
// kept so a writer can round-trip the file exactly.
struct Value {
  ValueType type = ValueType::UINT32;
  ValueType array_type = ValueType::UINT8;  // element type when type == ARRAY
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<Value>> data;

  std::optional<uint64_t> as_u64() const;  // any integer type holding a value >= 0
  std::optional<int64_t> as_i64() const;   // any integer type that fits
  std::optional<double> as_f64() const;    // any numeric type
  std::optional<bool> as_bool() const;
  const std::string* as_string() const;        // nullptr unless STRING
  const std::vector<Value>* as_array() const;  // nullptr unless ARRAY

  // Same stored type(s) and value. array_type is UINT8 on non-arrays from the reader.
  bool operator==(const Value& other) const = default;
};

// Metadata key/values in file order, with lookup by key.
class Metadata {
 public:
  const Value* find(std::string_view key) const;
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  void add(std::string key, Value value);  // REQUIRES: key not present
  size_t size() const { return entries_.size(); }

  // Typed getters: nullopt when missing or of an incompatible type.
  std::optional<uint64_t> get_u64(std::string_view key) const;
  std::optional<double> get_f64(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  const std::vector<Value>* get_array(std::string_view key) const;

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // key -> position in entries_
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ggml order: ne[0] is the row length (contiguous)
  uint32_t file_index = 0;  // which split file holds the data
  uint64_t offset = 0;      // absolute byte offset of the data in that file
  uint64_t n_bytes = 0;     // size of the data

  int64_t n_elements() const;
  int64_t n_rows() const;  // product of ne[1..]
};

class GgufFile {
 public:
  // Opens and validates a model; follows split files named -00001-of-0000N.gguf.
  static Result<GgufFile> open(const std::string& path);
  // Parses one file image already in memory (used by the fuzzer and tests).
  // `file_size` is bytes.size(); tensor data ranges are checked against it.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, std::string name = "<memory>");

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const Metadata& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const std::vector<std::string>& paths() const { return paths_; }
  uint64_t total_bytes() const;  // sum of the split files' sizes
  const std::vector<uint64_t>& file_sizes() const { return file_sizes_; }
  // Absolute offset of the tensor data section in split file `file_index`.
  uint64_t data_offset(uint32_t file_index = 0) const { return data_offsets_.at(file_index); }

  // Reads one tensor's bytes with pread (tests, tools; the engine streams through io/).
  // REQUIRES: out.size() == tensor.n_bytes; opened with open(), not parse().
  Status read_tensor_data(const TensorInfo& tensor, std::span<uint8_t> out) const;

  // "general.architecture", or "" when missing.
  std::string architecture() const;

 private:
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::string> paths_;
  std::vector<uint64_t> file_sizes_;
  std::vector<uint64_t> data_offsets_;                       // per split file
  std::map<std::string, size_t, std::less<>> tensor_index_;  // name -> position in tensors_

  friend struct GgufFileBuilder;  // gguf.cc: fills the fields while parsing
};

}  // namespace hypura::gguf
