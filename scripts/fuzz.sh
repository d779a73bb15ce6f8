#!/usr/bin/env bash
# Builds the GGUF libFuzzer target with clang into build-fuzz and runs it for $1 seconds
# (default 60), seeded with the golden models (../shared/golden/*.gguf, when present) and
# the hostile corpus (tests/hostile/*.gguf). New inputs accumulate in fuzz-out/corpus;
# crashes are written to fuzz-out/ and make this script fail.
#   bash scripts/fuzz.sh [SECONDS]        env: FUZZ_JOBS (parallel workers, default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-1}

CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHYPURA_FUZZ=ON -DHYPURA_WERROR=ON -DHYPURA_BUILD_TESTS=OFF -DHYPURA_BUILD_BENCH=OFF >/dev/null
cmake --build "$build_dir" --target gguf_fuzz -j"$(nproc)"

mkdir -p fuzz-out/corpus fuzz-out/seeds
for seed in ../shared/golden/*.gguf tests/hostile/*.gguf; do
  [ -f "$seed" ] && cp -f "$seed" fuzz-out/seeds/
done

# max_len: the golden headers are ~11 KB; longer inputs only add tensor bytes the parser
# never reads. rss_limit guards against allocations sized by the input.
args=(fuzz-out/corpus fuzz-out/seeds -max_total_time="$seconds" -max_len=16384
      -rss_limit_mb=2048 -timeout=10 -artifact_prefix=fuzz-out/ -print_final_stats=1)
if ((jobs > 1)); then
  args+=(-jobs="$jobs" -workers="$jobs")
fi
echo "fuzz: running gguf_fuzz for ${seconds}s"
"$build_dir/fuzz/gguf_fuzz" "${args[@]}"
echo "fuzz: no crash in ${seconds}s"
