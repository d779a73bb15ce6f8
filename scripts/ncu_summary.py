"""Sums ncu's per-kernel times (--metrics gpu__time_duration.sum --csv) by kernel name.

    python3 scripts/ncu_summary.py FILE.csv TITLE [TOP]

Prints the kernels that took the most time first (with launch counts and the mean), and for
the matvec kernels also their time per grid size when the CSV has a "Grid Size" column.
"""
import collections
import csv
import re
import sys


def main():
    path, title = sys.argv[1], sys.argv[2]
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 24
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    if not rows:
        print(f"ncu {title}: no rows")
        return
    h = rows[0]
    ki, vi, ui = h.index("Kernel Name"), h.index("Metric Value"), h.index("Metric Unit")
    grid = h.index("Grid Size") if "Grid Size" in h else None
    agg = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in rows[1:]:
        us = float(r[vi].replace(",", ""))
        if r[ui] in ("nsecond", "ns"):
            us /= 1000
        name = re.sub(r"\(.*", "", r[ki])
        name = re.sub(r"hypura::compute::cuda::|\(anonymous namespace\)::", "", name)[:100]
        agg[name][0] += 1
        agg[name][1] += us
        total += us
        if grid is not None and "matvec" in name:
            g = agg["  by grid " + r[grid] + " " + name[-12:]]
            g[0] += 1
            g[1] += us
    print(f"ncu {title}: {len(rows) - 1} kernels, {total:.0f} us total (serialized)")
    for name, (count, us) in sorted(agg.items(), key=lambda x: -x[1][1])[:top]:
        print(f"  {us:8.1f} us {count:5d}x {us / count:7.2f} us  {name}")


if __name__ == "__main__":
    main()
