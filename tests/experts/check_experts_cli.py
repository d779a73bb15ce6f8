#!/usr/bin/env python3
"""End-to-end test of expert streaming at the ends of the supported MoE range (ctest
experts_cli).

Usage: check_experts_cli.py HYPURA_BINARY SOURCE_DIR [--asan]  (--asan: no peak-RSS bound)

For three synthetic Q4_K_M models with the golden llama's 384-token vocabulary, a
qwen3moe with 512 experts of which 10 are used, a mixtral with 8 of which 1 is used and a
gpt-oss with 8 of which 2 are used,
run on a fixture hardware profile (the same plan on every machine, no storage benchmark):
  - bench under a --ram-budget smaller than the model chooses expert-streaming, its peak
    RSS (VmHWM) and the ledger's peak stay within the budget, and it reports the expert
    figures (hit rate, bytes read per token > 0);
  - run --temp 0 generates the same text under the budget as with no budget (resident);
  - the co-activation statistics are written to $XDG_CACHE_HOME/hypura/experts/ at exit
    and loaded by the next run;
  - --expert-predictor none --expert-lookahead 2 reaches the provider (its load log) and
    gives the same text; an unknown predictor is a usage error.
Prints one line per failure; exits 1 if any.
"""
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_check import ASAN, expect, failures, golden_dir, report, run  # noqa: E402

# name, synth arguments, budget (bytes) that leaves room for only part of the experts
# (qwen3moe: 172 MiB of weights, mixtral: 119 MiB; the process itself plans ~14 MiB)
SHAPES = [
    ("qwen3moe-512x10", ["--arch", "qwen3moe", "--n-expert", "512", "--n-expert-used", "10",
                         "--n-embd", "256", "--n-layer", "3", "--n-ff-exp", "256"], 80 << 20),
    ("mixtral-8x1", ["--arch", "mixtral", "--n-expert", "8", "--n-expert-used", "1",
                     "--n-embd", "512", "--n-layer", "4", "--n-ff-exp", "4096"], 100 << 20),
    # gpt-oss: biased experts (their biases resident), sinks, a sliding window
    ("gpt-oss-8x2", ["--arch", "gpt-oss", "--n-expert", "8", "--n-expert-used", "2",
                     "--n-embd", "512", "--n-layer", "4", "--n-ff-exp", "4096"], 100 << 20),
]


def check_shape(hypura, golden, profile, tmp, name, synth_args, budget):
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, name + "-cache"))
    model = os.path.join(tmp, name + ".gguf")
    r = run([hypura, "synth", "-q", "--no-sync", "--preset", "tiny", "-o", model,
             "--vocab-from", os.path.join(golden, "llama-f32.gguf")] + synth_args, env=env)
    if r.returncode != 0:
        failures.append(f"{name}: synth failed: {r.stderr[-500:]}")
        return
    common = ["--profile", profile, "--context", "256"]
    budget_flag = ["--ram-budget", str(budget)]

    r = run([hypura, "bench", model, "-p", "8", "-n", "8", "-r", "1", "--no-reference", "--json"]
            + budget_flag + common, env=env)
    expect(r.returncode == 0, f"{name}: bench: exit {r.returncode}: {r.stderr[-500:]}")
    if r.returncode == 0:
        j = json.loads(r.stdout)
        t = j["tiers"]
        expect(j["mode"] == "expert-streaming", f"{name}: mode {j['mode']}")
        expect(ASAN or 0 < t["peak_rss_bytes"] <= budget, f"{name}: peak RSS {t['peak_rss_bytes']} > budget {budget}")
        expect(t["ledger_peak_bytes"] <= budget, f"{name}: ledger peak {t['ledger_peak_bytes']} > budget")
        e = j["experts"]
        expect(e.get("expert_bytes_per_token", 0) > 0, f"{name}: no expert bytes read: {e}")
        expect(0 <= e.get("expert_hit_rate", -1) <= 1, f"{name}: hit rate {e.get('expert_hit_rate')}")

    prompt = ["-p", "The quick brown fox", "--no-chat", "--temp", "0", "-n", "12"]
    roomy = run([hypura, "run", model] + prompt + common, env=env)
    tight = run([hypura, "run", model] + budget_flag + prompt + common, env=env)
    expect(roomy.returncode == 0 and tight.returncode == 0,
           f"{name}: run: exit {roomy.returncode}/{tight.returncode}: {roomy.stderr[-300:]} {tight.stderr[-300:]}")
    expect("full-resident" in roomy.stderr, f"{name}: roomy run not resident: {roomy.stderr[-300:]}")
    expect("expert-streaming" in tight.stderr, f"{name}: budget run not expert-streaming: {tight.stderr[-300:]}")
    expect(roomy.stdout == tight.stdout and roomy.stdout.strip() != "",
           f"{name}: expert-streaming text differs: {tight.stdout!r} vs resident {roomy.stdout!r}")
    saved = glob.glob(os.path.join(env["XDG_CACHE_HOME"], "hypura", "experts", "*.json"))
    expect(len(saved) == 1, f"{name}: co-activation statistics not saved: {saved}")
    expect("expert statistics of" in tight.stderr, f"{name}: the budget run did not load the bench's statistics")

    # The speculation flags reach the provider and change only what is read ahead.
    plain = run([hypura, "run", model, "--expert-predictor", "none", "--expert-lookahead", "2"]
                + budget_flag + prompt + common, env=env)
    expect(plain.returncode == 0, f"{name}: run --expert-predictor none: exit {plain.returncode}: {plain.stderr[-300:]}")
    expect("expert prefetch: none (router lookahead 2 layers" in plain.stderr,
           f"{name}: --expert-predictor/--expert-lookahead not applied: {plain.stderr[-500:]}")
    expect(plain.stdout == roomy.stdout, f"{name}: text without speculation differs: {plain.stdout!r}")
    # Speculative decoding (prompt lookup) over streamed experts: greedy output is the same
    # text. (Random weights rarely repeat themselves, so few guesses, if any, are verified
    # here; streaming_cli verifies many on a real model.)
    spec = run([hypura, "run", model, "--lookup", "--json"] + budget_flag + prompt + common, env=env)
    expect(spec.returncode == 0, f"{name}: run --lookup: exit {spec.returncode}: {spec.stderr[-300:]}")
    if spec.returncode == 0:
        j = json.loads(spec.stdout)
        expect(j["text"] + "\n" == roomy.stdout, f"{name}: text with --lookup differs: {j['text']!r}")
    bad = run([hypura, "run", model, "--expert-predictor", "sometimes"] + prompt + common, env=env)
    expect(bad.returncode != 0, f"{name}: --expert-predictor sometimes was accepted")


def main():
    hypura, source = sys.argv[1], sys.argv[2]
    golden = golden_dir(source)
    profile = os.path.join(source, "src", "scheduler", "testdata", "cpu_24g.json")
    with tempfile.TemporaryDirectory(prefix="hypura-experts-cli-") as tmp:
        for name, synth_args, budget in SHAPES:
            check_shape(hypura, golden, profile, tmp, name, synth_args, budget)
    return report()


if __name__ == "__main__":
    sys.exit(main())
