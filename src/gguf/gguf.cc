// GGUF reader: parses and validates the header, metadata and tensor directory.
//
// Byte layout (little-endian; versions 2 and 3 are identical, version 1 used 32-bit
// counts and is not supported):
//
//   offset  size   field
//   0       4      magic "GGUF" (0x47 0x47 0x55 0x46)
//   4       4      u32 version (2 or 3)
//   8       8      u64 n_tensors
//   16      8      u64 n_kv
//   24      ...    n_kv metadata entries: string key, u32 value type, value
//   ...     ...    n_tensors tensor infos:
//                    string name, u32 n_dims, i64 ne[n_dims], u32 ggml type, u64 offset
//   ...     pad    zero bytes up to the next multiple of general.alignment (default 32)
//   data    ...    tensor data; each tensor at data + offset, offset % alignment == 0
//
//   string = u64 length + bytes (UTF-8, no terminating NUL)
//   value  = u8/i8/u16/i16/u32/i32/f32/bool(1 byte)/u64/i64/f64 scalar
//          | string
//          | array: u32 element type, u64 count, count values of that type (no per-element
//            type tag; an element type of array nests: each element has its own type+count)
//
// The file is untrusted. Every read goes through Cursor, which checks the remaining
// bytes first; every count is bounded by the bytes it needs before anything is
// reserved; every size computation uses checked arithmetic. See docs/GGUF.md for the
// full list of rules and their error messages.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <type_traits>
#include <unordered_set>

static_assert(std::endian::native == std::endian::little, "GGUF parsing assumes little-endian");

namespace hypura::gguf {

// Limits on counts that real models stay far below; anything above is treated as hostile
// because each entry costs memory out of proportion to its bytes in the file.
constexpr int kMaxArrayDepth = 4;                    // arrays of arrays of ...
constexpr uint64_t kMaxMetadataValues = 1ull << 22;  // all scalars + strings + arrays
constexpr uint64_t kMaxKeyLength = 1ull << 16;
constexpr uint64_t kMaxTensorNameLength = 63;  // ggml's GGML_MAX_NAME minus the NUL
constexpr uint32_t kMaxDims = 4;               // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = 1ull << 30;
constexpr uint64_t kDefaultAlignment = 32;

namespace {

template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

// Quotes a string taken from the file for an error message: printable ASCII kept,
// other bytes escaped, long strings cut, so a hostile name cannot garble the terminal.
std::string quote_name(std::string_view s) {
  constexpr size_t kMaxShown = 80;
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out + "'";
}

template <typename Label>
std::string label(const Label& what) {
  if constexpr (std::is_invocable_v<Label>) {
    return what();
  } else {
    return std::string(what);
  }
}

bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

// Reads little-endian fields from the file image; never past its end.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> bytes) : bytes_(bytes) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t remaining() const { return bytes_.size() - pos_; }

  template <typename T>
  Status read(T* out, std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    std::memcpy(out, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  // Reads a u64 length then that many bytes; rejects lengths above max_length. `what`
  // names the field in errors: a string, or a callable that builds one, so the hot path
  // (hundreds of thousands of vocabulary strings) formats nothing.
  template <typename Label>
  Status read_string(std::string* out, const Label& what, uint64_t max_length) {
    uint64_t at = pos_;
    uint64_t length = 0;
    if (remaining() < sizeof(length)) return truncated(label(what), sizeof(length));
    HYPURA_RETURN_IF_ERROR(read(&length, "string length"));
    if (length > max_length) {
      return corrupt(cat(label(what), " at offset ", at, " has length ", length,
                         ", above the limit of ", max_length));
    }
    if (length > remaining()) {
      return corrupt(cat(label(what), " at offset ", at, " has length ", length,
                         " which extends past end of file (size ", size(), ")"));
    }
    out->assign(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
    pos_ += length;
    return Status::ok();
  }

  Status truncated(std::string_view what, uint64_t need) const {
    return corrupt(cat("truncated file: ", what, " at offset ", pos_, " needs ", need,
                       " bytes, but only ", remaining(), " remain (file size ", size(), ")"));
  }

 private:
  std::span<const uint8_t> bytes_;
  uint64_t pos_ = 0;
};

// Smallest encoding of one value of a type; bounds array counts before reserving.
uint64_t min_value_bytes(ValueType type) {
  switch (type) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::STRING:
      return 8;  // the length
    case ValueType::ARRAY:
      return 12;  // element type + count
  }
  return 1;
}

bool known_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::FLOAT64);
}

// One file's parse state. Produces version, alignment, metadata and tensor infos.
class Parser {
 public:
  explicit Parser(std::span<const uint8_t> bytes) : cur_(bytes) {}

