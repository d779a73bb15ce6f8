"""What the CLI end-to-end checks (tests/*/check_*_cli.py) share: running the binary,
collecting failures without stopping at the first, and the golden directory.

A check imports it after putting tests/ on sys.path, calls expect() for each
assertion and returns report() from main(): one printed line per failure, exit 1 if any.
"""
import os
import subprocess
import sys

failures = []

# --asan (ctest passes it in an AddressSanitizer build): ASan's shadow memory and
# quarantine are not the engine's, so memory bounds on the process are not checked.
ASAN = "--asan" in sys.argv[1:]


def run(cmd, timeout=120, env=None):
    """Runs cmd, capturing text stdout and stderr; raises on timeout (a hang is a failure)."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def expect(cond, msg):
    if not cond:
        failures.append(msg)


def golden_dir(source):
    """../shared/golden of the source tree, or $HYPURA_GOLDEN_DIR (set by ctest)."""
    return os.environ.get("HYPURA_GOLDEN_DIR") or os.path.join(source, "..", "shared", "golden")


def report(summary=None):
    for f in failures:
        print(f)
    if summary:
        print(f"{summary}: {len(failures)} failures")
    return 1 if failures else 0
