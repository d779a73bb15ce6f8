#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the device machine: nvcc, CMake and ninja, none of the
# Debian libraries), in one go: configure the kernels-only build (HYPURA_KERNELS_ONLY: the
# CUDA backend, its CPU twins and GoogleTest built from source), build the GPU kernel test
# and benchmark, run both, and print what the GPU and the binaries are.
#
#   bash scripts/gpu.sh [benchmark types...]      (default types: Q4_K Q8_0 F16)
#   HYPURA_GPU_SANITIZE=1 also runs the tests under compute-sanitizer's memcheck.
#
# GoogleTest's source: $HYPURA_GTEST_SOURCE, else .deps/googletest (a copy of Debian's
# /usr/src/googletest carried in a git-ignored folder, never committed), else
# /usr/src/googletest. Logs go to $OUT when set (the device tool's output folder).
# Exit status: that of the tests (the benchmark runs even when a test fails).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
LOG_DIR=${OUT:-$BUILD_DIR}
mkdir -p "$LOG_DIR"

gtest=""
for c in "${HYPURA_GTEST_SOURCE:-}" .deps/googletest /usr/src/googletest; do
  if [ -n "$c" ] && [ -f "$c/CMakeLists.txt" ]; then gtest=$(realpath "$c"); break; fi
done
[ -n "$gtest" ] || { echo "gpu.sh: no GoogleTest source (set HYPURA_GTEST_SOURCE)"; exit 2; }

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv || true
nvcc --version | tail -2
cmake --version | head -1

echo "== build ($BUILD_DIR)"
t0=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYPURA_KERNELS_ONLY=ON \
  -DHYPURA_CUDA=ON -DHYPURA_WERROR=ON -DHYPURA_GTEST_SOURCE="$gtest" > "$LOG_DIR/configure.log" 2>&1 \
  || { tail -30 "$LOG_DIR/configure.log"; exit 3; }
cmake --build "$BUILD_DIR" -j"$(nproc)" --target compute_cuda_test hypura_bench_cuda \
  > "$LOG_DIR/build.log" 2>&1 || { grep -B2 -A12 -m3 "error" "$LOG_DIR/build.log"; tail -20 "$LOG_DIR/build.log"; exit 4; }
echo "built in $(( $(date +%s) - t0 )) s"
# Registers / spills of every kernel (sm_90a machine code).
cuobjdump -res-usage "$BUILD_DIR/src/compute/cuda/libhypura_compute_cuda.a" > "$LOG_DIR/res_usage.txt" 2>&1 || true
grep -B1 -E "STACK:[1-9]|LOCAL:[1-9]" "$LOG_DIR/res_usage.txt" | head -20 || true

echo "== tests"
"$BUILD_DIR/src/compute/cuda/compute_cuda_test" > "$LOG_DIR/test.log" 2>&1
test_rc=$?
grep -E "^\[  (FAILED|SKIPPED|PASSED) |Failure|rel_l2|Expected|Which is|Value of|actual" "$LOG_DIR/test.log" | head -60
tail -3 "$LOG_DIR/test.log"

if [ "${HYPURA_GPU_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  echo "== compute-sanitizer memcheck (tests)"
  compute-sanitizer --tool memcheck --leak-check full "$BUILD_DIR/src/compute/cuda/compute_cuda_test" \
    > "$LOG_DIR/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|Invalid|out of bounds" "$LOG_DIR/memcheck.log" | head -10
fi

echo "== benchmark"
"$BUILD_DIR/hypura_bench_cuda" "$@" 2>&1 | tee "$LOG_DIR/bench.log"
exit $test_rc
