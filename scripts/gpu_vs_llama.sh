#!/usr/bin/env bash
# On the device machine: hypura and llama.cpp side by side on the same synthetic files,
# back to back in one call (issue 16's targets), with the card's copy bandwidth measured
# in the same run by `hypura bench` (its JSON's gpu_copy_bandwidth_bps).
#
#   bash scripts/gpu_vs_llama.sh pack SRC [TAR]  here: the parts of a llama.cpp checkout SRC
#                                              that llama-bench's CUDA build needs, into TAR
#                                              (default .devgpu/llama-src.tar.xz, ~4 MiB;
#                                              never part of this repository)
#   bash scripts/gpu_vs_llama.sh build TAR     there: untar it and build llama-bench with
#                                              CUDA for sm_90a (about 4 minutes on 16 cores)
#   bash scripts/gpu_vs_llama.sh bench [DIR]   synth each model with DIR/bin/hypura (the
#                                              folder of scripts/gpu_pack.sh), then
#                                              `hypura bench --device cuda` and
#                                              `llama-bench -ngl 99 -fa 1` on it
#
#   bash scripts/gpu_vs_llama.sh split [DIR]   the model split between GPU and CPU at several
#                                              layer counts, both engines (see split())
#
# MODELS_AB (default "8b moe f16") picks the models: synth presets, PRESET@QUANT for another
# mix (e.g. gpt-oss-20b@mxfp4_moe), f16 for the 8b in F16; ARGS (default "-p 512 -n 128 -r 3") the
# tests, given to both. LLAMA (default /tmp/llama) is where llama.cpp is built. Logs go to
# $OUT (the device tool's output folder) or /tmp/gpu_vs_llama.
set -uo pipefail
LLAMA=${LLAMA:-/tmp/llama}
LOG=${OUT:-/tmp/gpu_vs_llama}
MODELS=${MODELS:-/tmp/hypura-models}
mkdir -p "$LOG" "$MODELS"

pack() {
  local src=$1 tar=${2:-.devgpu/llama-src.tar.xz}
  local skip=()
  for b in virtgpu cann openvino webgpu metal et hexagon sycl vulkan opencl musa zdnn blas rpc kompute; do
    skip+=(--exclude="ggml/src/ggml-$b")
  done
  mkdir -p "$(dirname "$tar")"
  tar -C "$src" "${skip[@]}" --exclude=tools/ui --exclude='*.gguf' -cJf "$tar" \
    CMakeLists.txt cmake common src include vendor ggml tools licenses LICENSE app && du -h "$tar"
}

build() {
  local tar=$1
  mkdir -p "$LLAMA/src" && tar xJf "$tar" -C "$LLAMA/src" || return 1
  cmake -S "$LLAMA/src" -B "$LLAMA/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF > "$LOG/llama_cmake.log" 2>&1 || { tail -20 "$LOG/llama_cmake.log"; return 1; }
  local t0=$SECONDS
  cmake --build "$LLAMA/build" --target llama-bench -j "$(nproc)" > "$LOG/llama_build.log" 2>&1 ||
    { grep -E "error|FAILED" "$LOG/llama_build.log" | head -20; return 1; }
  echo "llama-bench built in $((SECONDS - t0)) s"
}