  Status parse_header();
  Status parse_metadata();
  Status parse_tensor_infos();
  Status check_tensor_ranges();

  uint32_t version_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;  // offsets relative to the data section until resolved

 private:
  Status parse_value(ValueType type, int depth, const std::string& key, Value* out);
  Status parse_array(int depth, const std::string& key, Value* out);
  Status parse_scalar(ValueType type, Value* out);
  Status parse_tensor_info(std::unordered_set<std::string>* names);
  Status check_tensor_shape(const TensorInfo& t, uint64_t at, uint64_t* n_bytes);
  Status resolve_alignment(uint64_t alignment_at);

  Cursor cur_;
  uint64_t n_values_ = 0;
};

Status Parser::parse_header() {
  uint32_t magic = 0;
  HYPURA_RETURN_IF_ERROR(cur_.read(&magic, "magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    return corrupt(cat("bad magic at offset 0: expected 'GGUF', found ",
                       quote_name(std::string_view(reinterpret_cast<const char*>(&magic), 4))));
  }
  HYPURA_RETURN_IF_ERROR(cur_.read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    std::string hint = (version_ & 0xffff) == 0 ? " (a big-endian file? only little-endian is "
                                                  "supported)"
                                                : "";
    return unsupported(
        cat("unsupported GGUF version ", version_, " at offset 4 (supported: 2, 3)", hint));
  }
  HYPURA_RETURN_IF_ERROR(cur_.read(&n_tensors_, "tensor count"));
  HYPURA_RETURN_IF_ERROR(cur_.read(&n_kv_, "metadata count"));
  // Each metadata entry takes at least 13 bytes (key length, type, 1-byte value) and each
  // tensor info at least 25 (1-byte name, dims, one dim, type, offset): the counts can
  // never exceed what the remaining bytes could hold.
  constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
  constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;
  if (n_kv_ > cur_.remaining() / kMinKvBytes) {
    return corrupt(cat("absurd metadata count ", n_kv_, " at offset 16: the file (size ",
                       cur_.size(), ") cannot hold that many entries"));
  }
  if (n_tensors_ > cur_.remaining() / kMinTensorInfoBytes) {
    return corrupt(cat("absurd tensor count ", n_tensors_, " at offset 8: the file (size ",
                       cur_.size(), ") cannot hold that many tensor infos"));
  }
  return Status::ok();
}

Status Parser::parse_scalar(ValueType type, Value* out) {
  auto read_as = [&]<typename T>(T*, auto store) -> Status {
    T v{};
    HYPURA_RETURN_IF_ERROR(cur_.read(&v, value_type_name(type)));
    store(v);
    return Status::ok();
  };
  auto as_u = [&](auto v) { out->data = static_cast<uint64_t>(v); };
  auto as_i = [&](auto v) { out->data = static_cast<int64_t>(v); };
  auto as_f = [&](auto v) { out->data = static_cast<double>(v); };
  switch (type) {
    case ValueType::UINT8:
      return read_as(static_cast<uint8_t*>(nullptr), as_u);
    case ValueType::INT8:
      return read_as(static_cast<int8_t*>(nullptr), as_i);
    case ValueType::UINT16:
      return read_as(static_cast<uint16_t*>(nullptr), as_u);
    case ValueType::INT16:
      return read_as(static_cast<int16_t*>(nullptr), as_i);
    case ValueType::UINT32:
      return read_as(static_cast<uint32_t*>(nullptr), as_u);
    case ValueType::INT32:
      return read_as(static_cast<int32_t*>(nullptr), as_i);
    case ValueType::UINT64:
      return read_as(static_cast<uint64_t*>(nullptr), as_u);
    case ValueType::INT64:
      return read_as(static_cast<int64_t*>(nullptr), as_i);
    case ValueType::FLOAT32:
      return read_as(static_cast<float*>(nullptr), as_f);
    case ValueType::FLOAT64:
      return read_as(static_cast<double*>(nullptr), as_f);
    case ValueType::BOOL: {
      uint64_t at = cur_.pos();
      uint8_t b = 0;
      HYPURA_RETURN_IF_ERROR(cur_.read(&b, "bool"));
      if (b > 1) return corrupt(cat("bool value ", int(b), " at offset ", at, " is not 0 or 1"));
      out->data = b == 1;
      return Status::ok();
    }
    default:
      return Status(StatusCode::kInternal, "parse_scalar: not a scalar type");
  }
}

