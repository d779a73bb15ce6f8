// Storage: range reads split into aligned device reads, driven by one I/O thread.
//
// Vocabulary: a *request* is one submit() (a byte range of the file into caller memory);
// a *segment* is one device read of aligned [file_offset, file_offset + length) into
// either the request's destination (direct) or a bounce buffer (then copied out).
#include "io/storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/log.h"
#include "io/aligned_buffer.h"

namespace hypura::io {
namespace {

constexpr int64_t kReapTimeoutUs = 500;  // bounds the delay before new requests are issued
constexpr int kMaxStalledRetries = 8;    // short reads in a row that made no progress

struct Request {
  ReadId id = 0;
  uint64_t offset = 0;  // requested file range [offset, end)
  uint64_t end = 0;
  uint8_t* dest = nullptr;
  bool congruent = false;    // dest - offset is aligned: the middle is read in place
  uint64_t cursor = 0;       // next file offset to cut a segment from (aligned space)
  uint64_t cursor_end = 0;   // align_up(end)
  uint32_t outstanding = 0;  // segments issued and not yet finished
  Status status;
  bool done = false;
};

struct Segment {
  Request* req = nullptr;
  uint64_t file_offset = 0;  // aligned
  uint32_t length = 0;       // aligned (except in buffered mode)
  uint8_t* buf = nullptr;    // device target: inside dest, or a bounce buffer
  int bounce = -1;           // bounce buffer index, or -1 for direct
  uint32_t done_bytes = 0;   // already read (continuations after short reads)
  int stalled = 0;
  int failures = 0;  // failed attempts of this read (EIO and the like), retried up to a limit
};

}  // namespace

struct Storage::Impl {
  std::string path;
  int fd = -1;
  uint64_t file_size = 0;
  uint64_t align = 1;
  StorageOptions options;
  std::unique_ptr<ReadQueue> engine;

  mutable std::mutex mu;
  std::condition_variable work_cv;          // I/O thread: new requests or stop
  mutable std::condition_variable done_cv;  // waiters: a request finished
  std::unordered_map<ReadId, std::unique_ptr<Request>> requests;
  std::deque<Request*> to_cut;             // normal requests with segments not yet issued, FIFO
  std::deque<Request*> to_cut_background;  // the same for background requests
  uint32_t background_depth = 1;           // in-flight reads at most while serving background
  std::deque<uint64_t> retry;              // segment slots to reissue (short reads, EINTR)
  std::vector<Segment> slots;              // in-flight segments, indexed by IoOp cookie
  std::vector<uint64_t> free_slots;
  std::vector<AlignedBuffer> bounce;  // up to request_bytes each, allocated and grown on use
  std::vector<int> free_bounce;
  ReadId next_id = 1;
  bool stop = false;
  StorageStats stats;
  std::thread thread;

  ~Impl() {
    if (thread.joinable()) {
      {
        std::lock_guard lock(mu);
        stop = true;
      }
      work_cv.notify_all();
      thread.join();
    }
    if (fd >= 0) ::close(fd);
  }

  void start() {
    uint32_t cap = engine->capacity();
    slots.resize(cap);
    for (uint32_t i = cap; i > 0; --i) free_slots.push_back(i - 1);
    bounce.resize(cap);
    for (int i = static_cast<int>(cap); i > 0; --i) free_bounce.push_back(i - 1);
    thread = std::thread([this] { loop(); });
  }

  // ---- cutting requests into segments (under mu) ----

  // Next segment of `r`, or false when its range is exhausted.
  bool cut(Request& r, Segment& s) {
    if (r.cursor >= r.cursor_end || !r.status.is_ok()) return false;
    uint64_t begin = r.cursor, end;
    uint64_t aligned_end = align_down(r.end, align);
    bool in_place;
    if (r.congruent && begin >= r.offset && begin < aligned_end) {
      end = std::min(begin + options.request_bytes, aligned_end);  // middle: read in place
      in_place = true;
    } else if (r.congruent && begin < r.offset) {
      end = begin + align;  // unaligned head block
      in_place = false;
    } else {
      end = std::min(begin + options.request_bytes, r.cursor_end);  // tail, or copy path
      in_place = false;
    }
    s = Segment{};
    s.req = &r;
    s.file_offset = begin;
    s.length = static_cast<uint32_t>(end - begin);
    if (in_place) {
      s.buf = r.dest + (begin - r.offset);
    } else {
      s.bounce = free_bounce.back();
      free_bounce.pop_back();
      // Sized to the segment, grown on demand: a head or tail block needs 4 KiB, and a
      // buffer of request_bytes per engine slot (zero-filled, so resident) added up to
      // 128 MiB of RSS the ledger never saw at 16 MiB x 8 (issue 21).
      const size_t need = static_cast<size_t>(end - begin);
      if (bounce[s.bounce].size() < need) bounce[s.bounce] = AlignedBuffer(need, 4096);
      s.buf = bounce[s.bounce].data();
    }
    r.cursor = end;
    ++r.outstanding;
    return true;
  }

