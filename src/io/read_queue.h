// ReadQueue: the lowest layer of storage access, one asynchronous queue of plain reads.
//
// A queue executes reads of (fd, offset, length) into a buffer and reports how many
// bytes each one returned (or -errno). It knows nothing about alignment, splitting,
// short-read handling or files: Storage (storage.h) does all of that on top, so the
// fault-injecting queue (testing/fault_queue.h) exercises exactly the code the real ones use.
//
// Implementations: io_uring (the default) and a pool of threads calling pread (where
// io_uring is unavailable: old kernels, seccomp'd containers, io_uring_disabled=2).
//
// Thread-safety: a queue is driven by one thread (Storage's I/O thread): submit() and
// reap() are never called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"

namespace hypura::io {

struct IoOp {
  int fd = -1;
  uint64_t offset = 0;     // byte offset in the file
  uint32_t length = 0;     // bytes to read
  uint8_t* buf = nullptr;  // (length) bytes, owned by the caller until reaped
  uint64_t cookie = 0;     // returned unchanged in the IoResult
};

struct IoResult {
  uint64_t cookie = 0;
  int64_t result = 0;  // bytes read (may be short; 0 at end of file) or -errno
};

class ReadQueue {
 public:
  virtual ~ReadQueue() = default;
  // Most reads in flight at once.
  virtual uint32_t capacity() const = 0;
  // Queues reads. REQUIRES: in_flight() + ops.size() <= capacity().
  // A failure here is a queue failure (not a read failure): Storage aborts the requests.
  virtual Status submit(std::span<const IoOp> ops) = 0;
  // Collects finished reads into `out`, waiting up to timeout_us for the first one.
  // Returns how many were written (0 on timeout).
  virtual size_t reap(std::span<IoResult> out, int64_t timeout_us) = 0;
  virtual uint32_t in_flight() const = 0;
  virtual std::string name() const = 0;
  // Makes a reap() that is waiting (or the next one) return early. The only method that
  // may be called from another thread: Storage calls it when new requests arrive, so they
  // are issued at once instead of after the next completion.
  virtual void wake() {}
};

enum class QueueKind { kAuto, kUring, kThreads };

// io_uring with `queue_depth` entries. Fails with kUnsupported when the kernel refuses.
Result<std::unique_ptr<ReadQueue>> make_uring_queue(uint32_t queue_depth);
// `n_threads` threads each doing blocking pread; capacity() == queue_depth.
std::unique_ptr<ReadQueue> make_thread_queue(uint32_t queue_depth, uint32_t n_threads);
// kAuto: io_uring, else threads (with a logged note saying why). Passed through the
// queue wrapper when one is set.
Result<std::unique_ptr<ReadQueue>> make_queue(QueueKind kind, uint32_t queue_depth);

// Wraps every queue make_queue() returns from then on: the test build's hypura_faulty sets
// the fault-injecting one (testing/fault_queue.h) so a whole process reads through it. Set
// it at start-up, before any file is opened (not synchronized).
using QueueWrapper = std::function<std::unique_ptr<ReadQueue>(std::unique_ptr<ReadQueue>)>;
void set_queue_wrapper(QueueWrapper wrapper);

const char* queue_kind_name(QueueKind kind);

}  // namespace hypura::io
