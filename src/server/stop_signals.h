// Graceful stop on SIGINT / SIGTERM for a serving process.
//
// serve_until_stopped() installs handlers for SIGINT and SIGTERM (process-wide, so it does
// not matter which thread the kernel picks, including compute threads the engine created
// earlier), serves, and on a signal calls HttpServer::shutdown() from a watcher thread:
// stop accepting, cancel in-flight generations, let open responses end, return. The
// handler only writes one byte to a pipe (async-signal-safe); the watcher does the rest.
// Whatever still runs 4.5 s after the signal (a long prefill, a slow template render),
// the process then exits 0 at once: a stop signal always ends it within 5 s.
//
// Thread-safety: call from the main thread, once per process at a time.
#pragma once

#include "server/http_server.h"

namespace hypura::server {

// Serves until a stop signal. Returns the process exit code: 0 after a signal-triggered
// graceful stop, 1 when serving ended for another reason. REQUIRES: server.bind() ok.
int serve_until_stopped(HttpServer& server);

}  // namespace hypura::server
