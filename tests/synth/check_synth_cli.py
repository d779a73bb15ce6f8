#!/usr/bin/env python3
"""End-to-end test of `hypura synth` (run by ctest as synth_cli).

Usage: check_synth_cli.py HYPURA_BINARY SOURCE_DIR

Uses the golden llama model's 384-token vocabulary (always present) so it needs no
fetched models. Prints one line per failure; exits 1 if any.
"""
import filecmp
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_check import expect, failures, golden_dir, report, run  # noqa: E402

ARCHS = ["llama", "qwen2", "qwen3", "gemma3", "mixtral", "qwen3moe"]


def main():
    hypura, source = sys.argv[1], sys.argv[2]
    vocab = os.path.join(golden_dir(source), "llama-f32.gguf")
    check = os.path.join(source, "src", "synth", "testing", "check_synth.py")
    with tempfile.TemporaryDirectory(prefix="hypura-synth-cli-") as tmp:
        pairs = []
        for arch in ARCHS:
            out = os.path.join(tmp, f"{arch}.gguf")
            r = run([hypura, "synth", "-q", "-o", out, "--arch", arch, "--vocab-from", vocab])
            expect(r.returncode == 0, f"synth --arch {arch}: exit {r.returncode}: {r.stderr}")
            expect(r.stdout.startswith("wrote "), f"synth --arch {arch}: stdout {r.stdout!r}")
            pairs += [out, arch]
            r = run([hypura, "inspect", out])
            want = "llama" if arch == "mixtral" else arch
            expect(r.returncode == 0 and f"architecture:  {want} " in r.stdout,
                   f"inspect {arch}: exit {r.returncode}: {r.stdout[:300]!r} {r.stderr}")
        r = subprocess.run([sys.executable, check] + pairs, capture_output=True, text=True)
        expect(r.returncode == 0, f"check_synth.py: {r.stdout}{r.stderr}")

        # Same flags, same bytes; another seed, other bytes.
        a, b, c = (os.path.join(tmp, n) for n in ("a.gguf", "b.gguf", "c.gguf"))
        base = [hypura, "synth", "-q", "--arch", "qwen3moe", "--vocab-from", vocab]
        for path, seed in ((a, "1"), (b, "1"), (c, "2")):
            run(base + ["-o", path, "--seed", seed])
        expect(filecmp.cmp(a, b, shallow=False), "same seed gave different files")
        expect(not filecmp.cmp(a, c, shallow=False), "different seeds gave the same file")

        # --dry-run writes nothing and reports the size.
        dry = os.path.join(tmp, "dry.gguf")
        r = run([hypura, "synth", "--dry-run", "--preset", "70b", "-o", dry, "--vocab-from", vocab,
                 "--n-vocab", "128256"])
        expect(r.returncode == 0 and not os.path.exists(dry), f"dry-run: {r.returncode} {r.stderr}")
        expect("70.554 B parameters" in r.stderr, f"dry-run 70b: {r.stderr!r}")

        # Impossible requests: a clear message and exit 2 (bad flags) or 1 (bad input file).
        bad = [
            (["--arch", "gpt2"], 2, "unknown architecture"),
            (["--preset", "8b", "--arch", "qwen3moe"], 2, "dense"),
            (["--n-head-kv", "3"], 2, "multiple of n_head_kv"),
            (["--quant", "q3_k_s"], 2, "unknown quant mix"),
            (["--n-vocab", "1"], 1, "does not fit a vocabulary of 1 tokens"),
            (["--vocab-from", os.path.join(tmp, "missing.gguf")], 1, "missing.gguf"),
        ]
        for flags, code, text in bad:
            out = os.path.join(tmp, "bad.gguf")
            args = [hypura, "synth", "-q", "-o", out] + (
                flags if "--vocab-from" in flags else flags + ["--vocab-from", vocab])
            r = run(args)
            expect(r.returncode == code and text in r.stderr,
                   f"synth {' '.join(flags)}: exit {r.returncode}, stderr {r.stderr!r}; "
                   f"want exit {code} and {text!r}")
            expect(not os.path.exists(out), f"synth {' '.join(flags)} left a file behind")
    return report("synth_cli")


if __name__ == "__main__":
    sys.exit(main())
