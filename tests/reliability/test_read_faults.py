#!/usr/bin/env python3
"""Storage faults under a streamed model in a running server (issue 39; docs/TESTING.md
"Reliability").

`hypura_faulty serve` (the test build of the binary: every storage read goes through the
fault-injecting queue, --inject-read-faults PLAN) streams SmolLM2-135M's FFN under a 100M
RAM budget. Against a clean server's greedy answer:
  - transient EIO on 3% of the device reads: read again, the answer is unchanged;
  - reads that stall for 2 s: the answer is unchanged and /api/version keeps answering
    within 0.5 s while generation waits on the disk;
  - a byte range of the last layer's ffn_down that fails 3 times in a row (a read and its
    two retries): that request ends with an error naming the file and the offset, the
    server stays up, and the next request's answer is the clean one (no slot of the pool
    or cache kept the failed bytes);
  - the server stops on SIGTERM with status 0 after all of it.

  test_read_faults.py --faulty BUILD/hypura_faulty --source-dir .
Skipped (exit status 77) without the fetched SmolLM2 (scripts/fetch-models.sh).
"""
import argparse
import json
import os
import signal
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serve_process import served_model, start_serve  # noqa: E402

PROMPT = "The three primary colours are"
N_PREDICT = 12


def post(port, path, body, timeout=300):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)


def generate(port):
    return post(port, "/api/generate", {"model": served_model(port), "prompt": PROMPT, "stream": False, "raw": True,
                                        "options": {"temperature": 0, "num_predict": N_PREDICT}})


def version_latency(port):
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=30) as resp:
        resp.read()
    return time.monotonic() - t0


class Server:
    def __init__(self, args, model, plan=None):
        self.log = []
        extra = ["--ram-budget", "100M", "--profile", args.profile, "--context", "256",
                 "--parallel", "1", "--threads", "2"]
        if plan:
            extra += ["--inject-read-faults", plan]
        self.proc, self.port = start_serve(args.faulty, model, extra, log=self.log)

    def text(self):
        return "".join(self.log)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except Exception:
            self.proc.kill()
            return None


def last_ffn_down_range(model):
    """File bytes of the last layer's ffn_down weight (streamed under the budget)."""
    import gguf
    reader = gguf.GGUFReader(model)
    tensors = {t.name: t for t in reader.tensors}
    n_layer = 1 + max(int(name.split(".")[1]) for name in tensors if name.startswith("blk."))
    t = tensors[f"blk.{n_layer - 1}.ffn_down.weight"]
    return int(t.data_offset), int(t.data_offset) + int(t.n_bytes)


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, ok, message):
        if not ok:
            self.failures.append(message)
            print("FAIL:", message, flush=True)


def check_transient(args, model, clean, c):
    s = Server(args, model, "eio=0.03,seed=7")
    try:
        r = generate(s.port)
        c.expect(r.get("response") == clean, f"transient EIO changed the answer: {r!r}")
    finally:
        status = s.stop()
    c.expect(status == 0, f"transient: exit status {status}")
    c.expect("reading again" in s.text(), "transient: no read was retried:\n" + s.text()[-2000:])
    c.expect(" 0 failed (EIO)" not in s.text(), "transient: no fault was injected")


def check_stall(args, model, clean, c):
    s = Server(args, model, "stall=0.003:2000,seed=3")
    latencies, result = [], {}
    try:
        worker = threading.Thread(target=lambda: result.update(generate(s.port)))
        t0 = time.monotonic()
        worker.start()
        while worker.is_alive():
            latencies.append(version_latency(s.port))
            time.sleep(0.05)
        worker.join()
        took = time.monotonic() - t0
        c.expect(result.get("response") == clean, f"stalls changed the answer: {result!r}")
        c.expect(max(latencies) < 0.5, f"/api/version took {max(latencies):.3f} s during a stall")
        print(f"stall: generation {took:.1f} s, /api/version max {1e3 * max(latencies):.1f} ms "
              f"over {len(latencies)} calls", flush=True)
    finally:
        status = s.stop()
    c.expect(status == 0, f"stall: exit status {status}")
    c.expect(" 0 stalled" not in s.text(), "stall: no read stalled:\n" + s.text()[-1000:])


def check_failed_range(args, model, clean, c):
    begin, end = last_ffn_down_range(model)
    bad = begin + (end - begin) // 2  # one byte: one device read covers it
    s = Server(args, model, f"fail={bad}-{bad + 1},fail-times=3")
    try:
        failed = generate(s.port)
        error = failed.get("error", "")
        c.expect(error != "", f"a read that failed 3 times did not fail the request: {failed!r}")
        c.expect(os.path.basename(model) in error and "offset" in error and "Input/output error" in error,
                 f"the error does not name the file and offset: {error!r}")
        c.expect(version_latency(s.port) < 5, "the server stopped answering after a failed read")
        again = generate(s.port)
        c.expect(again.get("response") == clean,
                 f"after a failed read the answer differs from a clean run: {again!r} vs {clean!r}")
    finally:
        status = s.stop()
    c.expect(status == 0, f"failed range: exit status {status}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faulty", required=True)
    ap.add_argument("--source-dir", required=True)
    args = ap.parse_args()
    args.profile = os.path.join(args.source_dir, "src", "scheduler", "testdata", "cpu_24g.json")
    model = os.path.join(args.source_dir, "test-models", "smollm2-135m-instruct-q4_1.gguf")
    if not os.path.exists(model):
        print("skipped: no SmolLM2 (scripts/fetch-models.sh)")
        return 77
    model = os.path.realpath(model)
    c = Checks()
    s = Server(args, model)
    try:
        clean = generate(s.port).get("response")
    finally:
        s.stop()
    c.expect("dense-ffn-streaming" in s.text(), "the model does not stream:\n" + s.text()[-2000:])
    c.expect(bool(clean), "the clean run gave no text")
    for check in (check_transient, check_stall, check_failed_range):
        check(args, model, clean, c)
    print(f"{len(c.failures)} failures")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
