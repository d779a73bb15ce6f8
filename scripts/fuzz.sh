#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz and runs the GGUF parser target
# for $1 seconds (default 60), then the HTTP request parser target for half that, then
# the chat-template interpreter (jinja_fuzz) for a third (seeded with the chat templates
# in src/tokenizer/testdata/chat and src/tokenizer/templates and the hostile templates of
# issue 14). GGUF is seeded with the golden models (../shared/golden/*.gguf, when present) and
# the hostile corpus (tests/hostile/*.gguf). Every target also reads the corpus kept in the
# repository (fuzz/corpus/<target>: minimized inputs of earlier long runs, docs/TESTING.md).
# New inputs accumulate in fuzz-out/corpus (and http-corpus, jinja-corpus); crashes are
# written to fuzz-out/ and make this script fail. --save-corpus afterwards minimizes
# fuzz-out's corpora together with the kept ones into fuzz/corpus (to commit).
#   bash scripts/fuzz.sh [SECONDS] [--save-corpus]
# env: FUZZ_JOBS     parallel workers (default 1)
#      FUZZ_TIMEOUT  seconds one input may take before it counts as a hang (default 10;
#                    raise it on a loaded machine, where a starved process looks hung)
#      FUZZ_COVERAGE=1  afterwards, replay the corpus through a source-coverage build
#                    (build-fuzz-cov) and print line/branch coverage of the parser files
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
save_corpus=${2:-}
build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FUZZ_JOBS:-1}

CC=clang CXX=clang++ cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHYPURA_FUZZ=ON -DHYPURA_WERROR=ON -DHYPURA_BUILD_TESTS=OFF -DHYPURA_BUILD_BENCH=OFF >/dev/null
cmake --build "$build_dir" --target gguf_fuzz http_request_fuzz jinja_fuzz -j"$(nproc)"

