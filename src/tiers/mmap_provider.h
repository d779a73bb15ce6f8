// MmapProvider: the plain way, for `hypura bench --baseline`: every split file mapped
// read-only with mmap, views point into the mappings, the page cache decides what is in
// memory. No planner, no ledger, no direct I/O: what a model bigger than RAM does to a
// naive runtime (page faults and re-reads on every token).
//
// Thread-safety: read-only after open().
#pragma once

#include <memory>
#include <vector>

#include "gguf/gguf.h"
#include "tiers/tensor_view.h"

namespace hypura::tiers {

class MmapProvider final : public AddressableProvider {
 public:
  static Result<std::unique_ptr<MmapProvider>> open(const gguf::GgufFile& file);
  ~MmapProvider() override;

  std::string name() const override { return "mmap"; }
  compute::WeightView view(model::TensorId id) const override;

 private:
  explicit MmapProvider(const gguf::GgufFile& file) : AddressableProvider(file) {}
  struct Mapping {
    uint8_t* base = nullptr;  // (size) bytes: the whole split file
    size_t size = 0;
  };
  std::vector<Mapping> maps_;
};

}  // namespace hypura::tiers