  // Collects segments to issue, up to the engine's free capacity (under mu).
  void collect(std::vector<IoOp>& ops) {
    uint32_t room = engine->capacity() - engine->in_flight();
    while (ops.size() < room && !retry.empty()) {
      uint64_t slot = retry.front();
      retry.pop_front();
      ops.push_back(op_for(slot));
    }
    cut_from(to_cut, room, ops);
    if (!to_cut.empty()) return;  // background waits while a normal request does
    const uint32_t in_flight = engine->in_flight() + static_cast<uint32_t>(ops.size());
    if (in_flight < background_depth)
      cut_from(to_cut_background, ops.size() + background_depth - in_flight, ops);
  }

  // Cuts segments off the front of `queue` until `ops` holds `room` reads or it is empty.
  // A request leaves the queue as soon as its last segment is cut: its reads may finish
  // and its waiter free it before the next collect(), so it must not linger there.
  void cut_from(std::deque<Request*>& queue, size_t room, std::vector<IoOp>& ops) {
    while (ops.size() < room && !queue.empty()) {
      Request& r = *queue.front();
      Segment s;
      if (!cut(r, s)) {
        queue.pop_front();
        maybe_finish(r);
        continue;
      }
      if (r.cursor >= r.cursor_end) queue.pop_front();
      uint64_t slot = free_slots.back();
      free_slots.pop_back();
      slots[slot] = s;
      ops.push_back(op_for(slot));
    }
  }

  bool idle() const { return to_cut.empty() && to_cut_background.empty() && retry.empty(); }

  IoOp op_for(uint64_t slot) {
    Segment& s = slots[slot];
    ++stats.device_reads;
    return IoOp{fd, s.file_offset + s.done_bytes, s.length - s.done_bytes, s.buf + s.done_bytes,
                slot};
  }

  // ---- completions (under mu) ----

  void complete(const IoResult& res) {
    Segment& s = slots[res.cookie];
    Request& r = *s.req;
    if (res.result == -EINTR || res.result == -EAGAIN) {
      --stats.device_reads;  // reissued as the same read
      retry.push_back(res.cookie);
      return;
    }
    if (res.result < 0) {
      const int err = static_cast<int>(-res.result);
      const std::string what = "read of " + path + " at offset " +
                               std::to_string(s.file_offset + s.done_bytes) + " (" +
                               std::to_string(s.length - s.done_bytes) + " bytes)";
      // A device error may be transient (a cable, a controller reset): read again before
      // giving up. Errors of the request itself would only repeat.
      if (err != EINVAL && err != EBADF && err != EFAULT && s.failures < options.read_retries) {
        ++s.failures;
        ++stats.retried_reads;
        log().warn("io: {} failed: {}; reading again ({} of {})", what, std::strerror(err),
                   s.failures, options.read_retries);
        retry.push_back(res.cookie);
        return;
      }
      fail(r, io_error(what + " failed" +
                       (s.failures > 0 ? " " + std::to_string(s.failures + 1) + " times" : "") +
                       ": " + std::strerror(err)));
      return finish_segment(res.cookie, false);
    }
    stats.device_bytes += static_cast<uint64_t>(res.result);
    uint64_t got = s.done_bytes + static_cast<uint64_t>(res.result);
    bool at_eof = s.file_offset + got >= file_size;
    if (got >= s.length || at_eof) return finish_segment(res.cookie, true);
    ++stats.short_reads;
    if (res.result == 0) {
      fail(r, io_error("read of " + path + " at offset " + std::to_string(s.file_offset + got) +
                       ": unexpected end of file (file size " + std::to_string(file_size) + ")"));
      return finish_segment(res.cookie, false);
    }
    // Continue after the short read from an aligned offset (O_DIRECT requires it).
    uint32_t resume = static_cast<uint32_t>(align_down(got, align));
    s.stalled = resume > s.done_bytes ? 0 : s.stalled + 1;
    if (s.stalled > kMaxStalledRetries) {
      fail(r, io_error("read of " + path + " at offset " + std::to_string(s.file_offset) +
                       ": short reads made no progress"));
      return finish_segment(res.cookie, false);
    }
    s.done_bytes = resume;
    retry.push_back(res.cookie);
  }

