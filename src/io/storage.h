// Storage: read-only, asynchronous, direct-I/O access to one file (a GGUF model, or the
// profiler's scratch file).
//
// Reads are byte ranges into caller memory. Underneath, every range becomes device reads
// with O_DIRECT: offsets, lengths and buffers aligned to alignment() (4096), each at most
// request_bytes long, kept queue_depth deep in a ReadQueue (io_uring, or a pread thread
// pool where io_uring is unavailable) by one I/O thread, so a large tensor keeps the
// device queue full. An unaligned head and tail of a range are read into aligned bounce
// buffers and copied; so is a whole range whose destination address is not congruent to
// its file offset modulo alignment() (use aligned_view() to lay out buffers that avoid
// the copy). Short reads are continued, EINTR/EAGAIN retried, a failed device read (EIO)
// issued again up to read_retries times; what still fails ends the request with a Status
// naming the file, the offset and the errno text. A failed request
// leaves its destination in an unspecified state: callers must not compute on it.
//
// The file is never written. Page cache: with O_DIRECT the reads bypass it, so figures
// measured through Storage are the device's; when the filesystem refuses O_DIRECT the
// file is opened buffered (logged, direct() == false) unless require_direct is set.
//
// Priority: a request is kNormal or kBackground (speculative work). Normal requests are
// served in submission order, each ahead of every background request not yet issued;
// background ones are issued only while no normal request waits and fewer than
// background_queue_depth device reads are in flight, so a normal request that arrives
// later finds the device queue nearly free instead of behind megabytes of speculation
// (device reads already issued cannot be recalled).
//
// Threading: submit/wait/done/read/expedite may be called from any threads. The
// destructor waits for reads in flight (their buffers are the callers'), after which all
// destinations may be freed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/read_queue.h"

namespace hypura::io {

struct StorageOptions {
  uint32_t queue_depth = 32;         // device reads in flight
  uint64_t request_bytes = 1 << 20;  // largest device read; rounded up to alignment
  QueueKind engine = QueueKind::kAuto;
  bool direct = true;           // O_DIRECT (recommended: no page-cache pollution)
  bool require_direct = false;  // fail rather than fall back to buffered reads
  // Device reads in flight at most while only background requests are being served;
  // 0 picks max(1, queue_depth / 8).
  uint32_t background_queue_depth = 0;
  // A device read that fails (EIO and the like) is issued again up to this many times
  // before its request fails.
  int read_retries = 2;
};

enum class Priority : uint8_t { kNormal, kBackground };

using ReadId = uint64_t;

struct StorageStats {
  uint64_t requests = 0;         // submit() calls
  uint64_t bytes_requested = 0;  // sum of the requested lengths
  uint64_t device_reads = 0;     // reads handed to the engine (retries included)
  uint64_t device_bytes = 0;     // bytes the device returned (alignment padding included)
  uint64_t bounced_bytes = 0;    // bytes copied out of bounce buffers
  uint64_t short_reads = 0;
  uint64_t retried_reads = 0;  // failed device reads issued again (read_retries)
  uint64_t failed_requests = 0;
  uint64_t cancelled_requests = 0;  // cancel() calls that dropped segments
};

class Storage {
 public:
  static Result<std::unique_ptr<Storage>> open(const std::string& path,
                                               const StorageOptions& options = {});
  // With a given engine (tests pass the fault-injecting one); options.engine is ignored.
  static Result<std::unique_ptr<Storage>> open(const std::string& path,
                                               const StorageOptions& options,
                                               std::unique_ptr<ReadQueue> engine);
  // One Storage per path (the files of a split model). make_queue, when given, supplies
  // each one's engine (tests inject faults); otherwise options.engine picks it.
  static Result<std::vector<std::unique_ptr<Storage>>> open_all(
      const std::vector<std::string>& paths, const StorageOptions& options,
      const std::function<std::unique_ptr<ReadQueue>()>& make_queue = {});
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  const std::string& path() const;
  uint64_t size() const;       // file size in bytes
  bool direct() const;         // O_DIRECT in effect
  uint64_t alignment() const;  // 4096 with O_DIRECT, else 1
  std::string engine_name() const;
  const StorageOptions& options() const;

  // Starts reading file bytes [offset, offset + dest.size()) into dest. A range outside
  // the file makes wait() return kInvalidArgument. REQUIRES: dest valid until wait().
  ReadId submit(uint64_t offset, std::span<uint8_t> dest, Priority priority = Priority::kNormal);
  // Makes a kBackground read kNormal (e.g. a speculative read that became needed): its
  // segments not yet issued queue behind the normal requests already waiting. No effect
  // on other reads.
  void expedite(ReadId id);
  // Drops the segments of read `id` not yet issued (e.g. a speculative read that turned
  // out not to be needed); those in flight complete. Returns the file bytes dropped; when
  // not 0, wait(id) returns kCancelled once the segments in flight are done, and the
  // destination holds unspecified bytes. 0 when every segment was already issued (the
  // read completes normally) or the id is unknown.
  uint64_t cancel(ReadId id);
  // Blocks until read `id` completed or failed. Call exactly once per id.
  Status wait(ReadId id);
  // True once wait(id) would not block.
  bool done(ReadId id) const;
  // submit + wait.
  Status read(uint64_t offset, std::span<uint8_t> dest);

  StorageStats stats() const;

 private:
  struct Impl;
  explicit Storage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A read in flight on one file of a split model: the index of its Storage among the
// model's (open_all) and the read's id.
struct PendingRead {
  uint32_t file_index = 0;
  ReadId id = 0;
};

// Waits for every read in `reads` (each once), clears it, and returns the first failure:
// a buffer is usable only when all of its reads succeeded.
Status wait_all(std::span<const std::unique_ptr<Storage>> storages,
                std::vector<PendingRead>& reads);

// Where to put a file range [offset, offset + length) inside an aligned buffer so that
// Storage reads it with no copy but the head/tail blocks: the data starts `skip` bytes
// into a buffer of `buffer_bytes` (both derived from the alignment).
struct AlignedView {
  uint64_t skip = 0;          // offset % alignment
  uint64_t buffer_bytes = 0;  // align_up(skip + length, alignment)
};
AlignedView aligned_view(uint64_t offset, uint64_t length, uint64_t alignment = 4096);

}  // namespace hypura::io
