#include "tiers/testing/resident_provider.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace hypura::tiers {
namespace {

constexpr uint64_t kAlign = 64;
constexpr uint64_t kChunk = 16ull << 20;  // bytes per pread: progress granularity

uint64_t round_up(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

}  // namespace

ResidentProvider::~ResidentProvider() {
  std::free(memory_);
}

Result<std::unique_ptr<ResidentProvider>> ResidentProvider::load(const gguf::GgufFile& file,
                                                                 const Progress& progress) {
  std::unique_ptr<ResidentProvider> p(new ResidentProvider(file));
  const size_t n_files = file.paths().size();
  std::vector<uint64_t> sizes(n_files), offsets(n_files);
  uint64_t total = 0;
  for (uint32_t i = 0; i < n_files; ++i) {
    offsets[i] = total;
    sizes[i] = file.file_sizes()[i] - file.data_offset(i);
    total += round_up(sizes[i], kAlign);
  }
  p->memory_ = std::aligned_alloc(kAlign, round_up(total, kAlign) + kAlign);
  if (p->memory_ == nullptr) {
    return resource_exhausted("cannot allocate " + std::to_string(total) + " bytes for weights");
  }
  // Large pages cut TLB misses when the matmuls stream through gigabytes of weights.
  madvise(p->memory_, total, MADV_HUGEPAGE);
  p->total_bytes_ = total;
  uint64_t done = 0;
  for (uint32_t i = 0; i < n_files; ++i) {
    auto* base = static_cast<uint8_t*>(p->memory_) + offsets[i];
    p->sections_.push_back({base, file.data_offset(i)});
    HYPURA_RETURN_IF_ERROR(p->read_section(i, base, file.data_offset(i), file.file_sizes()[i],
                                           &done, total, progress));
  }
  return p;
}

Status ResidentProvider::read_section(uint32_t file_index, uint8_t* dst, uint64_t begin,
                                      uint64_t end, uint64_t* done, uint64_t total,
                                      const Progress& progress) {
  const std::string& path = file_.paths()[file_index];
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  uint64_t off = begin;
  while (off < end) {
    const size_t want = static_cast<size_t>(std::min(kChunk, end - off));
    const ssize_t got = ::pread(fd, dst + (off - begin), want, static_cast<off_t>(off));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::strerror(errno) : "unexpected end of file";
      ::close(fd);
      return io_error("reading " + path + " at byte " + std::to_string(off) + ": " + why);
    }
    off += static_cast<uint64_t>(got);
    *done += static_cast<uint64_t>(got);
    if (progress) progress(*done, total);
  }
  ::close(fd);
  return Status::ok();
}

compute::WeightView ResidentProvider::view(model::TensorId id) const {
  const gguf::TensorInfo& t = file_.tensors()[static_cast<size_t>(id)];
  const Section& s = sections_[t.file_index];
  return tensor_view(t, s.base + (t.offset - s.data_offset));
}

}  // namespace hypura::tiers
