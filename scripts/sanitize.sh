#!/usr/bin/env bash
# Sanitizer jobs of CI (docs/TESTING.md), CPU only, built with the default compiler (GCC):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (and LeakSanitizer at exit) over
#         the whole ctest suite, in build-asan
#   tsan  ThreadSanitizer over the tests of the concurrent modules (ctest label
#         `concurrent`: thread pool, I/O queues, tiers, experts, step batcher, server), in
#         build-tsan; only the targets those tests need are built. The real-model tests
#         and the long-context batch-invariance tests (one sequence through the same pool
#         jobs as the shorter tests, minutes each under TSan) run in the asan job only.
# Every report fails its test (CMakeLists.txt sets the sanitizers' options for ctest).
#   bash scripts/sanitize.sh [asan|tsan|all]   (default all)
# Extra CMake configure arguments: SANITIZE_CMAKE_ARGS (e.g. a compiler launcher).
set -euo pipefail
cd "$(dirname "$0")/.."
job=${1:-all}
jobs=$(nproc)
read -r -a extra <<<"${SANITIZE_CMAKE_ARGS:-}"

configure() {  # configure DIR SANITIZERS
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DHYPURA_SANITIZE="$2" -DHYPURA_CUDA=OFF -DHYPURA_BUILD_BENCH=OFF "${extra[@]}" >/dev/null
}

if [ "$job" = asan ] || [ "$job" = all ]; then
  echo "== AddressSanitizer + UBSan: build (build-asan) == ($(date -u +%T))"
  configure build-asan address,undefined
  cmake --build build-asan -j"$jobs"
  echo "== AddressSanitizer + UBSan: every test == ($(date -u +%T))"
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900
fi

if [ "$job" = tsan ] || [ "$job" = all ]; then
  echo "== ThreadSanitizer: build of the concurrent modules' tests (build-tsan) == ($(date -u +%T))"
  configure build-tsan thread
  cmake --build build-tsan -j"$jobs" --target hypura_concurrent_tests
  echo "== ThreadSanitizer: tests labelled concurrent == ($(date -u +%T))"
  ctest --test-dir build-tsan --output-on-failure -j"$jobs" --timeout 900 -L concurrent \
    -E '^RealModels\.|RealModelReference|AcrossKeySegments'
fi
