// GgufWriter: serializes the header and tensor directory, then streams tensor data.
// The byte layout is the one documented atop gguf.cc (always version 3 here).
#include "gguf/writer.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "common/atomic_file.h"

namespace hypura::gguf {
namespace {

uint64_t align_up(uint64_t x, uint64_t a) {
  return (x + a - 1) / a * a;
}

// Little-endian byte sink for the header (a few MB at most, with tokenizer arrays).
class HeaderBuffer {
 public:
  template <typename T>
  void put(T v) {
    put_bytes(&v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    put_bytes(s.data(), s.size());
  }
  // resize + memcpy rather than insert(): GCC 12 reports a false stringop-overflow there.
  void put_bytes(const void* p, size_t n) {
    size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n > 0) std::memcpy(bytes_.data() + at, p, n);
  }
  void pad_to(uint64_t alignment) { bytes_.resize(align_up(bytes_.size(), alignment), 0); }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

void put_value_body(HeaderBuffer& out, const Value& v);

void put_array(HeaderBuffer& out, const Value& v) {
  const std::vector<Value>* elements = v.as_array();
  assert(elements != nullptr);
  out.put<uint32_t>(static_cast<uint32_t>(v.array_type));
  out.put<uint64_t>(elements->size());
  for (const Value& e : *elements) {
    assert(e.type == v.array_type);
    put_value_body(out, e);
  }
}

// Writes the value without its type tag (array elements carry none).
void put_value_body(HeaderBuffer& out, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8:
      out.put<uint8_t>(static_cast<uint8_t>(*v.as_u64()));
      break;
    case ValueType::INT8:
      out.put<int8_t>(static_cast<int8_t>(*v.as_i64()));
      break;
    case ValueType::UINT16:
      out.put<uint16_t>(static_cast<uint16_t>(*v.as_u64()));
      break;
    case ValueType::INT16:
      out.put<int16_t>(static_cast<int16_t>(*v.as_i64()));
      break;
    case ValueType::UINT32:
      out.put<uint32_t>(static_cast<uint32_t>(*v.as_u64()));
      break;
    case ValueType::INT32:
      out.put<int32_t>(static_cast<int32_t>(*v.as_i64()));
      break;
    case ValueType::UINT64:
      out.put<uint64_t>(*v.as_u64());
      break;
    case ValueType::INT64:
      out.put<int64_t>(*v.as_i64());
      break;
    case ValueType::FLOAT32:
      out.put<float>(static_cast<float>(*v.as_f64()));
      break;
    case ValueType::FLOAT64:
      out.put<double>(*v.as_f64());
      break;
    case ValueType::BOOL:
      out.put<uint8_t>(*v.as_bool() ? 1 : 0);
      break;
    case ValueType::STRING:
      out.put_string(*v.as_string());
      break;
    case ValueType::ARRAY:
      put_array(out, v);
      break;
  }
}

}  // namespace

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  assert(alignment > 0 && (alignment & (alignment - 1)) == 0);
}

void GgufWriter::add_metadata(std::string key, Value value) {
  metadata_.add(std::move(key), std::move(value));
}

void GgufWriter::add_u32(std::string key, uint32_t v) {
  add_metadata(std::move(key), Value{ValueType::UINT32, ValueType::UINT8, uint64_t{v}});
}

void GgufWriter::add_f32(std::string key, float v) {
  add_metadata(std::move(key), Value{ValueType::FLOAT32, ValueType::UINT8, double{v}});
}

void GgufWriter::add_bool(std::string key, bool v) {
  add_metadata(std::move(key), Value{ValueType::BOOL, ValueType::UINT8, v});
}

void GgufWriter::add_string(std::string key, std::string v) {
  add_metadata(std::move(key), Value{ValueType::STRING, ValueType::UINT8, std::move(v)});
}

void GgufWriter::add_string_array(std::string key, const std::vector<std::string>& v) {
  std::vector<Value> elements;
  elements.reserve(v.size());
  for (const std::string& s : v) elements.push_back(Value{ValueType::STRING, ValueType::UINT8, s});
  add_metadata(std::move(key), Value{ValueType::ARRAY, ValueType::STRING, std::move(elements)});
}

void GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne) {
  assert(!ne.empty() && ne.size() <= 4);
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  uint64_t n_bytes = row_bytes(type, ne[0]) * static_cast<uint64_t>(rows);
  uint64_t offset = 0;
  if (!tensors_.empty()) {
    const PendingTensor& last = tensors_.back();
    offset = align_up(last.offset + last.n_bytes, alignment_);
  }
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(ne), n_bytes, offset});
}

