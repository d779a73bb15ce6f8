#!/usr/bin/env bash
# README command (1): install, build, fetch the default model and generate text with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-models.sh
bash scripts/build.sh
# With no arguments: a short chat with the default model (test-models/default.gguf).
if [ $# -eq 0 ]; then
  set -- --prompt "What is the capital of France? Answer in one sentence." --max-tokens 64
fi
./build/hypura run "$@"
