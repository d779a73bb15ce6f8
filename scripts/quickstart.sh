#!/usr/bin/env bash
# README command (1): install, build, fetch the default model and generate text with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-models.sh
bash scripts/build.sh
./build/hypura run "$@"
