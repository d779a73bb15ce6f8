// AlignedBuffer: an owned, zero-initialised byte buffer whose address is a multiple of
// an alignment (4096 by default), as O_DIRECT reads require.
//
// Thread-safety: none; a buffer is owned by one component at a time. Move-only.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>

namespace hypura::io {

inline constexpr uint64_t kDirectAlignment = 4096;  // safe for every block device we meet

inline uint64_t align_down(uint64_t v, uint64_t a) {
  return v - v % a;
}
inline uint64_t align_up(uint64_t v, uint64_t a) {
  return align_down(v + a - 1, a);
}

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // REQUIRES: alignment is a power of two >= sizeof(void*). Aborts when out of memory.
  explicit AlignedBuffer(uint64_t size, uint64_t alignment = kDirectAlignment) : size_(size) {
    if (size == 0) return;
    void* p = nullptr;
    if (posix_memalign(&p, alignment, align_up(size, alignment)) != 0) std::abort();
    std::memset(p, 0, size);
    data_ = static_cast<uint8_t*>(p);
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  std::span<uint8_t> span() { return {data_, size_}; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace hypura::io