mkdir -p fuzz-out/corpus fuzz-out/seeds
for seed in ../shared/golden/*.gguf tests/hostile/*.gguf; do
  [ -f "$seed" ] && cp -f "$seed" fuzz-out/seeds/
done

# max_len: the golden headers are ~11 KB; longer inputs only add tensor bytes the parser
# never reads. rss_limit guards against allocations sized by the input.
args=(fuzz-out/corpus fuzz-out/seeds fuzz/corpus/gguf -max_total_time="$seconds" -max_len=16384
      -rss_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-10}" -artifact_prefix=fuzz-out/
      -print_final_stats=1)
if ((jobs > 1)); then
  args+=(-jobs="$jobs" -workers="$jobs")
fi
echo "fuzz: running gguf_fuzz for ${seconds}s"
"$build_dir/fuzz/gguf_fuzz" "${args[@]}"
echo "fuzz: no crash in ${seconds}s"

# The HTTP target: the first byte picks the API, the rest is the request body.
http_seconds=$(( (seconds + 1) / 2 ))
mkdir -p fuzz-out/http-corpus fuzz-out/http-seeds
printf '\x00{"model":"m","prompt":"hi","options":{"temperature":0.5,"stop":["x"]}}' \
  >fuzz-out/http-seeds/generate.json
printf '\x01{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":false}' \
  >fuzz-out/http-seeds/chat.json
printf '\x02{"model":"m","messages":[{"role":"system","content":"s"}],"stream":true,"stream_options":{"include_usage":true}}' \
  >fuzz-out/http-seeds/openai_chat.json
echo "fuzz: running http_request_fuzz for ${http_seconds}s"
"$build_dir/fuzz/http_request_fuzz" fuzz-out/http-corpus fuzz-out/http-seeds fuzz/corpus/http \
  -max_total_time="$http_seconds" -max_len=4096 -rss_limit_mb=2048 \
  -timeout="${FUZZ_TIMEOUT:-10}" -artifact_prefix=fuzz-out/http- -print_final_stats=1
echo "fuzz: no crash in ${http_seconds}s (http)"

# The template target: one input is one template. UBSan must stop at its first report,
# or integer overflow would pass unseen.
jinja_seconds=$(( (seconds + 2) / 3 ))
mkdir -p fuzz-out/jinja-corpus fuzz-out/jinja-seeds
cp -f src/tokenizer/testdata/chat/*.jinja src/tokenizer/templates/*.jinja fuzz-out/jinja-seeds/
printf '%s' '{{ (-9223372036854775807 - 1) // -1 }}{{ 7 % -3 }}' >fuzz-out/jinja-seeds/intmin.txt
printf '%s' "{% set s='a'*16000000 %}{% for i in range(100000) %}{% if s|length>0 %}{% endif %}{% endfor %}" \
  >fuzz-out/jinja-seeds/slow.txt
printf '%s' "{{ 'abcd' * 4611686018427387904 }}{{ range(-9223372036854775807, 9223372036854775807) }}" \
  >fuzz-out/jinja-seeds/sizes.txt
printf '%s' "{% set ns = namespace(s=messages[0].content) %}{% for m in messages[::-1] %}{% set ns.s = ns.s ~ m.content|trim %}{{ m.content.split('<')[0] ~ strftime_now('%Y') }}{% endfor %}{{ ns.s | tojson(indent=2) }}" \
  >fuzz-out/jinja-seeds/data.txt
jinja_args=(fuzz-out/jinja-corpus fuzz-out/jinja-seeds fuzz/corpus/jinja -max_total_time="$jinja_seconds"
            -max_len=8192 -rss_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-10}"
            -artifact_prefix=fuzz-out/jinja- -print_final_stats=1)
if ((jobs > 1)); then
  jinja_args+=(-jobs="$jobs" -workers="$jobs")
fi
echo "fuzz: running jinja_fuzz for ${jinja_seconds}s"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$build_dir/fuzz/jinja_fuzz" "${jinja_args[@]}"
echo "fuzz: no crash in ${jinja_seconds}s (jinja)"

if [ "$save_corpus" = --save-corpus ]; then
  # -merge=1 keeps the smallest set of inputs that covers what all of them cover.
  for t in gguf:gguf_fuzz:corpus:16384 http:http_request_fuzz:http-corpus:4096 \
           jinja:jinja_fuzz:jinja-corpus:8192; do
    IFS=: read -r name bin found len <<<"$t"
    rm -rf "fuzz-out/merged-$name" && mkdir -p "fuzz-out/merged-$name"
    "$build_dir/fuzz/$bin" -merge=1 -max_len="$len" "fuzz-out/merged-$name" "fuzz/corpus/$name" \
      "fuzz-out/$found" >/dev/null 2>&1
    rm -rf "fuzz/corpus/$name" && mv "fuzz-out/merged-$name" "fuzz/corpus/$name"
    echo "fuzz: kept $(ls "fuzz/corpus/$name" | wc -l) inputs in fuzz/corpus/$name"
  done
fi

if [ "${FUZZ_COVERAGE:-0}" = 1 ]; then
  cov_dir="${build_dir}-cov"
  CC=clang CXX=clang++ cmake -S . -B "$cov_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHYPURA_FUZZ=ON -DHYPURA_BUILD_TESTS=OFF -DHYPURA_BUILD_BENCH=OFF \
    -DCMAKE_CXX_FLAGS="-fprofile-instr-generate -fcoverage-mapping" \
    -DCMAKE_EXE_LINKER_FLAGS="-fprofile-instr-generate" >/dev/null
  cmake --build "$cov_dir" --target gguf_fuzz -j"$(nproc)"
  llvm_bin=$(dirname "$(readlink -f "$(command -v clang)")")
  rm -f fuzz-out/cov.profraw
  LLVM_PROFILE_FILE=fuzz-out/cov.profraw "$cov_dir/fuzz/gguf_fuzz" -runs=0 -max_len=16384 \
    fuzz-out/corpus fuzz-out/seeds >/dev/null 2>&1
  "$llvm_bin/llvm-profdata" merge -sparse fuzz-out/cov.profraw -o fuzz-out/cov.profdata
  "$llvm_bin/llvm-cov" report "$cov_dir/fuzz/gguf_fuzz" -instr-profile=fuzz-out/cov.profdata \
    src/gguf/gguf.cc src/gguf/types.cc src/model/tensor_role.cc src/cli/inspect_report.cc
fi
