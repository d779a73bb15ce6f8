#include "server/connection_guard.h"

#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace hypura::server {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kStopCheck = std::chrono::milliseconds(100);  // how often waits look at stop

thread_local RequestFault t_fault = RequestFault::kNone;
thread_local bool t_reject = false;  // set while the accepting thread turns a connection away

// What a connection is doing; only the first two may be evicted for a newcomer.
enum class Phase { kIdle, kHeaders, kBusy };

// Polls fd for `events` until the deadline, in slices so that a stopping server is
// noticed. Returns 1 when ready, 0 on timeout or stop, -1 on error.
int wait_for(int fd, short events, Clock::time_point deadline,
             const std::function<bool()>& running) {
  for (;;) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero() || !running()) return 0;
    const auto slice = std::min<Clock::duration>(left, kStopCheck);
    pollfd p{fd, events, 0};
    const int r = ::poll(
        &p, 1, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count()));
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

void socket_address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? ::getpeername(fd, sa, &len) : ::getsockname(fd, sa, &len)) != 0) return;
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> serv{};
  if (::getnameinfo(sa, len, host.data(), host.size(), serv.data(), serv.size(),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host.data();
    port = std::atoi(serv.data());
  }
}

// A connection's socket as httplib reads it, with the deadlines and header budget of
// ConnectionLimits. httplib reads headers a byte at a time, so reads are buffered, and
// the header scan sees exactly the bytes httplib consumes.
class GuardedStream : public httplib::Stream {
 public:
  GuardedStream(socket_t fd, const ConnectionLimits& limits, std::chrono::seconds write_timeout,
                std::function<bool()> running, std::function<void()> on_headers_done)
      : fd_(fd),
        limits_(limits),
        write_timeout_(write_timeout),
        running_(std::move(running)),
        on_headers_done_(std::move(on_headers_done)) {}

  // Waits up to `idle` for the first byte of a request.
  bool wait_for_request(std::chrono::milliseconds idle) {
    return off_ < len_ || wait_for(fd_, POLLIN, Clock::now() + idle, running_) > 0;
  }

  // A request begins: its line and headers must arrive within header_timeout.
  void start_request() {
    in_headers_ = true;
    header_bytes_ = header_lines_ = line_len_ = 0;
    prev_ = 0;
    deadline_ = Clock::now() + limits_.header_timeout;
    t_fault = RequestFault::kNone;
  }

  bool is_readable() const override {
    return off_ < len_ || wait_for(fd_, POLLIN, deadline_, running_) > 0;
  }
  // Writable, and the client has not hung up (a peek sees EOF): the generation loop asks
  // this between tokens to cancel for departed clients.
  bool is_writable() const override {
    if (wait_for(fd_, POLLOUT, Clock::now() + write_timeout_, running_) <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) return true;
    char c;
    return ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ == len_ && !fill()) return -1;
    size_t n = std::min(size, len_ - off_);
    if (in_headers_ && (n = scan_headers(n)) == 0) return -1;
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (wait_for(fd_, POLLOUT, Clock::now() + write_timeout_, running_) <= 0) return -1;
    ssize_t n;
    do {
      n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  bool fill() {
    const int ready = wait_for(fd_, POLLIN, deadline_, running_);
    if (ready == 0 && Clock::now() >= deadline_) t_fault = RequestFault::kTimeout;
    if (ready <= 0) return false;
    ssize_t n;
    do {
      n = ::recv(fd_, buf_.data(), buf_.size(), 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    off_ = 0;
    len_ = static_cast<size_t>(n);
    return true;
  }

  // How many of the next n buffered bytes may go to httplib: up to the headers' blank
  // line (after which the body's deadline applies), or 0 past the header budget.
  size_t scan_headers(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = buf_[off_ + i];
      ++line_len_;
      if (++header_bytes_ > limits_.max_header_bytes) return too_large();
      if (c == '\n') {
        const bool blank = line_len_ == 2 && prev_ == '\r';
        line_len_ = 0;
        if (blank && ++header_lines_ > 1) {  // httplib ends headers at CRLF only
          in_headers_ = false;
          deadline_ = Clock::now() + limits_.body_timeout;
          on_headers_done_();
          return i + 1;
        }
        if (!blank && ++header_lines_ > limits_.max_header_count + 1) return too_large();
      }
      prev_ = c;
    }
    return n;
  }
  size_t too_large() {
    t_fault = RequestFault::kHeadersTooLarge;
    return 0;
  }

  const socket_t fd_;
  const ConnectionLimits& limits_;
  const std::chrono::seconds write_timeout_;
  const std::function<bool()> running_;
  const std::function<void()> on_headers_done_;
  std::array<char, 4096> buf_{};  // received bytes [off_, len_) not yet read
  size_t off_ = 0, len_ = 0;
  Clock::time_point deadline_ = Clock::now();
  bool in_headers_ = false;
  size_t header_bytes_ = 0, header_lines_ = 0, line_len_ = 0;  // request line included
  char prev_ = 0;
};

// A connection answered 503 by the accepting thread: no thread is free and none can be
// freed. Non-blocking, so an attacker cannot stall the accept loop.
void reject_busy(socket_t sock) {
  static const std::string kBody = R"({"error":"server busy: too many connections"})";
  static const std::string kReply =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n" + kBody;
  (void)!::send(sock, kReply.data(), kReply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  static std::atomic<int64_t> last_warning{0};
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
  if (last_warning.exchange(now_s) != now_s) {  // at most one line a second under a flood
    spdlog::warn("too many connections: turning new ones away with 503");
  }
}

}  // namespace

// The open connections and what each is doing, so that a newcomer can evict the oldest
// that is not yet being served. An entry is removed before its socket is closed, and
// eviction shuts the socket down under the same lock, so a reused descriptor number is
// never touched.
class ConnectionTable {
 public:
  using Id = uint64_t;

  Id add(socket_t fd) {
    std::lock_guard lock(mu_);
    entries_[next_] = Entry{fd, Phase::kIdle, Clock::now(), false};
    return next_++;
  }
  void set_phase(Id id, Phase phase) {
    std::lock_guard lock(mu_);
    Entry& e = entries_.at(id);
    e.phase = phase;
    e.since = Clock::now();
  }
  // The connection's thread is ending it (it returns to the pool right after).
  void remove(Id id) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (!it->second.evicted) ++closing_;  // an evicted one was counted when it was evicted
    entries_.erase(it);
  }
  // A pool thread whose connection was removed has returned to the pool.
  void thread_returned() {
    std::lock_guard lock(mu_);
    --closing_;
  }
  // Pool threads about to be free: their connection is evicted or has ended.
  size_t closing() {
    std::lock_guard lock(mu_);
    return closing_;
  }
  size_t count_busy() {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [id, e] : entries_) n += e.phase == Phase::kBusy;
    return n;
  }
  // Shuts down the connection that has waited longest for (or in) a request's headers;
  // its thread then ends it. False when every connection is being served.
  bool evict_oldest() {
    std::lock_guard lock(mu_);
    Entry* oldest = nullptr;
    for (auto& [id, e] : entries_) {
      if (e.evicted || e.phase == Phase::kBusy) continue;
      if (!oldest || e.since < oldest->since) oldest = &e;
    }
    if (!oldest) return false;
    oldest->evicted = true;
    ++closing_;
    ::shutdown(oldest->fd, SHUT_RDWR);
    return true;
  }

