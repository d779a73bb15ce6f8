// ResidentProvider: every tensor of the model in RAM, read once at load. Test support
// (hypura_tiers_testing): the engine's resident mode is StreamingProvider with nothing
// streamed (resident_loader.h, ledger-charged); this is the plain reference the
// forward-pass tests compare every other provider against.
//
// load() reads each split file's tensor-data section sequentially with pread into one
// 64-byte-aligned allocation (not mmap: the memory is owned, counted and touched up
// front, so a later memory ledger can account for it and no page faults hit the token
// loop). acquire() and acquire_experts() are then pointer arithmetic and never fail.
//
// Thread-safety: load() once; afterwards the provider is read-only and its calls may
// come from the forward-pass thread while other threads read the same memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tiers/tensor_view.h"

namespace hypura::tiers {

class ResidentProvider final : public AddressableProvider {
 public:
  using Progress = std::function<void(uint64_t done, uint64_t total)>;  // bytes

  // Reads all tensor data of `file` (which must outlive the provider).
  static Result<std::unique_ptr<ResidentProvider>> load(const gguf::GgufFile& file,
                                                        const Progress& progress);
  ~ResidentProvider() override;

  std::string name() const override { return "resident"; }

  uint64_t resident_bytes() const { return total_bytes_; }
  compute::WeightView view(model::TensorId id) const override;

 private:
  explicit ResidentProvider(const gguf::GgufFile& file) : AddressableProvider(file) {}
  Status read_section(uint32_t file_index, uint8_t* dst, uint64_t begin, uint64_t end,
                      uint64_t* done, uint64_t total, const Progress& progress);

  struct Section {
    uint8_t* base = nullptr;  // holds bytes [data_offset, file end) of one split file
    uint64_t data_offset = 0;
  };
  std::vector<Section> sections_;  // one per split file
  void* memory_ = nullptr;         // one allocation for all sections
  uint64_t total_bytes_ = 0;
};

}  // namespace hypura::tiers
