#!/usr/bin/env bash
# Installs what Hypura needs to build and test, idempotently:
#   Debian packages (compiler, CMake, libraries) and a project-local Python venv (.venv)
#   with numpy and the `gguf` package used by cross-check tests (and the clients and
#   jsonschema that the server and grammar tests use; Chromium and its driver for the chat
#   page's browser test).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev liburing-dev libpcre2-dev
  libcpp-httplib-dev libssl-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang clang-format libclang-rt-14-dev python3-venv python3-pip curl fio
  chromium chromium-driver
)

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" ||
    { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
fi

PY_PACKAGES=(numpy "gguf==0.19.0" requests ollama openai jinja2 jsonschema langchain-ollama
             llama-index-llms-ollama selenium)
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
PY_IMPORTS="numpy, gguf, requests, ollama, openai, jsonschema, langchain_ollama, selenium"
if ! .venv/bin/python -c "import $PY_IMPORTS, llama_index.llms.ollama" 2>/dev/null; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
fi
echo "setup: ok"