uint64_t GgufWriter::data_bytes() const {
  if (tensors_.empty()) return 0;
  const PendingTensor& last = tensors_.back();
  return align_up(last.offset + last.n_bytes, alignment_);
}

// Header: magic, version, counts, metadata (general.alignment added when not 32 and not
// given), tensor infos, zero padding up to the data section.
static std::vector<uint8_t> serialize_header(const Metadata& metadata, uint32_t alignment,
                                             const auto& tensors) {
  bool add_alignment = alignment != 32 && metadata.find("general.alignment") == nullptr;
  HeaderBuffer out;
  out.put<uint32_t>(0x46554747);  // "GGUF" read as little-endian u32
  out.put<uint32_t>(3);
  out.put<uint64_t>(tensors.size());
  out.put<uint64_t>(metadata.size() + (add_alignment ? 1 : 0));
  for (const auto& [key, value] : metadata.entries()) {
    out.put_string(key);
    out.put<uint32_t>(static_cast<uint32_t>(value.type));
    put_value_body(out, value);
  }
  if (add_alignment) {
    out.put_string("general.alignment");
    out.put<uint32_t>(static_cast<uint32_t>(ValueType::UINT32));
    out.put<uint32_t>(alignment);
  }
  for (const auto& t : tensors) {
    out.put_string(t.name);
    out.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) out.put<int64_t>(d);
    out.put<uint32_t>(static_cast<uint32_t>(t.type));
    out.put<uint64_t>(t.offset);
  }
  out.pad_to(alignment);
  return std::move(out.bytes());
}

Status GgufWriter::write(const std::string& path, const Fill& fill, uint64_t chunk_bytes,
                         const std::function<void(uint64_t, uint64_t)>& progress) const {
  assert(chunk_bytes > 0);
  // Atomic: an interrupted write leaves no half-written model behind.
  HYPURA_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  HYPURA_RETURN_IF_ERROR(file.write(serialize_header(metadata_, alignment_, tensors_)));
  // One reusable chunk buffer: memory stays constant whatever the file size.
  std::vector<uint8_t> chunk(std::min<uint64_t>(chunk_bytes, std::max<uint64_t>(data_bytes(), 1)));
  const uint64_t total = data_bytes();
  uint64_t written = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    for (uint64_t done = 0; done < t.n_bytes;) {
      uint64_t n = std::min<uint64_t>(chunk.size(), t.n_bytes - done);
      std::span<uint8_t> out(chunk.data(), n);
      HYPURA_RETURN_IF_ERROR(fill(i, done, out));
      HYPURA_RETURN_IF_ERROR(file.write(out));
      done += n;
      written += n;
      if (progress) progress(written, total);
    }
    // Zero padding up to the next tensor (and after the last one, like gguf-py).
    uint64_t pad = align_up(t.offset + t.n_bytes, alignment_) - (t.offset + t.n_bytes);
    std::fill_n(chunk.begin(), std::min<uint64_t>(pad, chunk.size()), 0);
    for (uint64_t left = pad; left > 0;) {
      uint64_t n = std::min<uint64_t>(left, chunk.size());
      HYPURA_RETURN_IF_ERROR(file.write(std::span<const uint8_t>(chunk.data(), n)));
      left -= n;
      written += n;
    }
  }
  if (progress) progress(total, total);
  return file.commit();
}

Status GgufWriter::write_header_only(const std::string& path) const {
  HYPURA_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  std::vector<uint8_t> header = serialize_header(metadata_, alignment_, tensors_);
  HYPURA_RETURN_IF_ERROR(file.write(header));
  HYPURA_RETURN_IF_ERROR(file.truncate(header.size() + data_bytes()));
  return file.commit();
}

Status GgufWriter::write(const std::string& path,
                         const std::vector<std::vector<uint8_t>>& data) const {
  if (data.size() != tensors_.size()) {
    return invalid_argument("GgufWriter::write: " + std::to_string(data.size()) +
                            " data buffers for " + std::to_string(tensors_.size()) + " tensors");
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i].size() != tensors_[i].n_bytes) {
      return invalid_argument("GgufWriter::write: tensor '" + tensors_[i].name + "' needs " +
                              std::to_string(tensors_[i].n_bytes) + " bytes, got " +
                              std::to_string(data[i].size()));
    }
  }
  auto fill = [&](size_t index, uint64_t offset, std::span<uint8_t> out) {
    std::memcpy(out.data(), data[index].data() + offset, out.size());
    return Status::ok();
  };
  return write(path, fill);
}

}  // namespace hypura::gguf
