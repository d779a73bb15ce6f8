#include "server/stop_signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace hypura::server {
namespace {

int g_stop_pipe[2] = {-1, -1};  // [0]: watcher reads, [1]: handler writes

void on_stop_signal(int signo) {
  const unsigned char b = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &b, 1);
}

// Installs `handler` for SIGINT and SIGTERM; SA_RESTART keeps other threads' blocking
// calls (accept, recv) from failing with EINTR.
void install(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// The graceful stop waits for the running generation to reach its next token and for
// open responses to end; a prompt's prefill or a chat-template render can take longer
// than that (a hostile template is bounded by RenderLimits, not by the signal). So the
// signal also arms this: whatever still runs after kHardStop, the process exits 0.
constexpr auto kHardStop = std::chrono::milliseconds(4500);

void arm_hard_stop() {
  std::thread([] {
    std::this_thread::sleep_for(kHardStop);
    constexpr char kMsg[] = "stop signal: still busy after 4.5 s; exiting now\n";
    [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
    std::_Exit(0);
  }).detach();
}

// Serves with SIGINT and SIGTERM blocked on this thread, so the kernel hands them to
// another: this one sits in accept(), where a sanitizer's runtime (which runs handlers at
// its next intercepted call) would hold the signal until a client connects.
void run_with_stop_signals_blocked(HttpServer& server) {
  sigset_t stop, old;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, &old);
  server.run();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

int serve_until_stopped(HttpServer& server) {
  if (::pipe2(g_stop_pipe, O_CLOEXEC) != 0) {
    spdlog::error("cannot create the stop-signal pipe");
    return 1;
  }
  install(on_stop_signal);
  std::atomic<bool> signalled{false};
  std::thread watcher([&] {
    unsigned char signo = 0;
    while (::read(g_stop_pipe[0], &signo, 1) < 0 && errno == EINTR) {
    }
    if (signo == 0) return;  // woken by serve_until_stopped itself
    spdlog::info("{}: stopping (cancelling in-flight requests)", strsignal(signo));
    signalled = true;
    arm_hard_stop();
    server.shutdown();
  });
  run_with_stop_signals_blocked(server);
  if (!signalled) {
    const unsigned char wake = 0;
    [[maybe_unused]] ssize_t n = ::write(g_stop_pipe[1], &wake, 1);
  }
  watcher.join();
  install(SIG_DFL);
  ::close(g_stop_pipe[0]);
  ::close(g_stop_pipe[1]);
  return signalled ? 0 : 1;
}

}  // namespace hypura::server