Status Parser::parse_value(ValueType type, int depth, const std::string& key, Value* out) {
  if (++n_values_ > kMaxMetadataValues) {
    return corrupt(cat("metadata ", quote_name(key), " at offset ", cur_.pos(), ": more than ",
                       kMaxMetadataValues, " metadata values in the file"));
  }
  out->type = type;
  if (type == ValueType::STRING) {
    std::string s;
    auto what = [&] { return cat("string value of ", quote_name(key)); };
    HYPURA_RETURN_IF_ERROR(cur_.read_string(&s, what, UINT64_MAX));
    out->data = std::move(s);
    return Status::ok();
  }
  if (type == ValueType::ARRAY) return parse_array(depth + 1, key, out);
  return parse_scalar(type, out);
}

Status Parser::parse_array(int depth, const std::string& key, Value* out) {
  uint64_t at = cur_.pos();
  if (depth > kMaxArrayDepth) {
    return corrupt(cat("array of ", quote_name(key), " at offset ", at, " nests deeper than ",
                       kMaxArrayDepth, " levels"));
  }
  uint32_t elem_type = 0;
  uint64_t count = 0;
  HYPURA_RETURN_IF_ERROR(cur_.read(&elem_type, "array element type"));
  if (!known_value_type(elem_type)) {
    return corrupt(cat("array of ", quote_name(key), " at offset ", at,
                       " has unknown element type ", elem_type));
  }
  HYPURA_RETURN_IF_ERROR(cur_.read(&count, "array length"));
  auto type = static_cast<ValueType>(elem_type);
  if (count > cur_.remaining() / min_value_bytes(type)) {
    return corrupt(cat("array of ", quote_name(key), " at offset ", at, " has ", count,
                       " elements of ", value_type_name(type),
                       ", which extends past end of file (size ", cur_.size(), ")"));
  }
  // Each element costs a 48-byte Value whatever its size in the file (48x for u8), so the
  // count must fit the value budget before anything is reserved.
  if (count > kMaxMetadataValues - std::min(n_values_, kMaxMetadataValues)) {
    return corrupt(cat("array of ", quote_name(key), " at offset ", at, " has ", count,
                       " elements: more than ", kMaxMetadataValues,
                       " metadata values in the file"));
  }
  out->array_type = type;
  std::vector<Value> elements;
  elements.reserve(count);  // bounded by the file size and the value budget just above
  for (uint64_t i = 0; i < count; ++i) {
    Value& v = elements.emplace_back();
    HYPURA_RETURN_IF_ERROR(parse_value(type, depth, key, &v));
  }
  out->data = std::move(elements);
  return Status::ok();
}

Status Parser::parse_metadata() {
  uint64_t alignment_at = 0;
  for (uint64_t i = 0; i < n_kv_; ++i) {
    uint64_t at = cur_.pos();
    std::string key;
    auto what = [i] { return cat("metadata key ", i); };
    HYPURA_RETURN_IF_ERROR(cur_.read_string(&key, what, kMaxKeyLength));
    if (metadata_.find(key) != nullptr) {
      return corrupt(cat("duplicate metadata key ", quote_name(key), " at offset ", at));
    }
    uint32_t type = 0;
    uint64_t type_at = cur_.pos();
    HYPURA_RETURN_IF_ERROR(cur_.read(&type, "metadata value type"));
    if (!known_value_type(type)) {
      return corrupt(cat("metadata ", quote_name(key), " at offset ", type_at,
                         " has unknown value type ", type));
    }
    if (key == "general.alignment") alignment_at = cur_.pos();
    Value value;
    HYPURA_RETURN_IF_ERROR(parse_value(static_cast<ValueType>(type), 0, key, &value));
    metadata_.add(std::move(key), std::move(value));
  }
  return resolve_alignment(alignment_at);
}