  void finish_segment(uint64_t slot, bool ok) {
    Segment& s = slots[slot];
    Request& r = *s.req;
    if (ok && s.bounce >= 0 && r.status.is_ok()) {
      uint64_t lo = std::max(s.file_offset, r.offset);
      uint64_t hi = std::min<uint64_t>(s.file_offset + s.length, r.end);
      std::memcpy(r.dest + (lo - r.offset), s.buf + (lo - s.file_offset), hi - lo);
      stats.bounced_bytes += hi - lo;
    }
    if (s.bounce >= 0) free_bounce.push_back(s.bounce);
    free_slots.push_back(slot);
    --r.outstanding;
    maybe_finish(r);
  }

  void fail(Request& r, Status st) {
    if (r.status.is_ok()) {
      r.status = std::move(st);
      ++stats.failed_requests;
    }
  }

  void maybe_finish(Request& r) {
    bool exhausted = r.cursor >= r.cursor_end || !r.status.is_ok();
    if (r.done || r.outstanding > 0 || !exhausted) return;
    // A failed request may still sit in a queue; drop it so nothing dangles after wait().
    if (!r.status.is_ok()) {
      for (auto* queue : {&to_cut, &to_cut_background}) {
        auto it = std::find(queue->begin(), queue->end(), &r);
        if (it != queue->end()) queue->erase(it);
      }
    }
    r.done = true;
    done_cv.notify_all();
  }

  // ---- the I/O thread ----

  void loop() {
    std::vector<IoOp> ops;
    std::vector<IoResult> results(engine->capacity());
    for (;;) {
      ops.clear();
      {
        std::unique_lock lock(mu);
        if (engine->in_flight() == 0) {
          work_cv.wait(lock, [&] { return stop || !idle(); });
          if (stop && idle()) return;
        }
        collect(ops);
      }
      if (!ops.empty()) {
        Status st = engine->submit(ops);
        if (!st.is_ok()) abort_ops(ops, st);
      }
      size_t n = engine->reap(results, kReapTimeoutUs);
      if (n > 0) {
        std::lock_guard lock(mu);
        for (size_t i = 0; i < n; ++i) complete(results[i]);
      }
    }
  }

  // The engine refused a batch: end each of its requests with the engine's error.
  void abort_ops(const std::vector<IoOp>& ops, const Status& st) {
    std::lock_guard lock(mu);
    for (const IoOp& op : ops) {
      fail(*slots[op.cookie].req, st.with_context("I/O engine " + engine->name()));
      finish_segment(op.cookie, false);
    }
  }
};

Storage::Storage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Storage::~Storage() = default;

Result<std::unique_ptr<Storage>> Storage::open(const std::string& path,
                                               const StorageOptions& options) {
  HYPURA_ASSIGN_OR_RETURN(auto engine, make_queue(options.engine, options.queue_depth));
  return open(path, options, std::move(engine));
}

Result<std::unique_ptr<Storage>> Storage::open(const std::string& path,
                                               const StorageOptions& options,
                                               std::unique_ptr<ReadQueue> engine) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->options = options;
  bool direct = options.direct;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0 && direct && errno == EINVAL && !options.require_direct) {
    log().warn("io: {} does not allow O_DIRECT; reading it through the page cache", path);
    direct = false;
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) return io_error("cannot open " + path + ": " + std::strerror(errno));
  impl->fd = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("cannot stat " + path + ": " + std::strerror(errno));
  impl->file_size = static_cast<uint64_t>(st.st_size);
  impl->align = direct ? kDirectAlignment : 1;
  impl->options.direct = direct;
  impl->options.request_bytes = align_up(std::max<uint64_t>(options.request_bytes, 4096), 4096);
  impl->background_depth = options.background_queue_depth > 0
                               ? options.background_queue_depth
                               : std::max<uint32_t>(1, options.queue_depth / 8);
  impl->background_depth = std::min(impl->background_depth, engine->capacity());
  impl->engine = std::move(engine);
  impl->start();
  return std::unique_ptr<Storage>(new Storage(std::move(impl)));
}

const std::string& Storage::path() const {
  return impl_->path;
}
uint64_t Storage::size() const {
  return impl_->file_size;
}
bool Storage::direct() const {
  return impl_->options.direct;
}
uint64_t Storage::alignment() const {
  return impl_->align;
}
std::string Storage::engine_name() const {
  return impl_->engine->name();
}
const StorageOptions& Storage::options() const {
  return impl_->options;
}

