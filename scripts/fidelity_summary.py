#!/usr/bin/env python3
"""The fidelity suite's table and agreement check (scripts/fidelity.sh runs it).

    fidelity_summary.py OUT_DIR MODEL_NAME ...

Reads OUT_DIR/<model>.<level>.json (`hypura perplexity --kl-divergence --json --per-token`)
for the levels scalar, avx2, avx512, avx512vnni; a level this CPU lacks falls back to one
below it and is skipped as a duplicate. Each level is compared with scalar token by token
(same tokens, same exact log-probs). A level fails when its top-1 agreement differs from
scalar's by more than 0.5 points, or its mean KL by more than 2%, beyond twice the standard
error of that paired difference: float summation order alone moves these figures (8-bit
activation rounding amplifies it, docs/FIDELITY.md), so a bound without the noise term
would fail correct kernels, while a broken kernel moves them by far more.
Writes OUT_DIR/summary.md; exits 1 when a level fails.
"""
import json
import math
import os
import sys

LEVELS = ["scalar", "avx2", "avx512", "avx512vnni"]
TOP1_BOUND_POINTS = 0.5
KL_BOUND_PERCENT = 2.0


def paired(a, b):
    """Mean of a - b and its standard error."""
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    m = sum(d) / n
    var = sum((x - m) ** 2 for x in d) / (n - 1) if n > 1 else 0.0
    return m, math.sqrt(var / n)


def compare(k, t, base_k, base_t):
    """(top-1 column, KL column, ok) of one level against scalar."""
    d_top1, se_top1 = (100 * v for v in paired(t["top1_agree"], base_t["top1_agree"]))
    d_kl, se_kl = (100 * v / base_k["mean"] for v in paired(t["kl"], base_t["kl"]))
    ok_top1 = abs(d_top1) - 2 * se_top1 <= TOP1_BOUND_POINTS
    ok_kl = abs(d_kl) - 2 * se_kl <= KL_BOUND_PERCENT
    return (f"{d_top1:+.2f} ± {se_top1:.2f} pt {'ok' if ok_top1 else 'FAIL'}",
            f"{d_kl:+.2f} ± {se_kl:.2f} % {'ok' if ok_kl else 'FAIL'}",
            ok_top1 and ok_kl)


def main():
    out, names = sys.argv[1], sys.argv[2:]
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
                top1_col, kl_col, ok = compare(k, t, *base)
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
