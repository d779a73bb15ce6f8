#include "tiers/mmap_provider.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hypura::tiers {

Result<std::unique_ptr<MmapProvider>> MmapProvider::open(const gguf::GgufFile& file) {
  std::unique_ptr<MmapProvider> p(new MmapProvider(file));
  for (size_t i = 0; i < file.paths().size(); ++i) {
    const std::string& path = file.paths()[i];
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
    const size_t size = file.file_sizes()[i];
    void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (base == MAP_FAILED) return io_error("cannot mmap " + path + ": " + std::strerror(errno));
    p->maps_.push_back({static_cast<uint8_t*>(base), size});
  }
  return p;
}

MmapProvider::~MmapProvider() {
  for (const Mapping& m : maps_) munmap(m.base, m.size);
}

compute::WeightView MmapProvider::view(model::TensorId id) const {
  const gguf::TensorInfo& t = file_.tensors()[static_cast<size_t>(id)];
  return tensor_view(t, maps_[t.file_index].base + t.offset);
}

}  // namespace hypura::tiers