Status Parser::resolve_alignment(uint64_t alignment_at) {
  const Value* v = metadata_.find("general.alignment");
  if (v == nullptr) return Status::ok();
  std::optional<uint64_t> a = v->type == ValueType::ARRAY ? std::nullopt : v->as_u64();
  if (!a) {
    return corrupt(cat("general.alignment at offset ", alignment_at, " has type ",
                       value_type_name(v->type), ", expected an unsigned integer"));
  }
  if (*a == 0 || !std::has_single_bit(*a) || *a > kMaxAlignment) {
    return corrupt(cat("general.alignment ", *a, " at offset ", alignment_at,
                       " is not a power of two between 1 and ", kMaxAlignment));
  }
  alignment_ = *a;
  return Status::ok();
}

Status Parser::check_tensor_shape(const TensorInfo& t, uint64_t at, uint64_t* n_bytes) {
  const TypeTraits& traits = type_traits(t.type);
  uint64_t n = 1;
  for (int64_t d : t.ne) {
    if (!checked_mul(n, static_cast<uint64_t>(d), &n) || n > uint64_t(INT64_MAX)) {
      return corrupt(cat("tensor ", quote_name(t.name), " at offset ", at,
                         ": element count overflows 64 bits"));
    }
  }
  if (t.ne[0] % traits.block_size != 0) {
    return corrupt(cat("tensor ", quote_name(t.name), " at offset ", at, ": row length ", t.ne[0],
                       " is not a multiple of the ", traits.name, " block size ",
                       traits.block_size));
  }
  uint64_t blocks = n / static_cast<uint64_t>(traits.block_size);
  if (!checked_mul(blocks, static_cast<uint64_t>(traits.type_size), n_bytes)) {
    return corrupt(
        cat("tensor ", quote_name(t.name), " at offset ", at, ": byte size overflows 64 bits"));
  }
  return Status::ok();
}

