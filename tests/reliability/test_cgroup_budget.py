#!/usr/bin/env python3
"""Memory limits of a real cgroup (issue 39; docs/TESTING.md "Reliability").

Creates a child memory cgroup (v1: memory.limit_in_bytes, the kind these machines have;
v2: memory.max) and runs the real binary inside it:
  - `hypura run` of SmolLM2-135M (~90 MiB of weights, ~125 MiB resident with its buffers)
    under a 100 MiB limit plans around the limit (streams) and finishes: the plan fills the
    limit and the OOM killer never comes;
  - under a 64 MiB limit, where no placement fits, it fails at plan time with a message
    naming the cgroup limit, with exit status 1 (not SIGKILL);
  - `hypura serve` (4 sequences of 2048 tokens: its resident plan holds ~318 MiB) started
    under a 512 MiB limit answers; after the model is unloaded (keep_alive 0: the KV caches
    are freed) the limit is lowered to 290 MiB, above what the process uses then but below
    what its plan holds, and the next request re-plans (the FFN streamed, ~289 MiB) and
    answers the same text; lowered again to 200 MiB, where no plan fits the caches, the
    next request is refused with an error naming the limit and the server keeps its
    weights and runs on; once the limit is raised it answers again.
  - and the OOM killer ended no process of the cgroup (memory.oom_control's oom_kill):
    the profiler's probes (a 512 MiB decode-rate buffer, a 1 GiB memory-bandwidth buffer)
    run in forked children only where they fit beside the process, since a full cgroup's
    OOM killer takes its largest process, which a server beside its weights may be.
Skipped (exit status 77) when no cgroup can be made (not root, no memory controller) or the
model was not fetched (scripts/fetch-models.sh).

  test_cgroup_budget.py --hypura BUILD/hypura --source-dir .
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serve_process import served_model, start_serve  # noqa: E402

ROOMY = 100 << 20
SERVE = 512 << 20
LOWERED = 290 << 20
TOO_LOW = 200 << 20
TIGHT = 64 << 20


class Cgroup:
    """A child memory cgroup of our own, removed on exit."""

    def __init__(self):
        name = f"hypura-test-{os.getpid()}"
        v1 = "/sys/fs/cgroup/memory"
        if os.path.isfile(os.path.join(v1, "memory.limit_in_bytes")):
            self.path, self.limit_file = os.path.join(v1, name), "memory.limit_in_bytes"
        else:
            self.path, self.limit_file = os.path.join("/sys/fs/cgroup", name), "memory.max"
        os.mkdir(self.path)
        if not os.path.exists(os.path.join(self.path, self.limit_file)):
            os.rmdir(self.path)
            raise OSError("no memory controller in " + self.path)

    def set_limit(self, n_bytes):
        with open(os.path.join(self.path, self.limit_file), "w") as f:
            f.write(str(n_bytes))

    def oom_kills(self):
        """Processes of the cgroup the OOM killer ended so far (None: the kernel does not say)."""
        for name in ("memory.oom_control", "memory.events"):  # v1, v2
            try:
                with open(os.path.join(self.path, name)) as f:
                    for line in f:
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
            except OSError:
                pass
        return None

    def enter(self):
        """For preexec_fn: moves the calling (child) process into the cgroup."""
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))

    def remove(self):
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)


def post(port, body):
    """The JSON answer of /api/generate, an error status's included."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        return json.load(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hypura", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    model = os.path.join(args.source_dir, "test-models", "smollm2-135m-instruct-q4_1.gguf")
    if not os.path.exists(model):
        print("skipped: no SmolLM2-135M (scripts/fetch-models.sh)")
        return 77
    try:
        cg = Cgroup()
    except OSError as e:
        print(f"skipped: cannot make a memory cgroup ({e})")
        return 77
    failures = []

    def expect(ok, message):
        if not ok:
            failures.append(message)
            print("FAIL:", message, flush=True)

    # The hardware profile is measured once into a scratch cache (not under the limit).
    # (the server inherits it from this process's environment).
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="hypura-cgroup-")
    env = dict(os.environ)
    run = [args.hypura, "run", model, "-p", "The sea is", "-n", "8", "--temp", "0", "--context", "256",
           "--threads", "2"]
    try:
        subprocess.run([args.hypura, "profile"], env=env, capture_output=True, timeout=300)
        cg.set_limit(ROOMY)
        roomy = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300, preexec_fn=cg.enter)
        expect(roomy.returncode == 0, f"under {ROOMY >> 20} MiB: exit {roomy.returncode}:\n{roomy.stderr[-1500:]}")
        expect("streaming" in roomy.stderr, f"the plan under {ROOMY >> 20} MiB does not stream:\n"
               + roomy.stderr[-1500:])

        cg.set_limit(TIGHT)
        tight = subprocess.run(run, env=env, capture_output=True, text=True, timeout=300, preexec_fn=cg.enter)
        expect(tight.returncode == 1, f"under {TIGHT >> 20} MiB: exit {tight.returncode} (want 1, not a kill):\n"
               + tight.stderr[-1500:])
        expect("cgroup v" in tight.stderr and "memory limit" in tight.stderr,
               f"the error under {TIGHT >> 20} MiB does not name the cgroup limit:\n{tight.stderr[-1500:]}")

        cg.set_limit(SERVE)
        log = []
        proc, port = start_serve(args.hypura, model, ["--context", "2048", "--parallel", "4", "--threads", "2"],
                                 log=log, preexec_fn=cg.enter)
        try:
            body = {"model": served_model(port), "prompt": "def add(a, b):", "stream": False, "keep_alive": 0,
                    "options": {"temperature": 0, "num_predict": 4}}
            first = post(port, body)
            expect("response" in first, f"serve under {SERVE >> 20} MiB: {first}")
            time.sleep(1)  # keep_alive 0: the model is unloaded after the answer
            cg.set_limit(LOWERED)
            second = post(port, body)
            expect(second.get("response") == first.get("response"),
                   f"after lowering the limit to {LOWERED >> 20} MiB: {second} (first: {first})\n"
                   + "".join(log[-20:]))
            logged = "".join(log)
            expect("planning again" in logged and "re-planned" in logged and "streaming" in logged,
                   "the server did not log a re-plan that streams:\n" + "".join(log[-20:]))
            time.sleep(1)
            cg.set_limit(TOO_LOW)
            third = post(port, body)
            error = third.get("error", "")
            expect("memory limit is now" in error and "no placement fits" in error and "cgroup v" in error,
                   f"under {TOO_LOW >> 20} MiB the server did not refuse naming the limit: {third}\n"
                   + "".join(log[-20:]))
            expect(proc.poll() is None, "the server exited after the refusal")
            cg.set_limit(SERVE)
            fourth = post(port, body)
            expect(fourth.get("response") == first.get("response"),
                   f"with the limit raised again: {fourth} (first: {first})")
        finally:
            cg.set_limit(SERVE)
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(30)
            expect(code == 0, f"serve exit status {code}")
        # Not even a profiler probe's child: the OOM killer takes the largest process of a
        # full cgroup, which a server beside its weights may be.
        kills = cg.oom_kills()
        expect(kills in (0, None), f"the OOM killer ended {kills} processes in the cgroup")
    finally:
        cg.remove()
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