# The packed folder's libraries and the device's own cuBLAS on the library path.
gpu_env() {
  local cublas
  cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null ||
           find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
  export LD_LIBRARY_PATH="$1/lib:$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

bench() {
  local dir
  dir=$(realpath "${1:-.devgpu}")
  gpu_env "$dir"
  local args=${ARGS:--p 512 -n 128 -r 3} rc=0
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
    --format=csv,noheader || true
  for name in ${MODELS_AB:-8b moe f16}; do
    local synth=(--preset "${name%@*}")
    [[ "$name" == *@* ]] && synth+=(--quant "${name#*@}")
    [ "$name" = f16 ] && synth=(--preset 8b --quant f16)
    local model="$MODELS/$name.gguf"
    timeout 240 "$dir/bin/hypura" synth -o "$model" "${synth[@]}" \
      --vocab-from "$dir/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
    echo "== $name: hypura bench --device cuda $args"
    # shellcheck disable=SC2086
    timeout 240 "$dir/bin/hypura" bench "$model" --device cuda $args --json \
      > "$LOG/hypura_$name.json" 2> "$LOG/hypura_$name.err" || { rc=1; tail -5 "$LOG/hypura_$name.err"; }
    python3 - "$LOG/hypura_$name.json" <<'EOF' || true
import json, sys
j = json.load(open(sys.argv[1]))
copy = j.get("gpu_copy_bandwidth_bps", 0)
for t in j["tests"]:
    line = f"hypura {t['test']:>8}: {t['tps_mean']:9.1f} +- {t['tps_stddev']:6.1f} tok/s"
    if t["test"].startswith("tg") and copy:
        gbs = j["bytes_per_token"] * t["tps_mean"]
        line += f"  ({gbs / 1e9:.0f} GB/s of weights, {gbs / copy:.1%} of the copy bandwidth {copy / 1e9:.0f} GB/s)"
    print(line)
EOF
    echo "== $name: llama-bench -ngl 99 -fa 1 $args"
    # shellcheck disable=SC2086
    timeout 240 "$LLAMA/build/bin/llama-bench" -m "$model" -ngl 99 -fa 1 $args -o md \
      > "$LOG/llama_$name.md" 2> "$LOG/llama_$name.err" || { rc=1; tail -5 "$LOG/llama_$name.err"; }
    grep -E "^\|" "$LOG/llama_$name.md"
    [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$model"
  done
  return $rc
}

# The model split between the GPU and the CPU (issue 17): for each N of SPLIT_LAYERS
# (default "24 16 0"), `hypura bench --device cuda --gpu-layers N` and `llama-bench -ngl N`
# on the same file (MODELS_SPLIT, default "8b"). llama.cpp keeps the output head on the CPU
# below -ngl n_layer+1; hypura puts it on the GPU whenever it fits (its log's "device:"
# line gives the GPU's weight bytes).
split() {
  local dir
  dir=$(realpath "${1:-.devgpu}")
  gpu_env "$dir"
  local args=${ARGS:--p 512 -n 128 -r 2} rc=0
  for name in ${MODELS_SPLIT:-8b}; do
    local model="$MODELS/$name.gguf"
    [ -f "$model" ] || timeout 150 "$dir/bin/hypura" synth -o "$model" --preset "$name" \
      --vocab-from "$dir/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
    for n in ${SPLIT_LAYERS:-24 16 0}; do
      echo "== $name: hypura bench --device cuda --gpu-layers $n $args"
      # shellcheck disable=SC2086
      timeout 240 "$dir/bin/hypura" bench "$model" --device cuda --gpu-layers "$n" --no-reference $args \
        > "$LOG/split_${name}_$n.txt" 2> "$LOG/split_${name}_$n.err" || { rc=1; tail -5 "$LOG/split_${name}_$n.err"; }
      grep -E "device:" "$LOG/split_${name}_$n.err" | tail -1
      grep -E "^\| *(pp|tg)|tok/s" "$LOG/split_${name}_$n.txt" | head -6
      echo "== $name: llama-bench -ngl $n -fa 1 $args"
      # shellcheck disable=SC2086
      timeout 300 "$LLAMA/build/bin/llama-bench" -m "$model" -ngl "$n" -fa 1 $args -o md \
        > "$LOG/llama_split_${name}_$n.md" 2> "$LOG/llama_split_${name}_$n.err" ||
        { rc=1; tail -5 "$LOG/llama_split_${name}_$n.err"; }
      grep -E "^\|" "$LOG/llama_split_${name}_$n.md"
    done
    [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$model"
  done
  return $rc
}

case "${1:-}" in
  pack) pack "$2" "${3:-}" ;;
  build) build "$2" ;;
  bench) bench "${2:-.devgpu}" ;;
  split) split "${2:-.devgpu}" ;;
  *) echo "usage: $0 pack SRC [TAR] | build TAR | bench [DIR] | split [DIR]"; exit 2 ;;
esac