Status Parser::parse_tensor_info(std::unordered_set<std::string>* names) {
  uint64_t at = cur_.pos();
  TensorInfo t;
  HYPURA_RETURN_IF_ERROR(cur_.read_string(&t.name, "tensor name", kMaxTensorNameLength));
  if (t.name.empty()) return corrupt(cat("empty tensor name at offset ", at));
  if (!names->insert(t.name).second) {
    return corrupt(cat("duplicate tensor name ", quote_name(t.name), " at offset ", at));
  }
  uint32_t n_dims = 0;
  HYPURA_RETURN_IF_ERROR(cur_.read(&n_dims, "tensor dimension count"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return corrupt(cat("tensor ", quote_name(t.name), " at offset ", at, " has ", n_dims,
                       " dimensions (allowed 1 to ", kMaxDims, ")"));
  }
  t.ne.resize(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    HYPURA_RETURN_IF_ERROR(cur_.read(&t.ne[d], "tensor dimension"));
    if (t.ne[d] < 0) {
      return corrupt(cat("tensor ", quote_name(t.name), " at offset ", at, ": dimension ", d,
                         " is negative (", t.ne[d], ")"));
    }
  }
  uint32_t type_id = 0;
  uint64_t type_at = cur_.pos();
  HYPURA_RETURN_IF_ERROR(cur_.read(&type_id, "tensor type"));
  if (type_traits(type_id) == nullptr) {
    return corrupt(cat("tensor ", quote_name(t.name), " has unknown ggml type id ", type_id,
                       " at offset ", type_at));
  }
  t.type = static_cast<GgmlType>(type_id);
  HYPURA_RETURN_IF_ERROR(check_tensor_shape(t, at, &t.n_bytes));
  uint64_t offset_at = cur_.pos();
  HYPURA_RETURN_IF_ERROR(cur_.read(&t.offset, "tensor data offset"));
  if (t.offset % alignment_ != 0) {
    return corrupt(cat("tensor ", quote_name(t.name), " data offset ", t.offset, " at offset ",
                       offset_at, " is not a multiple of the alignment ", alignment_));
  }
  tensors_.push_back(std::move(t));
  return Status::ok();
}

Status Parser::parse_tensor_infos() {
  tensors_.reserve(n_tensors_);  // bounded by the file size in parse_header
  std::unordered_set<std::string> names;
  for (uint64_t i = 0; i < n_tensors_; ++i) {
    HYPURA_RETURN_IF_ERROR(parse_tensor_info(&names));
  }
  uint64_t header_end = cur_.pos();
  uint64_t padded = 0;
  if (!checked_add(header_end, alignment_ - 1, &padded)) {
    return corrupt("data section offset overflows 64 bits");
  }
  data_offset_ = padded / alignment_ * alignment_;
  if (data_offset_ > cur_.size() && !tensors_.empty()) {
    return corrupt(cat("tensor data section at offset ", data_offset_, " (header end ", header_end,
                       " aligned to ", alignment_, ") starts past end of file (size ", cur_.size(),
                       ")"));
  }
  return Status::ok();
}

// Makes offsets absolute, checks every range lies in the file and none overlap.
Status Parser::check_tensor_ranges() {
  for (TensorInfo& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (!checked_add(data_offset_, t.offset, &begin)) {
      return corrupt(cat("tensor ", quote_name(t.name), " data offset ", t.offset,
                         " + data section offset ", data_offset_, " overflows 64 bits"));
    }
    if (!checked_add(begin, t.n_bytes, &end) || end > cur_.size()) {
      return corrupt(cat("tensor ", quote_name(t.name), " data [offset ", begin, ", ", t.n_bytes,
                         " bytes) extends past end of file (size ", cur_.size(), ")"));
    }
    t.offset = begin;
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const TensorInfo& t : tensors_) {
    if (t.n_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& a = *by_offset[i - 1];
    const TensorInfo& b = *by_offset[i];
    if (a.offset + a.n_bytes > b.offset) {
      return corrupt(cat("tensors ", quote_name(a.name), " [offset ", a.offset, ", ", a.n_bytes,
                         " bytes) and ", quote_name(b.name), " [offset ", b.offset, ", ", b.n_bytes,
                         " bytes) overlap"));
    }
  }
  return Status::ok();
}

Status parse_all(Parser& p) {
  HYPURA_RETURN_IF_ERROR(p.parse_header());
  HYPURA_RETURN_IF_ERROR(p.parse_metadata());
  HYPURA_RETURN_IF_ERROR(p.parse_tensor_infos());
  return p.check_tensor_ranges();
}

// A read-only private mapping of a whole file; only the pages parsed are read.
class MappedFile {
 public:
  ~MappedFile() {
    if (addr_ != nullptr) munmap(addr_, size_);
    if (fd_ >= 0) close(fd_);
  }
  Status open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      int err = errno;
      std::string msg = path + ": cannot open: " + std::strerror(err);
      return err == ENOENT ? not_found(msg) : io_error(msg);
    }
    struct stat st {};
    if (fstat(fd_, &st) != 0) return io_error(path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return invalid_argument(path + ": not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
    if (size_ == 0) return Status::ok();
    void* addr = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (addr == MAP_FAILED) return io_error(path + ": cannot map: " + std::strerror(errno));
    addr_ = addr;
    return Status::ok();
  }
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(addr_), static_cast<size_t>(size_)};
  }

 private:
  int fd_ = -1;
  void* addr_ = nullptr;
  uint64_t size_ = 0;
};

// "dir/name-00002-of-00005.gguf" -> {"dir/name", 2, 5}; nullopt when not a split name.
struct SplitName {
  std::string prefix;
  int index;
  int count;
};
std::optional<SplitName> parse_split_name(const std::string& path) {
  // Suffix "-NNNNN-of-MMMMM.gguf" is 20 characters.
  constexpr size_t kSuffix = 20;
  if (path.size() <= kSuffix) return std::nullopt;
  std::string_view tail(path.data() + path.size() - kSuffix, kSuffix);
  auto digits = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || tail.substr(15) != ".gguf" ||
      !digits(tail.substr(1, 5)) || !digits(tail.substr(10, 5))) {
    return std::nullopt;
  }
  int index = std::stoi(std::string(tail.substr(1, 5)));
  int count = std::stoi(std::string(tail.substr(10, 5)));
  if (index < 1 || count < 1 || index > count) return std::nullopt;
  return SplitName{path.substr(0, path.size() - kSuffix), index, count};
}

std::string split_path(const SplitName& s, int index) {
  char suffix[32];
  std::snprintf(suffix, sizeof(suffix), "-%05d-of-%05d.gguf", index, s.count);
  return s.prefix + suffix;
}

}  // namespace

