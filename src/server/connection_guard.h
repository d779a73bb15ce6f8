// GuardedServer: an httplib::Server whose connections cannot starve each other.
//
// cpp-httplib 0.11 serves each connection on a pool thread from accept to close and bounds
// neither the time a client may take to send its headers (only each recv waits at most 5 s)
// nor their number or total size. So 30 clients dripping a header byte every 1.5 s held
// every thread, and one request with a million headers took 250 MB. GuardedServer
// replaces httplib's per-connection loop (process_and_close_socket) and its thread pool:
//
//   - max_connections threads serve connections; one arriving when all are taken evicts
//     the oldest connection that has not finished sending its headers (idle keep-alive
//     connections first in age order, then slow senders), and when none can be evicted it
//     is answered 503 at once on the accepting thread;
//   - a connection may wait idle_timeout for a request, then has header_timeout from the
//     request's first byte to its blank line, and body_timeout for the body;
//   - the request line and headers together hold at most max_header_bytes and
//     max_header_count lines.
// A request past a limit gets 408 or 431 (request_fault() says which to the error
// handler) and its connection is closed.
//
// Thread-safety: as httplib::Server. request_fault() reads the calling thread's state.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <memory>

namespace hypura::server {

struct ConnectionLimits {
  size_t max_connections = 64;                      // connections served at once
  std::chrono::milliseconds idle_timeout{5000};     // waiting for a request (first or next)
  std::chrono::milliseconds header_timeout{10000};  // first byte of a request to its blank line
  std::chrono::milliseconds body_timeout{60000};    // the body, after the headers
  size_t max_header_bytes = 64u << 10;              // request line + headers
  size_t max_header_count = 100;                    // header lines
};

// Why the request on this thread failed while its headers or body were read.
enum class RequestFault { kNone, kTimeout, kHeadersTooLarge };

class ConnectionTable;

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(ConnectionLimits limits);
  ~GuardedServer() override;

  // httplib listens with a backlog of 5: a burst of connections overflows it and the
  // kernel drops SYNs, which clients retry only after 1 s, 3 s... Call after binding.
  bool raise_listen_backlog(int backlog = 1024);

  // The fault of the request being handled on the calling thread (kNone when none).
  static RequestFault request_fault();

  // Connections whose request is being served (past its headers); they are never evicted.
  size_t busy_connections() const;

 private:
  bool process_and_close_socket(socket_t sock) override;
  bool serve_connection(socket_t sock);
  void drain(socket_t sock);
  bool running() const;

  const ConnectionLimits limits_;
  std::unique_ptr<ConnectionTable> table_;
};

}  // namespace hypura::server
