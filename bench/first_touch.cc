// hypura_bench_first_touch: how fast this machine faults in fresh memory, the limit of a
// resident load into new pages (docs/BENCHMARKS.md, "Streaming from NVMe").
//
//   hypura_bench_first_touch [GB=2.5] [PAUSE_S=8] [THREADS=1,2]
//
// Frees a buffer of GB + 0.5 GB, waits PAUSE_S seconds (in a VM, freed memory goes back
// to the host after a few seconds and must be backed again), then faults in GB with
// MADV_POPULATE_WRITE on each thread count and prints GB/s. Pause 0 shows the rate for
// memory freed just before.
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

double populate_gbps(size_t bytes, unsigned n_threads) {
  void* p = nullptr;
  if (posix_memalign(&p, 1 << 21, bytes) != 0) return 0;
  madvise(p, bytes, MADV_HUGEPAGE);  // as the memory ledger does
  const auto t0 = std::chrono::steady_clock::now();
  const size_t part = (bytes / n_threads) & ~size_t{(1 << 21) - 1};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n_threads; ++t) {
    const size_t begin = t * part, len = t + 1 == n_threads ? bytes - begin : part;
    threads.emplace_back([=] { madvise(static_cast<char*>(p) + begin, len, MADV_POPULATE_WRITE); });
  }
  for (auto& th : threads) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::free(p);
  return static_cast<double>(bytes) / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const double gb = argc > 1 ? std::atof(argv[1]) : 2.5;
  const int pause_s = argc > 2 ? std::atoi(argv[2]) : 8;
  const size_t bytes = static_cast<size_t>(gb * 1e9);
  for (unsigned n_threads : {1u, 2u}) {
    populate_gbps(bytes + 500'000'000, 1);  // used, then freed
    std::this_thread::sleep_for(std::chrono::seconds(pause_s));
    std::printf("first touch of %.1f GB, %u thread(s), %d s after a free: %.2f GB/s\n", gb,
                n_threads, pause_s, populate_gbps(bytes, n_threads));
  }
  return 0;
}
