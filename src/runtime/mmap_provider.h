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
#include "runtime/weight_provider.h"

namespace hypura::runtime {

class MmapProvider final : public WeightProvider {
 public:
  static Result<std::unique_ptr<MmapProvider>> open(const gguf::GgufFile& file);
  ~MmapProvider() override;

  Status acquire(int layer, std::span<const TensorId> ids,
                 std::span<compute::WeightView> out) override;
  Status acquire_experts(int layer, std::span<const ExpertRequest> requests,
                         std::span<compute::WeightView> out) override;
  void release(int layer) override {}
  std::string name() const override { return "mmap"; }

 private:
  explicit MmapProvider(const gguf::GgufFile& file) : file_(file) {}
  compute::WeightView view(TensorId id) const;

  struct Mapping {
    uint8_t* base = nullptr;  // (size) bytes: the whole split file
    size_t size = 0;
  };
  const gguf::GgufFile& file_;
  std::vector<Mapping> maps_;
};

}  // namespace hypura::runtime
