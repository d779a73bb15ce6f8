#include "tiers/resident_loader.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>

#include "io/aligned_buffer.h"

namespace hypura::tiers {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kAlign = io::kDirectAlignment;
constexpr uint64_t kLoadChunk = 64 << 20;  // bytes per submit: the progress granularity
constexpr int kChunksInFlight = 4;         // 256 MiB ahead: more than any device queue holds

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::vector<TensorRun> merge_runs(const gguf::GgufFile& file, const std::vector<bool>& wanted) {
  const auto& tensors = file.tensors();
  std::vector<model::TensorId> ids;
  for (size_t id = 0; id < tensors.size(); ++id) {
    if (wanted[id]) ids.push_back(static_cast<model::TensorId>(id));
  }
  std::sort(ids.begin(), ids.end(), [&](model::TensorId a, model::TensorId b) {
    const auto &ta = tensors[a], &tb = tensors[b];
    return ta.file_index != tb.file_index ? ta.file_index < tb.file_index : ta.offset < tb.offset;
  });
  std::vector<TensorRun> runs;
  for (model::TensorId id : ids) {
    const auto& t = tensors[id];
    if (runs.empty() || runs.back().file_index != t.file_index ||
        t.offset > runs.back().end + kRunMergeGap) {
      runs.push_back(TensorRun{t.file_index, t.offset, t.offset, {}});
    }
    runs.back().end = std::max(runs.back().end, t.offset + t.n_bytes);
    runs.back().tensors.push_back(id);
  }
  return runs;
}

namespace {

using Run = TensorRun;

// The aligned file range a run reads (the last block clipped at the end of the file).
FileRange aligned_range(const Run& r, uint64_t file_size) {
  const uint64_t a0 = io::align_down(r.begin, kAlign);
  return FileRange{r.file_index, a0, std::min(io::align_up(r.end, kAlign), file_size) - a0};
}

// Faults in the pages of [p, p + n) (page-aligned p) before a read lands there, split
// over the cores. Fresh memory costs a page fault and a zeroed page per 4 KiB, and in a
// VM memory freed a few seconds earlier has gone back to the host, which must back it
// again, slower than the disk reads (docs/STREAMING.md). Done on the loading side, for
// the next chunk while the device reads the previous ones, not inside the I/O thread's
// submission where it would stall the queue.
double populate(uint8_t* p, uint64_t n) {
  const auto t0 = Clock::now();
  const auto touch = [](uint8_t* q, uint64_t m) {
    if (m == 0 || madvise(q, m, MADV_POPULATE_WRITE) == 0) return;
    for (uint64_t i = 0; i < m; i += 4096) q[i] = 0;  // kernels before 5.14
  };
  const unsigned n_threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  const uint64_t part = io::align_up(n / n_threads + 1, 4096);
  std::vector<std::jthread> helpers;
  for (unsigned t = 1; t < n_threads && t * part < n; ++t) {
    helpers.emplace_back(touch, p + t * part, std::min(part, n - t * part));
  }
  touch(p, std::min(part, n));
  helpers.clear();  // joins
  return seconds_since(t0);
}

// Where each aligned range starts in the buffer: consecutive, each at an aligned offset.
std::vector<uint64_t> places_of(std::span<const FileRange> ranges) {
  std::vector<uint64_t> places;
  uint64_t at = 0;
  for (const FileRange& r : ranges) {
    places.push_back(at);
    at += io::align_up(r.length, kAlign);
  }
  return places;
}

// Reads the ranges into their places in `dst`, a few chunks in flight (faulting in each
// chunk's pages first when the memory is fresh).
Status read_ranges(std::span<const std::unique_ptr<io::Storage>> storages,
                   std::span<const FileRange> ranges, std::span<const uint64_t> places,
                   uint8_t* dst, uint64_t total, bool fresh_memory, double* populate_seconds,
                   const LoadProgress& progress) {
  struct Chunk {
    uint32_t file_index;
    io::ReadId id;
    uint64_t bytes;
  };
  std::deque<Chunk> in_flight;
  uint64_t done = 0;
  Status failed = Status::ok();
  const auto retire = [&] {
    const Chunk c = in_flight.front();
    in_flight.pop_front();
    Status st = storages[c.file_index]->wait(c.id);
    if (!st.is_ok() && failed.is_ok()) failed = st;
    done += c.bytes;
    if (progress) progress(done, total);
  };
  for (size_t i = 0; i < ranges.size() && failed.is_ok(); ++i) {
    const FileRange& r = ranges[i];
    for (uint64_t at = 0; at < r.length && failed.is_ok(); at += kLoadChunk) {
      const uint64_t n = std::min(kLoadChunk, r.length - at);
      if (fresh_memory) *populate_seconds += populate(dst + places[i] + at, n);
      const io::ReadId id =
          storages[r.file_index]->submit(r.offset + at, {dst + places[i] + at, n});
      in_flight.push_back({r.file_index, id, n});
      if (static_cast<int>(in_flight.size()) >= kChunksInFlight) retire();
    }
  }
  while (!in_flight.empty()) retire();  // every read ends before its buffer may go
  return failed;
}

}  // namespace

Result<ResidentTensors> load_resident_tensors(
    const gguf::GgufFile& file, const std::vector<bool>& wanted,
    std::span<const std::unique_ptr<io::Storage>> storages, MemoryLedger& ledger,
    const std::string& what, bool lock, const LoadProgress& progress) {
  if (wanted.size() != file.tensors().size()) {
    return invalid_argument("resident set covers " + std::to_string(wanted.size()) +
                            " tensors; the model has " + std::to_string(file.tensors().size()));
  }
  const std::vector<Run> runs = merge_runs(file, wanted);
  ResidentTensors out;
  for (const Run& r : runs) {
    out.ranges.push_back(aligned_range(r, file.file_sizes()[r.file_index]));
    out.bytes += io::align_up(out.ranges.back().length, kAlign);
  }
  const std::vector<uint64_t> places = places_of(out.ranges);  // (runs)
  HYPURA_ASSIGN_OR_RETURN(out.buffer,
                          ledger.allocate(MemoryKind::kResidentWeights, out.bytes, what));
  out.data.assign(file.tensors().size(), nullptr);
  for (size_t i = 0; i < runs.size(); ++i) {
    for (model::TensorId id : runs[i].tensors) {
      out.data[id] =
          out.buffer.data() + places[i] + (file.tensors()[id].offset - out.ranges[i].offset);
    }
  }
  const auto t0 = Clock::now();
  Status st = read_ranges(storages, out.ranges, places, out.buffer.data(), out.bytes,
                          /*fresh_memory=*/true, &out.populate_seconds, progress);
  out.seconds = seconds_since(t0);
  if (!st.is_ok()) return st.with_context("loading " + what);
  if (lock) out.locked = out.buffer.lock();
  return out;
}

Result<double> reload_resident_bps(std::span<const std::unique_ptr<io::Storage>> storages,
                                   ResidentTensors& resident) {
  if (resident.bytes == 0) return 0.0;
  const std::vector<uint64_t> places = places_of(resident.ranges);
  const auto t0 = Clock::now();
  HYPURA_RETURN_IF_ERROR(read_ranges(storages, resident.ranges, places, resident.buffer.data(),
                                     resident.bytes, /*fresh_memory=*/false, nullptr, nullptr));
  return static_cast<double>(resident.bytes) / seconds_since(t0);
}

}  // namespace hypura::tiers