// Fills a GgufFile's private fields from per-file parse results.
struct GgufFileBuilder {
  static GgufFile from_single(Parser&& p, std::string name, uint64_t size) {
    GgufFile f;
    f.version_ = p.version_;
    f.alignment_ = p.alignment_;
    f.metadata_ = std::move(p.metadata_);
    f.tensors_ = std::move(p.tensors_);
    f.paths_ = {std::move(name)};
    f.file_sizes_ = {size};
    f.data_offsets_ = {p.data_offset_};
    index(f);
    return f;
  }
  static Status append_split(GgufFile* f, GgufFile&& part) {
    auto file_index = static_cast<uint32_t>(f->paths_.size());
    for (TensorInfo& t : part.tensors_) {
      if (f->find_tensor(t.name) != nullptr) {
        return corrupt(cat(part.paths_[0], ": duplicate tensor name ", quote_name(t.name),
                           " (already in an earlier split file)"));
      }
      t.file_index = file_index;
      f->tensor_index_.emplace(t.name, f->tensors_.size());
      f->tensors_.push_back(std::move(t));
    }
    f->paths_.push_back(part.paths_[0]);
    f->file_sizes_.push_back(part.file_sizes_[0]);
    f->data_offsets_.push_back(part.data_offsets_[0]);
    return Status::ok();
  }
  static void index(GgufFile& f) {
    f.tensor_index_.clear();
    for (size_t i = 0; i < f.tensors_.size(); ++i) f.tensor_index_.emplace(f.tensors_[i].name, i);
  }
};

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
  Parser p(bytes);
  Status st = parse_all(p);
  if (!st.is_ok()) return st.with_context(name);
  return GgufFileBuilder::from_single(std::move(p), std::move(name), bytes.size());
}

namespace {
Result<GgufFile> open_single(const std::string& path) {
  MappedFile file;
  HYPURA_RETURN_IF_ERROR(file.open(path));
  return GgufFile::parse(file.bytes(), path);
}

// Checks split.no / split.count when the file records them (llama.cpp's gguf-split does).
Status check_split_keys(const GgufFile& part, int index, int count) {
  const Metadata& md = part.metadata();
  auto no = md.get_u64("split.no");
  auto n = md.get_u64("split.count");
  if (n && *n != static_cast<uint64_t>(count)) {
    return corrupt(
        cat(part.paths()[0], ": split.count is ", *n, " but the file name says ", count));
  }
  if (no && *no != static_cast<uint64_t>(index - 1)) {
    return corrupt(cat(part.paths()[0], ": split.no is ", *no, " but the file name says ",
                       index - 1, " (0-based)"));
  }
  return Status::ok();
}
}  // namespace

Result<GgufFile> GgufFile::open(const std::string& path) {
  std::optional<SplitName> split = parse_split_name(path);
  if (!split) return open_single(path);
  HYPURA_ASSIGN_OR_RETURN(GgufFile model, open_single(split_path(*split, 1)));
  HYPURA_RETURN_IF_ERROR(check_split_keys(model, 1, split->count));
  for (int i = 2; i <= split->count; ++i) {
    HYPURA_ASSIGN_OR_RETURN(GgufFile part, open_single(split_path(*split, i)));
    HYPURA_RETURN_IF_ERROR(check_split_keys(part, i, split->count));
    HYPURA_RETURN_IF_ERROR(GgufFileBuilder::append_split(&model, std::move(part)));
  }
  if (auto total = model.metadata().get_u64("split.tensors.count");
      total && *total != model.tensors().size()) {
    return corrupt(cat(path, ": split.tensors.count is ", *total, " but the ", split->count,
                       " files hold ", model.tensors().size(), " tensors"));
  }
  return model;
}

const TensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t GgufFile::total_bytes() const {
  uint64_t total = 0;
  for (uint64_t s : file_sizes_) total += s;
  return total;
}

std::string GgufFile::architecture() const {
  return metadata_.get_string("general.architecture").value_or("");
}

Status GgufFile::read_tensor_data(const TensorInfo& tensor, std::span<uint8_t> out) const {
  assert(out.size() == tensor.n_bytes);
  if (tensor.file_index >= paths_.size()) return invalid_argument("tensor file index out of range");
  const std::string& path = paths_[tensor.file_index];
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error(path + ": cannot open: " + std::strerror(errno));
  uint64_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(tensor.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = n == 0 ? "unexpected end of file" : std::strerror(errno);
      close(fd);
      return io_error(cat(path, ": reading tensor ", quote_name(tensor.name), " at offset ",
                          tensor.offset + done, ": ", why));
    }
    done += static_cast<uint64_t>(n);
  }
  close(fd);
  return Status::ok();
}

}  // namespace hypura::gguf
