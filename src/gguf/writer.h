// GgufWriter: writes GGUF v3 files in constant memory.
//
// Used by tests and by `hypura synth`, which writes files larger than RAM: the header and
// tensor directory are written first, then each tensor's bytes are produced in chunks by a
// caller-supplied fill function, in tensor order. Tensor data offsets are aligned to
// `alignment`; padding is zero bytes, after every tensor including the last (as gguf-py
// does, so a golden model read and written back is byte-identical). Files are fully
// written (no sparse holes) except by write_header_only(); general.alignment is added when
// alignment != 32. Memory: the serialized header plus one chunk buffer. A failed write removes the
// partial file.
//
// Thread-safety: none; one writer per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace hypura::gguf {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32);

  void add_metadata(std::string key, Value value);  // REQUIRES: key not added before
  // Convenience setters for the common value types.
  void add_u32(std::string key, uint32_t v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, const std::vector<std::string>& v);

  // Declares a tensor; its data is produced later by write()'s fill function.
  // REQUIRES: ne[0] is a multiple of the type's block size; name not added before.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne);

  // Fill function: write bytes [offset, offset + out.size()) of tensor `index` into out.
  using Fill = std::function<Status(size_t index, uint64_t offset, std::span<uint8_t> out)>;

  // Writes the file. Tensor data is requested in chunks of at most chunk_bytes.
  Status write(const std::string& path, const Fill& fill, uint64_t chunk_bytes = 16 << 20,
               const std::function<void(uint64_t done, uint64_t total)>& progress = {}) const;

  // Writes the header and tensor directory, then extends the file to its full size without
  // writing the data: a sparse file whose tensors read as zeros. For planning and
  // inspecting shapes larger than the disk (`hypura synth --header-only`).
  Status write_header_only(const std::string& path) const;

  // Writes the file with tensor data held in memory (tests). data[i] is tensor i's bytes.
  Status write(const std::string& path, const std::vector<std::vector<uint8_t>>& data) const;

  uint64_t data_bytes() const;  // total tensor bytes, including alignment padding

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t n_bytes;
    uint64_t offset;  // relative to the start of the data section
  };
  uint32_t alignment_;
  Metadata metadata_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace hypura::gguf
