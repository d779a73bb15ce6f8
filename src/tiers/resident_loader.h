// The one loader of resident weights: the tensors a plan keeps in RAM, read once at
// start with direct I/O into one ledger-charged allocation (the streaming and the expert
// provider both load this way).
//
// Tensors are sorted by file position and neighbours (gaps under one block) merged into
// runs; each run lands in the buffer at its file offset's residue modulo the direct-I/O
// alignment, so Storage reads straight into place. Runs are read in large chunks with
// several in flight, so the device queue stays full while the kernel faults in the
// fresh destination pages. Progress is reported in bytes after every chunk.
//
// Thread-safety: a function; it drives the given Storages from the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gguf/gguf.h"
#include "io/storage.h"
#include "model/weight_provider.h"
#include "tiers/memory_ledger.h"

namespace hypura::tiers {

// A byte range of one split file of a model.
struct FileRange {
  uint32_t file_index = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Tensors adjacent in one file (gaps of at most one alignment block, 4 KiB, which are
// read along), read as one range: the resident load's runs, and the streamed reads of one
// layer (streaming_provider.h).
struct TensorRun {
  uint32_t file_index = 0;
  uint64_t begin = 0, end = 0;  // file bytes covered, [begin, end)
  std::vector<model::TensorId> tensors;
};
inline constexpr uint64_t kRunMergeGap = 4096;

// The tensors with wanted[id] true, sorted by file position and merged into runs.
std::vector<TensorRun> merge_runs(const gguf::GgufFile& file, const std::vector<bool>& wanted);

struct ResidentTensors {
  LedgerBuffer buffer;               // every loaded byte, charged as kResidentWeights
  std::vector<const uint8_t*> data;  // (n_tensors): a tensor's bytes, null if not loaded
  std::vector<FileRange> ranges;     // what was read (aligned), in file order
  uint64_t bytes = 0;                // == sum of ranges' lengths == buffer size
  double seconds = 0;                // time of the reads (allocation excluded)
  double populate_seconds = 0;       // of which faulting in the fresh pages (overlaps reads)
  bool locked = false;               // mlock succeeded
};

using LoadProgress = std::function<void(uint64_t done, uint64_t total)>;  // bytes

// Loads the tensors with wanted[id] true. `storages` holds one Storage per split file
// (io::Storage::open_all). Errors: the ledger's refusal, a failed read (naming file,
// offset and errno); on error nothing is returned.
Result<ResidentTensors> load_resident_tensors(
    const gguf::GgufFile& file, const std::vector<bool>& wanted,
    std::span<const std::unique_ptr<io::Storage>> storages, MemoryLedger& ledger,
    const std::string& what, bool lock, const LoadProgress& progress);

// Bench's same-run load reference: reads the resident ranges again, with the same code
// and settings, into the same (already faulted-in) memory, and returns bytes per second.
// The bytes written are the ones already there (the file is never modified), so the
// weights stay valid. REQUIRES: nothing reads `resident` meanwhile (no forward pass).
Result<double> reload_resident_bps(std::span<const std::unique_ptr<io::Storage>> storages,
                                   ResidentTensors& resident);

}  // namespace hypura::tiers
