// StreamingProvider: a WeightProvider over two tiers, RAM and the model file on NVMe.
//
// Resident tensors are read once at load with direct I/O (io::Storage, O_DIRECT, the
// device queue kept full) into one ledger-charged allocation, locked in memory where
// RLIMIT_MEMLOCK allows. Streamed tensors are grouped by layer ("blk.N."; tensors outside
// the stack form group -1, read first and held for the whole pass) and read every
// forward pass into a pool of aligned slots, one layer per slot (docs/STREAMING.md):
//
//   slots are a ring: layers are read in layer order (cyclically: after the last streamed
//   layer of a pass come the first ones of the next pass), each into the next slot of the
//   ring, while at most `prefetch_depth` layers are read ahead of the one in use;
//   acquire(L) waits for L's reads (that wait is the stall bench reports), marks its slot
//   in use and tops the read-ahead up; release(L) frees the slot for reuse.
//   A slot in use or with a read in flight is never chosen for a new read.
//
// A failed read makes acquire() return the error (file, offset, errno text) and the
// slot is dropped; nothing is computed on it. The next acquire() re-synchronises.
// A prompt batch is one forward pass, so each streamed layer is read once per batch.
// A layer's streamed tensors that are neighbours in the file (gaps of at most 4 KiB: a
// norm between two FFN matrices) are one read, laid out in the slot as in the file: small
// models' 0.5 MiB tensors become one request of the layer's size, and the head/tail block
// two neighbours share is read once (stats count the tensors' bytes; the gaps are read
// along).
//
// Thread-safety: like every WeightProvider, driven by the one thread running the forward
// pass (sessions of an engine serialise their passes). Storage's I/O thread fills slots
// concurrently; the provider only touches a slot's bytes after waiting for its reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "io/storage.h"
#include "model/weight_provider.h"
#include "tiers/memory_ledger.h"
#include "tiers/resident_loader.h"

namespace hypura::tiers {

struct StreamingConfig {
  std::vector<bool> streamed;  // (n_tensors): true = read each pass, false = resident
  // (n_tensors, or empty: none) neither loaded nor streamed: a GPU holds and computes them
  // (the GPU tier's layers and head); acquiring one is an error.
  std::vector<bool> absent;
  int n_slots = 3;             // pool slots (>= 2), each one layer's streamed tensors
  int prefetch_depth = 2;      // layers read ahead of the one computing (<= n_slots - 1)
  bool lock_resident = true;   // mlock the resident tensors when allowed
  io::StorageOptions storage;  // queue depth and request size: the profile's best
  // Tests: builds the read queue of each split file's Storage (e.g. fault-injecting).
  std::function<std::unique_ptr<io::ReadQueue>()> make_queue;
};

struct StreamingStats {
  uint64_t bytes_read = 0;        // streamed bytes requested from storage (all passes)
  uint64_t layers_read = 0;       // layer reads issued
  uint64_t demand_reads = 0;      // acquires that found their layer not yet issued
  uint64_t passes = 0;            // forward passes begun (begin_pass)
  uint64_t unconsumed_bytes = 0;  // read (or reading) ahead, not yet acquired
  double stall_seconds = 0;       // time acquire() waited for reads
  uint64_t resident_bytes = 0;    // tensor bytes loaded at start
  double load_seconds = 0;        // time of that load
  bool resident_locked = false;
};

class StreamingProvider final : public model::WeightProvider {
 public:
  using Progress = std::function<void(uint64_t done, uint64_t total)>;  // bytes

  // Loads the resident tensors and allocates the pool, all charged to `ledger`.
  // `file` and `ledger` must outlive the provider. Errors: a budget refusal, an
  // unreadable file.
  static Result<std::unique_ptr<StreamingProvider>> create(const gguf::GgufFile& file,
                                                           StreamingConfig config,
                                                           MemoryLedger& ledger,
                                                           const Progress& progress);
  ~StreamingProvider() override;

