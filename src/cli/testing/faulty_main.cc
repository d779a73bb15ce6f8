// hypura_faulty: the hypura binary with one more flag, --inject-read-faults PLAN, that puts
// every storage read of the process through the fault-injecting queue (io/testing/
// fault_queue.h: EIO, short reads, interrupts, stalls, a failing byte range). Built with
// the tests only (never installed), for the storage-fault tests of a running server
// (tests/reliability/test_read_faults.py). At exit it prints what it injected.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cli/command.h"
#include "io/testing/fault_queue.h"

namespace {

constexpr const char* kFlag = "--inject-read-faults";

std::mutex counts_mu;
std::vector<std::shared_ptr<const hypura::io::FaultCounts>> all_counts;

void print_counts() {
  hypura::io::FaultCounts sum;
  std::lock_guard lock(counts_mu);
  for (const auto& c : all_counts) {
    sum.reads += c->reads;
    sum.eio += c->eio;
    sum.short_reads += c->short_reads;
    sum.eintr += c->eintr;
    sum.stalls += c->stalls;
  }
  std::cerr << "hypura_faulty: " << sum.reads << " device reads, " << sum.eio << " failed (EIO), "
            << sum.short_reads << " short, " << sum.eintr << " interrupted, " << sum.stalls
            << " stalled\n";
}

// Takes "--inject-read-faults PLAN" (or "=PLAN") out of argv; returns the plan text ("" when
// absent).
std::string take_fault_flag(int& argc, char** argv) {
  std::string plan;
  int out = 0;
  for (int i = 0; i < argc; ++i) {
    const size_t n = std::strlen(kFlag);
    if (std::strcmp(argv[i], kFlag) == 0 && i + 1 < argc) {
      plan = argv[++i];
    } else if (std::strncmp(argv[i], kFlag, n) == 0 && argv[i][n] == '=') {
      plan = argv[i] + n + 1;
    } else {
      argv[out++] = argv[i];
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return plan;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string text = take_fault_flag(argc, argv);
  if (!text.empty()) {
    auto plan = hypura::io::parse_fault_plan(text);
    if (!plan.is_ok()) {
      std::cerr << "hypura_faulty: " << plan.status().message() << "\n";
      return 2;
    }
    hypura::io::set_queue_wrapper([plan = *plan](std::unique_ptr<hypura::io::ReadQueue> inner) {
      auto faulty = std::make_unique<hypura::io::FaultInjectingQueue>(std::move(inner), plan);
      std::lock_guard lock(counts_mu);
      all_counts.push_back(faulty->counts());
      return std::unique_ptr<hypura::io::ReadQueue>(std::move(faulty));
    });
    std::atexit(print_counts);
  }
  return hypura::cli::run_cli(argc, argv);
}
