#!/usr/bin/env bash
# Builds scripts/golden/llama_logits.cpp against a llama.cpp build (docs/FIDELITY.md).
# Usage: build_llama_logits.sh [LLAMA_CPP_DIR] [OUTPUT]; defaults /work/ext/llama.cpp and
# LLAMA_CPP_DIR/build/bin/hypura-llama-logits. LLAMA_CPP_DIR/build holds libllama
# (cmake --build build --target llama).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
llama=${1:-/work/ext/llama.cpp}
out=${2:-$llama/build/bin/hypura-llama-logits}
lib="$llama/build/bin"
[[ -f "$lib/libllama.so" ]] || { echo "no $lib/libllama.so: build llama.cpp's 'llama' target first" >&2; exit 1; }
${CXX:-g++} -O2 -std=c++17 -Wall -Wextra "$here/llama_logits.cpp" \
  -I"$llama/include" -I"$llama/ggml/include" -L"$lib" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$lib" -o "$out"
echo "$out"