 private:
  struct Entry {
    socket_t fd;
    Phase phase;
    Clock::time_point since;  // when the phase began
    bool evicted;
  };
  std::mutex mu_;
  std::map<Id, Entry> entries_;  // guarded by mu_
  Id next_ = 1;                  // guarded by mu_
  size_t closing_ = 0;           // guarded by mu_: threads past their connection's end
};

namespace {

// httplib's TaskQueue for connections: n threads, and admission control on the
// accepting thread (enqueue) so that a full pool never queues a connection unboundedly.
class ConnectionPool : public httplib::TaskQueue {
 public:
  ConnectionPool(size_t n_threads, ConnectionTable& table) : n_threads_(n_threads), table_(table) {
    for (size_t i = 0; i < n_threads; ++i) threads_.emplace_back([this] { work(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(mu_);
      // A thread whose connection was evicted or has ended is free in a moment: counting
      // it as free keeps a loaded machine's slow teardown from turning newcomers away.
      if (busy_ + jobs_.size() < n_threads_ + table_.closing() || table_.evict_oldest()) {
        jobs_.push_back(std::move(fn));
        cv_.notify_one();
        return;
      }
    }
    t_reject = true;  // process_and_close_socket answers 503 and closes
    fn();
    t_reject = false;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and every accepted connection was handled
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        ++busy_;
      }
      fn();  // process_and_close_socket: its connection entry was added and removed
      std::lock_guard lock(mu_);
      table_.thread_returned();
      --busy_;
    }
  }

  const size_t n_threads_;
  ConnectionTable& table_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;  // accepted connections waiting for a thread
  size_t busy_ = 0;                         // threads serving a connection
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

GuardedServer::GuardedServer(ConnectionLimits limits)
    : limits_(limits), table_(std::make_unique<ConnectionTable>()) {
  new_task_queue = [this] { return new ConnectionPool(limits_.max_connections, *table_); };
}

GuardedServer::~GuardedServer() = default;

RequestFault GuardedServer::request_fault() {
  return t_fault;
}

bool GuardedServer::raise_listen_backlog(int backlog) {
  return running() &&
         ::listen(svr_sock_, backlog) == 0;  // Linux updates a listening socket's backlog
}

bool GuardedServer::running() const {
  return svr_sock_ != INVALID_SOCKET;
}

size_t GuardedServer::busy_connections() const {
  return table_->count_busy();
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  bool ok = false;
  if (t_reject) {
    reject_busy(sock);
  } else {
    ok = serve_connection(sock);
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

// httplib's keep-alive loop (process_server_socket_core) with our stream and phases.
bool GuardedServer::serve_connection(socket_t sock) {
  const ConnectionTable::Id id = table_->add(sock);
  GuardedStream strm(
      sock, limits_, std::chrono::seconds(write_timeout_sec_), [this] { return running(); },
      [&] { table_->set_phase(id, Phase::kBusy); });
  bool ok = false;
  for (size_t left = keep_alive_max_count_; left > 0 && running(); --left) {
    table_->set_phase(id, Phase::kIdle);
    if (!strm.wait_for_request(limits_.idle_timeout)) break;
    table_->set_phase(id, Phase::kHeaders);
    strm.start_request();
    bool closed = false;
    ok = process_request(strm, left == 1, closed, nullptr);
    if (t_fault == RequestFault::kHeadersTooLarge) drain(sock);
    if (!ok || closed || t_fault != RequestFault::kNone) break;
  }
  table_->remove(id);
  return ok;
}

// After a 431 the client may still be sending: closing with unread bytes would reset the
// connection and could destroy the answer before the client reads it. Read and drop what
// comes for a moment (a "lingering close", bounded in bytes and time).
void GuardedServer::drain(socket_t sock) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  std::array<char, 4096> sink;
  for (size_t total = 0; total < (1u << 20);) {
    if (wait_for(sock, POLLIN, deadline, [this] { return running(); }) <= 0) return;
    const ssize_t n = ::recv(sock, sink.data(), sink.size(), 0);
    if (n <= 0) return;
    total += static_cast<size_t>(n);
  }
}

}  // namespace hypura::server
