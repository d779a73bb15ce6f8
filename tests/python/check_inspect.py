#!/usr/bin/env python3
"""Checks `hypura inspect` end to end (run by ctest, see tests/hostile/CMakeLists.txt).

  check_inspect.py manifest HYPURA GOLDEN_DIR
      `hypura inspect --json --tensors` of every model in GOLDEN_DIR/manifest.json equals
      the manifest: architecture, every metadata value (floats to 1e-12 relative, long
      arrays as "<array of N>"), no extra keys, tensor names/types/shapes in order,
      parameter count, file size. Also that the text output names the architecture.
  check_inspect.py hostile HYPURA HOSTILE_DIR
      every file in HOSTILE_DIR/expected.tsv makes `hypura inspect` exit 1 with
      "<path>: <expected message>" on stderr and nothing on stdout ("ok" files exit 0).
"""
import json
import math
import os
import subprocess
import sys


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def same_value(want, got):
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and math.isclose(got, want, rel_tol=1e-12,
                                                              abs_tol=0.0)
    return want == got and type(want) is type(got)


def check_manifest(hypura, golden):
    manifest = json.load(open(os.path.join(golden, "manifest.json")))
    errors = []
    for model, m in manifest["models"].items():
        path = os.path.join(golden, m["file"])
        r = run([hypura, "inspect", "--json", "--tensors", path])
        if r.returncode != 0:
            errors.append(f"{model}: exit {r.returncode}: {r.stderr.strip()}")
            continue
        j = json.loads(r.stdout)
        def expect(what, want, got):
            if not same_value(want, got):
                errors.append(f"{model}: {what}: manifest {want!r}, inspect {got!r}")
        expect("architecture", m["arch"], j["architecture"])
        expect("n_params", m["n_params"], j["n_params"])
        expect("file_bytes", m["size_bytes"], j["file_bytes"])
        expect("metadata keys", sorted(m["metadata"]), sorted(j["metadata"]))
        for key, want in m["metadata"].items():
            expect(f"metadata {key}", want, j["metadata"].get(key))
        want_tensors = [(t["name"], t["type"], t["ne"]) for t in m["tensors"]]
        got_tensors = [(t["name"], t["type"], t["ne"]) for t in j["tensors"]]
        expect("tensors", want_tensors, got_tensors)
        for t_type, info in m["tensor_types"].items():
            expect(f"quant_mix {t_type}", info["count"], j["quant_mix"].get(t_type, {}).get("tensors"))
        text = run([hypura, "inspect", path])
        if text.returncode != 0 or f"architecture:  {m['arch']}" not in text.stdout:
            errors.append(f"{model}: text output lacks the architecture line")
    print(f"checked {len(manifest['models'])} golden models")
    return errors


def check_hostile(hypura, hostile):
    errors = []
    n = 0
    for line in open(os.path.join(hostile, "expected.tsv"), encoding="utf-8"):
        if not line.strip() or line.startswith("#"):
            continue
        name, expected = line.rstrip("\n").split("\t", 1)
        path = os.path.join(hostile, name)
        r = run([hypura, "inspect", path])
        n += 1
        if expected == "ok":
            if r.returncode != 0:
                errors.append(f"{name}: expected success, got exit {r.returncode}: {r.stderr}")
            continue
        want = f"hypura inspect: {path}: {expected}\n"
        if r.returncode != 1 or r.stderr != want or r.stdout:
            errors.append(f"{name}: exit {r.returncode}, stderr {r.stderr!r}, stdout "
                          f"{r.stdout[:80]!r}; expected exit 1 and {want!r}")
    print(f"checked {n} hostile files")
    return errors


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("manifest", "hostile"):
        print(__doc__, file=sys.stderr)
        return 2
    check = check_manifest if sys.argv[1] == "manifest" else check_hostile
    errors = check(sys.argv[2], sys.argv[3])
    for e in errors:
        print("FAIL", e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
