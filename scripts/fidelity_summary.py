#!/usr/bin/env python3
"""The fidelity suite's table and agreement check (scripts/fidelity.sh runs it).

    fidelity_summary.py [--sigmas K] [--worse-only] OUT_DIR MODEL_NAME ...

Reads OUT_DIR/<model>.<level>.json (`hypura perplexity --kl-divergence --json --per-token`)
for the levels scalar, avx2, avx512, avx512vnni, amx; a level this CPU lacks falls back to one
below it and is skipped as a duplicate. Each level is compared with scalar on the same
tokens and exact log-probs. A level fails when its top-1 agreement differs from scalar's by
more than 0.5 points, or its mean KL by more than 2%, beyond twice the standard error of
that paired difference (over chunk means): float summation order alone moves these figures (8-bit
activation rounding amplifies it, docs/FIDELITY.md), so a bound without the noise term
would fail correct kernels, while a broken kernel moves them by far more.
--sigmas K (default 2) sets the multiple of the standard error; --worse-only fails a level
only when it is further from the exact model than scalar (a broken kernel always is): the
CI gate, which must not fail correct code by chance, uses --sigmas 3 --worse-only.
Writes OUT_DIR/summary.md; exits 1 when a level fails.
"""
import argparse
import json
import math
import os
import sys

LEVELS = ["scalar", "avx2", "avx512", "avx512vnni", "amx"]
TOP1_BOUND_POINTS = 0.5
KL_BOUND_PERCENT = 2.0


def paired(a, b, n_blocks):
    """Mean of a - b and its standard error from the means of n_blocks equal blocks.

    Tokens of one chunk are not independent: once two paths' rounding diverges inside a
    chunk, the divergence persists to its end. The chunks are (each starts from an empty
    cache), so the error is estimated over chunk means, not over tokens.
    """
    d = [x - y for x, y in zip(a, b)]
    size = len(d) // n_blocks
    means = [sum(d[i * size:(i + 1) * size]) / size for i in range(n_blocks)]
    m = sum(means) / n_blocks
    var = sum((x - m) ** 2 for x in means) / (n_blocks - 1) if n_blocks > 1 else 0.0
    return m, math.sqrt(var / n_blocks)


def compare(k, t, base_k, base_t, n_chunks, sigmas, worse_only):
    """(top-1 column, KL column, ok) of one level against scalar."""
    d_top1, se_top1 = (100 * v for v in paired(t["top1_agree"], base_t["top1_agree"], n_chunks))
    d_kl, se_kl = (100 * v / base_k["mean"] for v in paired(t["kl"], base_t["kl"], n_chunks))
    # Worse means less top-1 agreement or more KL than scalar.
    worse_top1 = -d_top1 if worse_only else abs(d_top1)
    worse_kl = d_kl if worse_only else abs(d_kl)
    ok_top1 = worse_top1 - sigmas * se_top1 <= TOP1_BOUND_POINTS
    ok_kl = worse_kl - sigmas * se_kl <= KL_BOUND_PERCENT
    return (f"{d_top1:+.2f} ± {se_top1:.2f} pt {'ok' if ok_top1 else 'FAIL'}",
            f"{d_kl:+.2f} ± {se_kl:.2f} % {'ok' if ok_kl else 'FAIL'}",
            ok_top1 and ok_kl)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sigmas", type=float, default=2.0)
    parser.add_argument("--worse-only", action="store_true")
    parser.add_argument("out")
    parser.add_argument("names", nargs="+")
    args = parser.parse_args()
    out, names = args.out, args.names
    failures = []
    lines = ["| model | SIMD | tokens | PPL | KL mean | KL median | KL p99 | same top-1 "
             "| top-1 vs scalar | KL vs scalar |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        seen, base = set(), None
        for level in LEVELS:
            with open(os.path.join(out, f"{name}.{level}.json")) as f:
                r = json.load(f)
            if r["simd"] in seen:
                continue
            seen.add(r["simd"])
            k = r["kl_divergence"]
            t = k.pop("per_token")
            top1_col, kl_col = "-", "-"
            if base is None:
                base = (k, t)
            else:
                top1_col, kl_col, ok = compare(k, t, *base, r["chunks"], args.sigmas,
                                               args.worse_only)
                if not ok:
                    failures.append(f"{name} {r['simd']}: top-1 {top1_col}, KL {kl_col}")
            lines.append(f"| {name} | {r['simd']} | {r['tokens_scored']} | {r['perplexity']:.4f} "
                         f"| {k['mean']:.5f} | {k['median']:.5f} | {k['p99']:.5f} "
                         f"| {100 * k['top1_agreement']:.2f}% | {top1_col} | {kl_col} |")
    summary = "\n".join(lines)
    print(summary)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(summary + "\n")
    if failures:
        print("fidelity: levels that disagree with scalar:\n  " + "\n  ".join(failures),
              file=sys.stderr)
        return 1
    print("fidelity: every SIMD level agrees with scalar", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