ReadId Storage::submit(uint64_t offset, std::span<uint8_t> dest, Priority priority) {
  Impl& m = *impl_;
  auto r = std::make_unique<Request>();
  r->offset = offset;
  r->end = offset + dest.size();
  r->dest = dest.data();
  uint64_t misalign = (reinterpret_cast<uintptr_t>(dest.data()) - offset) % m.align;
  r->congruent = misalign == 0;
  r->cursor = align_down(offset, m.align);
  r->cursor_end = align_up(r->end, m.align);
  std::lock_guard lock(m.mu);
  r->id = m.next_id++;
  ++m.stats.requests;
  m.stats.bytes_requested += dest.size();
  if (r->end < offset || r->end > m.file_size) {
    r->status = invalid_argument("read of " + m.path + " [" + std::to_string(offset) + ", +" +
                                 std::to_string(dest.size()) + ") is outside the file (" +
                                 std::to_string(m.file_size) + " bytes)");
    r->done = true;
  } else if (dest.empty()) {
    r->done = true;
  } else {
    (priority == Priority::kBackground ? m.to_cut_background : m.to_cut).push_back(r.get());
  }
  ReadId id = r->id;
  m.requests.emplace(id, std::move(r));
  m.work_cv.notify_one();  // an idle I/O thread waits here...
  m.engine->wake();        // ...a busy one in reap()
  return id;
}

void Storage::expedite(ReadId id) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  auto it = m.requests.find(id);
  if (it == m.requests.end()) return;
  auto queued = std::find(m.to_cut_background.begin(), m.to_cut_background.end(), it->second.get());
  if (queued == m.to_cut_background.end()) return;
  m.to_cut_background.erase(queued);
  m.to_cut.push_back(it->second.get());
  m.engine->wake();
}

uint64_t Storage::cancel(ReadId id) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  auto it = m.requests.find(id);
  if (it == m.requests.end() || it->second->done) return 0;
  Request* r = it->second.get();
  bool queued = false;
  for (auto* queue : {&m.to_cut, &m.to_cut_background}) {
    auto q = std::find(queue->begin(), queue->end(), r);
    if (q == queue->end()) continue;
    queue->erase(q);
    queued = true;
  }
  if (!queued || r->cursor >= r->cursor_end) return 0;
  const uint64_t dropped = r->cursor_end - r->cursor;
  r->cursor = r->cursor_end;  // nothing more is cut from it
  r->status = Status(StatusCode::kCancelled, "read of " + m.path + " at offset " +
                                                 std::to_string(r->offset) + " cancelled");
  ++m.stats.cancelled_requests;
  m.maybe_finish(*r);
  return dropped;
}

Status Storage::wait(ReadId id) {
  Impl& m = *impl_;
  std::unique_lock lock(m.mu);
  auto it = m.requests.find(id);
  if (it == m.requests.end()) return invalid_argument("unknown or already waited read id");
  Request* r = it->second.get();
  m.done_cv.wait(lock, [&] { return r->done; });
  Status st = std::move(r->status);
  m.requests.erase(it);
  return st;
}

bool Storage::done(ReadId id) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->requests.find(id);
  return it == impl_->requests.end() || it->second->done;
}

Status Storage::read(uint64_t offset, std::span<uint8_t> dest) {
  return wait(submit(offset, dest));
}

StorageStats Storage::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

AlignedView aligned_view(uint64_t offset, uint64_t length, uint64_t alignment) {
  AlignedView v;
  v.skip = offset % alignment;
  v.buffer_bytes = align_up(v.skip + length, alignment);
  return v;
}

Result<std::vector<std::unique_ptr<Storage>>> Storage::open_all(
    const std::vector<std::string>& paths, const StorageOptions& options,
    const std::function<std::unique_ptr<ReadQueue>()>& make_queue) {
  std::vector<std::unique_ptr<Storage>> storages;
  for (const std::string& path : paths) {
    std::unique_ptr<Storage> storage;
    if (make_queue) {
      HYPURA_ASSIGN_OR_RETURN(storage, open(path, options, make_queue()));
    } else {
      HYPURA_ASSIGN_OR_RETURN(storage, open(path, options));
    }
    storages.push_back(std::move(storage));
  }
  return storages;
}

Status wait_all(std::span<const std::unique_ptr<Storage>> storages,
                std::vector<PendingRead>& reads) {
  Status first = Status::ok();
  for (const PendingRead& r : reads) {
    Status st = storages[r.file_index]->wait(r.id);
    if (!st.is_ok() && first.is_ok()) first = std::move(st);
  }
  reads.clear();
  return first;
}

}  // namespace hypura::io