  Status begin_pass() override;
  Status acquire(int layer, std::span<const model::TensorId> ids,
                 std::span<compute::WeightView> out) override;
  Status acquire_experts(int layer, std::span<const model::ExpertRequest> requests,
                         std::span<compute::WeightView> out) override;
  void release(int layer) override;
  uint64_t bytes_read() const override { return stats_.bytes_read; }
  std::string name() const override;

  StreamingStats stats() const;

  // Bench's same-run storage reference: whole passes with no compute, each streamed layer
  // acquired and released in order with the usual read-ahead, i.e. this provider's own
  // reads as fast as the disk delivers them. Returns streamed bytes per second over about
  // `seconds` (whole passes). The passes count in stats() like any other.
  Result<double> measure_io_only_bps(double seconds);
  uint64_t bytes_per_pass() const { return bytes_per_pass_; }  // streamed bytes a pass reads
  uint64_t slot_bytes() const { return slot_bytes_; }
  int n_slots() const { return static_cast<int>(slots_.size()); }
  int prefetch_depth() const { return depth_; }
  int n_streamed_layers() const { return static_cast<int>(stream_layers_.size()); }
  // The resident load (its memory and file ranges).
  const ResidentTensors& resident() const { return resident_; }
  // Bench's same-run load reference (resident_loader.h). REQUIRES: no forward pass running.
  Result<double> reload_resident_bps() { return tiers::reload_resident_bps(storages_, resident_); }

  // Slot states for tests: which layer each slot holds (-1: none) and whether it is in
  // use or reading.
  struct SlotInfo {
    int layer = -1;
    bool in_use = false;
    bool reading = false;  // issued, not yet waited for
  };
  std::vector<SlotInfo> slot_info() const;

 private:
  enum class SlotState { kFree, kReading, kReady, kInUse };
  struct Slot {
    LedgerBuffer buffer;  // (slot_bytes_)
    int stream = -1;      // index into stream_layers_, -1: none
    SlotState state = SlotState::kFree;
    std::vector<io::PendingRead> reads;  // issued, not yet waited for
  };
  // One read of a layer: file-adjacent streamed tensors (a TensorRun) into its slot.
  struct LayerRead {
    uint32_t file_index = 0;
    uint64_t offset = 0, length = 0;  // file range
    uint64_t slot_offset = 0;
  };
  struct StreamLayer {
    int layer = 0;
    std::vector<model::TensorId> tensors;
    std::vector<LayerRead> reads;  // the tensors merged into file-adjacent runs
    uint64_t bytes = 0;            // sum of the tensors' n_bytes
  };
  // Where a tensor's bytes are: resident memory, or an offset inside a slot.
  struct Location {
    const uint8_t* resident = nullptr;
    int stream = -1;  // index into stream_layers_
    uint64_t slot_offset = 0;
  };

  StreamingProvider(const gguf::GgufFile& file, MemoryLedger& ledger)
      : file_(file), ledger_(ledger) {}
  Status build_layout(const StreamingConfig& config);
  Status load_resident(bool lock, const Progress& progress);
  Status allocate_pool(int n_slots);

  int find_slot(int stream) const;
  bool is_held(int stream) const;
  int count_ahead() const;
  void top_up();
  void issue(int slot, int stream);
  Status wait_slot(int slot);
  void drain_unused();
  Status ensure_ready(int layer, int* slot_out);
  Status view(int layer, model::TensorId id, compute::WeightView* out);

  const gguf::GgufFile& file_;
  MemoryLedger& ledger_;
  std::vector<std::unique_ptr<io::Storage>> storages_;  // one per split file
  std::vector<Location> locations_;                     // (n_tensors)
  std::vector<bool> absent_;                            // StreamingConfig::absent
  std::vector<StreamLayer> stream_layers_;              // ascending layer
  std::vector<int> stream_of_layer_;                    // (n_layer + 1) by layer + 1: index or -1
  ResidentTensors resident_;
  std::vector<Slot> slots_;
  uint64_t slot_bytes_ = 0;
  uint64_t bytes_per_pass_ = 0;
  int depth_ = 1;
  int next_slot_ = 0;    // ring position of the next read
  int next_stream_ = 0;  // stream layer to read next (cyclic)
  StreamingStats stats_;
};

}  // namespace hypura::tiers
