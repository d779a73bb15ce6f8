#!/usr/bin/env bash
# Builds hypura_bench_kernels with g++ alone (no CMake, no project dependencies besides
# Google Benchmark), e.g. on a machine without the full toolchain:
#   bash bench/standalone_build.sh OUT_DIR   ->  OUT_DIR/hypura_bench_kernels
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/hypura_bench}
mkdir -p "$out"
src=$root/src
flags="-O3 -DNDEBUG -std=c++20 -I$src"
avx2="-mavx2 -mfma -mf16c -ffp-contract=off"
avx512="$avx2 -mavx512f -mavx512bw -mavx512vl -mavx512dq"
pids=()
for f in quant/dequantize.cc quant/quantize.cc quant/quantize_k.cc compute/context.cc compute/ops.cc \
         compute/cpu/dispatch.cc compute/cpu/kernels_scalar.cc compute/cpu/thread_pool.cc \
         compute/cpu/attention_ref.cc gguf/types.cc profiler/memory_bandwidth.cc \
         profiler/in_child.cc; do
  g++ $flags -c "$src/$f" -o "$out/$(echo "$f" | tr / _).o" & pids+=($!)
done
g++ $flags -c "$root/bench/kernels_bench.cc" -o "$out/bench.o" & pids+=($!)
g++ $flags $avx2 -c "$src/compute/cpu/kernels_avx2.cc" -o "$out/k_avx2.o" & pids+=($!)
g++ $flags $avx512 -c "$src/compute/cpu/kernels_avx512.cc" -o "$out/k_avx512.o" & pids+=($!)
g++ $flags $avx512 -mavx512vnni -c "$src/compute/cpu/kernels_avx512vnni.cc" -o "$out/k_vnni.o" & pids+=($!)
g++ $flags $avx512 -mavx512vnni -mbmi2 -mamx-tile -mamx-int8 -c "$src/compute/cpu/kernels_amx.cc" -o "$out/k_amx.o" & pids+=($!)
g++ $flags $avx2 -c "$src/compute/cpu/kernels_avx2_attention.cc" -o "$out/k_avx2_att.o" & pids+=($!)
g++ $flags $avx512 -c "$src/compute/cpu/kernels_avx512_attention.cc" -o "$out/k_avx512_att.o" & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
g++ "$out"/*.o -o "$out/hypura_bench_kernels" -lbenchmark -lpthread
echo "built $out/hypura_bench_kernels"
