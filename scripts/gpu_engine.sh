#!/usr/bin/env bash
# On the device machine: the whole engine on the GPU, in one call. The binaries are built
# on the CI machine (Debian 12, CUDA 13) and carried with the Debian libraries the device
# lacks (scripts/gpu_pack.sh makes the folder); cuBLAS is the device's own CUDA toolkit's.
#
#   bash scripts/gpu_engine.sh [DIR]       DIR: the packed folder (default .devgpu; one packed
#                                          with PACK_XZ=1 goes through scripts/gpu_unpack.sh)
#   STEPS="kernels golden 8b moe f16" (default: all) picks the steps:
#     kernels  compute_cuda_test (every kernel against its CPU twin) and model_test's
#              CudaRouting (the routing kernel against model::route_row)
#     golden   runtime_test's GPU goldens (shared/golden through the CUDA forward pass),
#              its SynthMoeGpu (glm4moe-tiny, gpt-oss-tiny: GPU vs CPU resident, split and
#              expert split) and synth_golden_test's GPU runs (tests/golden/synth against
#              llama.cpp; read from the working directory: run this from the checkout's root)
#     moe-stream  the moe's expert split with its host experts in RAM and streamed from
#              storage (--ram-budget): the same greedy text, both benches, and the plan
#              the planner picks on its own under a small VRAM and RAM budget
#     8b, moe, f16   `hypura synth` of the 8b Q4_K_M, moe Q4_K_M and 8b F16 presets, then
#              `hypura bench --device cuda` (pp512, tg128; BENCH_ARGS overrides); with
#              GRAPH_AB=1 a second bench with --no-cuda-graphs (eager decode steps)
# KEEP_MODELS=1 keeps the synthetic models in $MODELS (default /tmp/hypura-models).
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu_engine.
set -uo pipefail
DIR=$(realpath "${1:-.devgpu}")
STEPS=${STEPS:-kernels golden 8b moe f16}
BENCH_ARGS=${BENCH_ARGS:--p 512 -n 128 -r 3}
LOG=${OUT:-/tmp/gpu_engine}
MODELS=${MODELS:-/tmp/hypura-models}
mkdir -p "$LOG" "$MODELS"

cublas=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null ||
         find / -name 'libcublas.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
[ -n "$cublas" ] || { echo "gpu_engine.sh: no libcublas.so.13 on this machine"; exit 2; }
export LD_LIBRARY_PATH="$DIR/lib:$(dirname "$cublas")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The tests read the goldens where the CI machine keeps them (compiled in).
mkdir -p /work/shared && ln -sfn "$DIR/golden" /work/shared/golden

echo "== GPU"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm,clocks.mem \
  --format=csv,noheader || true
echo "cublas: $cublas"
ldd "$DIR/bin/hypura" | grep -E "not found" && exit 3
rc=0

step() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

if step kernels; then
  echo "== kernels"
  timeout 150 "$DIR/bin/compute_cuda_test" > "$LOG/kernels.log" 2>&1 || rc=1
  timeout 60 "$DIR/bin/model_test" --gtest_filter='CudaRouting*' >> "$LOG/kernels.log" 2>&1 || rc=1
  grep -E "^\[  (FAILED|PASSED) |Failure|Expected|Which is|rel_l2|actual" "$LOG/kernels.log" | head -30
  tail -2 "$LOG/kernels.log"
fi

if step golden; then
  echo "== golden (GPU)"
  # The golden architectures packed (GOLDEN_ARCHS of gpu_pack.sh), by their index in
  # runtime/golden_test.cc's kArchs.
  filter="Presets/SynthMoeGpu*:*GpuDraftTree*"
  i=0
  for arch in llama qwen2 qwen3 gemma3 mixtral qwen3moe; do
    [ -f "$DIR/golden/$arch-f32.gguf" ] && filter="$filter:Archs/GoldenGpu.*/$i"
    i=$((i + 1))
  done
  timeout 240 "$DIR/bin/runtime_test" --gtest_filter="$filter" > "$LOG/golden.log" 2>&1 || rc=1
  timeout 240 "$DIR/bin/synth_golden_test" --gtest_filter='*OnTheGpu*' >> "$LOG/golden.log" 2>&1 || rc=1
  grep -E "gpu|vs cpu|^\[  FAILED|Failure|Expected|Which is|actual" "$LOG/golden.log" | grep -v "^\[ RUN" | head -80
  tail -2 "$LOG/golden.log"
fi

bench() {  # name, synth args...
  local name=$1; shift
  local model="$MODELS/$name.gguf"
  echo "== $name: synth $*"
  timeout 150 "$DIR/bin/hypura" synth -o "$model" "$@" --vocab-from "$DIR/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
  echo "== $name: bench --device cuda $BENCH_ARGS"
  # shellcheck disable=SC2086
  timeout 200 "$DIR/bin/hypura" bench "$model" --device cuda $BENCH_ARGS 2>&1 | tee "$LOG/bench_$name.log" | grep -v "^\[info\]" || rc=1
  if [ "${GRAPH_AB:-0}" = 1 ]; then
    echo "== $name: bench --device cuda -p 0 -n 128 --no-cuda-graphs"
    timeout 200 "$DIR/bin/hypura" bench "$model" --device cuda -p 0 -n 128 -r 3 --no-reference --no-cuda-graphs 2>&1 | grep "tg128" || rc=1
  fi
  [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$model"
}
if step moe-stream; then
  model="$MODELS/moe-stream.gguf"
  timeout 150 "$DIR/bin/hypura" synth -o "$model" --preset moe --vocab-from "$DIR/golden/llama-f32.gguf" -q --no-sync 2>&1 | tail -1
  # Logits of 16-token chunks (under the wide-prompt size, so the CPU computes the host
  # experts in both runs): bit-identical whether those experts sit in RAM or stream.
  for i in $(seq 1 40); do echo "The quick brown fox jumps over the lazy dog number $i."; done > "$MODELS/text.txt"
  ppl() { timeout 300 "$DIR/bin/hypura" perplexity "$model" --device cuda -f "$MODELS/text.txt" -c 16 \
            --chunks 8 --cpu-moe-layers 24 --save-logits "$@" 2>&1 | grep -E "^perplexity: +[0-9]|rror" | head -3; }
  ppl "$MODELS/ram.logits"; ppl "$MODELS/streamed.logits" --ram-budget 2G
  if cmp -s "$MODELS/ram.logits" "$MODELS/streamed.logits"; then echo "moe-stream: logits bit-identical (RAM vs streamed host experts)"
  else echo "moe-stream: LOGITS DIFFER"; rc=1; fi
  for args in "--cpu-moe-layers 24" "--cpu-moe-layers 24 --ram-budget 2G" "--vram-budget 1200M --ram-budget 2G"; do
    echo "== moe-stream: bench $args"
    # shellcheck disable=SC2086
    timeout 200 "$DIR/bin/hypura" bench "$model" --device cuda -p 64 -n 64 -r 2 $args 2>&1 | grep -E "^\| |stall|hit rate|planned|bound" | head -12 || rc=1
  done
  timeout 60 "$DIR/bin/hypura" inspect "$model" --plan --vram-budget 1200M --ram-budget 2G 2>&1 | sed -n '/Placement plan/,/Layers:/p'
  [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$model"
fi
step 8b && bench 8b --preset 8b
step moe && bench moe --preset moe
step f16 && BENCH_ARGS="${F16_BENCH_ARGS:--p 512 -n 128 -r 3}" bench 8b-f16 --preset 8b --quant f16
exit $rc
