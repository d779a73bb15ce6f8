"""Inputs that used to abort the binary now fail cleanly (issue 14 item 10): a clear
message and exit status, never a signal.

  run/serve/bench -t 100000   aborted creating 100000 threads      -> usage error
  run/serve -c INT64_MAX      with a model's 2^62 context, the KV size wrapped -> usage error
  inspect of a 30 MB GGUF holding a 30M-element u8 array, under a 1 GiB address space:
                              the reader reserved 1.4 GB before its value budget -> exit 1
  bench --context 1024        failed after pp512 (pp2048 beyond the cache) -> the default
                              prompt lengths are clipped with a note; an explicit -p 2048
                              is a usage error naming --context before anything runs

Usage: check_limits_cli.py HYPURA_BINARY [--asan]
  --asan  the binary is built with AddressSanitizer, whose shadow memory alone exceeds a
          1 GiB address space: inspect runs without the limit
"""
import os
import resource
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from cli_check import ASAN, expect, golden_dir, report, run  # noqa: E402


def expect_usage_error(binary, args, flag):
    r = run([binary, *args], timeout=60)
    expect(0 < r.returncode < 128, f"{args}: exit {r.returncode}, want a usage error")
    expect(flag in r.stderr + r.stdout, f"{args}: the message does not name {flag}: {r.stderr!r}")


def huge_array_gguf(path, n):
    with open(path, "wb") as f:
        f.write(struct.pack("<IIQQ", 0x46554747, 3, 0, 1))  # magic, version, tensors, kv
        f.write(struct.pack("<Q", 3) + b"big" + struct.pack("<IIQ", 9, 0, n))  # u8 array
        f.truncate(f.tell() + n)


def limit_address_space():
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def check_bench_context(binary):
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    model = os.path.join(golden_dir(source), "llama-f32.gguf")
    base = ["bench", model, "--context", "256", "-n", "4", "-r", "1", "--no-reference"]
    r = run([binary, *base], timeout=120)
    expect(r.returncode == 0, f"bench --context 256: exit {r.returncode}: {r.stderr[-300:]!r}")
    expect("pp512 skipped" in r.stderr, f"bench --context 256: no clipping note: {r.stderr[-300:]!r}")
    expect("tg4" in r.stdout, f"bench --context 256: no tg row: {r.stdout[-300:]!r}")
    expect_usage_error(binary, [*base, "-p", "2048"], "--context")


def main():
    binary = sys.argv[1]
    for cmd in ("run", "serve", "bench"):
        expect_usage_error(binary, [cmd, "model.gguf", "-t", "100000"], "--threads")
    for cmd in ("run", "serve"):
        expect_usage_error(binary, [cmd, "model.gguf", "-c", "9223372036854775807"], "--context")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "huge_array.gguf")
        huge_array_gguf(path, 30_000_000)
        r = subprocess.run([binary, "inspect", path], capture_output=True, text=True, timeout=60,
                           preexec_fn=None if ASAN else limit_address_space)
        expect(r.returncode == 1, f"inspect of a 30M-element array under 1 GiB: exit {r.returncode}")
        expect("more than 4194304 metadata values" in r.stderr, f"inspect message: {r.stderr[-300:]!r}")
    check_bench_context(binary)
    return report("limits CLI")


if __name__ == "__main__":
    sys.exit(main())
