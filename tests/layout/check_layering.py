#!/usr/bin/env python3
"""Fails when a module under src/ includes a module at its own level or above.

Usage: check_layering.py SOURCE_DIR

The levels are the module order of docs/ARCHITECTURE.md: a module may include only
modules of lower levels (and itself). Tests count too, so a test of a low module never
pulls in a higher one. A new folder under src/ must be given a level here.
"""
import os
import re
import sys

LEVELS = [
    ["common"],
    ["gguf"],
    ["quant"],
    ["compute", "synth"],
    ["tokenizer", "grammar", "io", "store"],
    ["profiler", "model"],
    ["scheduler", "tiers"],
    ["experts"],
    ["runtime"],
    ["eval", "server"],
    ["cli"],
]
LEVEL = {m: i for i, row in enumerate(LEVELS) for m in row}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
SOURCES = (".h", ".cc", ".cu", ".cuh")


def main() -> int:
    src = os.path.join(sys.argv[1], "src")
    errors = []
    for module in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, module)):
            continue
        if module not in LEVEL:
            errors.append(f"src/{module}: no level in tests/layout/check_layering.py")
            continue
        for root, _, files in os.walk(os.path.join(src, module)):
            for name in sorted(f for f in files if f.endswith(SOURCES)):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or m.group(1) == module:
                            continue
                        dep = m.group(1)
                        if dep not in LEVEL:
                            continue  # not a module of src/ (e.g. a third-party path)
                        if LEVEL[dep] >= LEVEL[module]:
                            rel = os.path.relpath(path, sys.argv[1])
                            errors.append(f"{rel}:{n}: {module} includes {dep} (not below it)")
    for e in errors:
        print(e)
    print(f"check_layering: {len(errors)} upward includes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
