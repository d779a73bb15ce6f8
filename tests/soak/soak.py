#!/usr/bin/env python3
"""Soak test of `hypura serve` (issue 39; docs/TESTING.md "Reliability").

Starts `hypura serve MODEL --parallel N` and runs client threads on loopback for a bounded
time (and request count), each request picked at random from the mix people send:
/api/chat, /api/generate and /v1/chat/completions, streamed and not, JSON-schema output,
tool calls, streams cancelled mid-way (20%), connections dropped mid-request, oversize
and malformed bodies. Meanwhile it samples the server's RSS and open file descriptors
every --sample-every seconds and times /api/version every 200 ms.

Fails (exit 1) when a request gets an answer other than the intended one (200 for the good
ones, 400 for the bad), when RSS grows beyond the plateau of the first quarter of the run
(at most the first minute) by more than 2%, when the server holds more open descriptors
once idle than before the clients started, when the /api/version p99
exceeds 50 ms, or when the server does not stop on SIGTERM with status 0. --asan relaxes
the memory and latency bounds (the sanitizer's quarantine grows and its code is slow).

  soak.py --hypura build/hypura --model test-models/smollm2-135m-instruct-q4_1.gguf \\
      --duration 1800 [--server-args "--ram-budget 100M"] [--json report.json]
"""
import argparse
import collections
import http.client
import json
import os
import random
import shlex
import signal
import socket
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from serve_process import served_model, start_serve  # noqa: E402

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MODEL = None  # the served model's name
TOPICS = ["the sea", "a red bicycle", "prime numbers", "autumn in Kyoto", "a lost key", "bread"]


def options(rng):
    return {"temperature": rng.choice([0, 0.7]), "num_predict": rng.randint(4, 24), "seed": rng.randint(0, 99)}


def messages(rng):
    return [{"role": "user", "content": f"Write one sentence about {rng.choice(TOPICS)}."}]


# ---- request kinds: each returns the kind's outcome ("ok" or what went wrong) ----

def http_post(port, path, body, timeout=300):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def expect_json(status, data, want=200, key=None):
    if status != want:
        return f"status {status}: {data[:200]!r}"
    try:
        j = json.loads(data)
    except ValueError:
        return f"not JSON: {data[:200]!r}"
    if want == 200 and "error" in j:
        return f"error: {j['error']}"
    if key and key not in j:
        return f"no {key!r} in {data[:200]!r}"
    return "ok"


def expect_stream(status, data):
    if status != 200:
        return f"status {status}: {data[:200]!r}"
    lines = [line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]
    if any('"error"' in line for line in lines):
        return "error in stream: " + next(line for line in lines if '"error"' in line)[:200]
    return "ok" if lines else "empty stream"


def chat(port, rng, stream):
    st, data = http_post(port, "/api/chat", {"model": MODEL, "messages": messages(rng), "stream": stream,
                                             "options": options(rng)})
    return expect_stream(st, data) if stream else expect_json(st, data, key="message")


def generate(port, rng, stream):
    st, data = http_post(port, "/api/generate", {"model": MODEL, "prompt": f"A story about {rng.choice(TOPICS)}:",
                                                 "stream": stream, "options": options(rng)})
    return expect_stream(st, data) if stream else expect_json(st, data, key="response")


def openai_chat(port, rng, stream):
    st, data = http_post(port, "/v1/chat/completions", {"model": MODEL, "messages": messages(rng), "stream": stream,
                                                        "max_tokens": rng.randint(4, 24), "temperature": 0.5})
    return expect_stream(st, data) if stream else expect_json(st, data, key="choices")


def json_schema(port, rng):
    st, data = http_post(port, "/api/chat", {"model": MODEL, "messages": messages(rng), "stream": False,
                                             "format": SCHEMA, "options": {"temperature": 0, "num_predict": 48}})
    outcome = expect_json(st, data, key="message")
    if outcome != "ok":
        return outcome
    content = json.loads(data)["message"]["content"]
    done = json.loads(data).get("done_reason")
    if done == "stop":  # a finished reply must parse; one cut by num_predict may not
        try:
            json.loads(content)
        except ValueError:
            return f"schema reply is not JSON: {content!r}"
    return "ok"


def tool_call(port, rng):
    st, data = http_post(port, "/api/chat", {"model": MODEL, "stream": False, "tools": TOOLS, "options": options(rng),
                                             "messages": [{"role": "user", "content": "Weather in Oslo?"}]})
    if st == 400 and b"does not support tools" in data:  # Ollama's answer for such a template
        return "ok"
    return expect_json(st, data, key="message")


def cancelled_stream(port, rng):
    """Reads a few chunks of a stream, then closes the connection (a client's stop button)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    body = json.dumps({"model": MODEL, "messages": messages(rng), "stream": True,
                       "options": {"num_predict": 64}}).encode()
    sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    got = b""
    while got.count(b"\n") < 10 + rng.randint(0, 6):
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    sock.close()
    return "ok" if got.startswith(b"HTTP/1.1 200") else f"cancelled stream got {got[:100]!r}"


def dropped_request(port, rng):
    """Sends half a request and hangs up."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 500\r\n\r\n{\"model\": \"m\", \"mess")
    sock.close()
    return "ok"


def oversize(port, rng):
    st, data = http_post(port, "/api/chat", b'{"model":"x","messages":[{"role":"user","content":"'
                         + b"x" * (5 << 20) + b'"}]}')
    return "ok" if st in (400, 413) else f"oversize body got {st}"


def malformed(port, rng):
    body = rng.choice([b"{not json", b'{"messages": 7}', b"[]", b'{"prompt": '])
    st, data = http_post(port, rng.choice(["/api/chat", "/api/generate", "/v1/chat/completions"]), body)
    return "ok" if st == 400 else f"malformed body got {st}: {data[:120]!r}"


KINDS = [  # (name, weight, function)
    ("chat", 10, lambda p, r: chat(p, r, False)),
    ("chat_stream", 10, lambda p, r: chat(p, r, True)),
    ("generate", 6, lambda p, r: generate(p, r, False)),
    ("generate_stream", 6, lambda p, r: generate(p, r, True)),
    ("openai", 6, lambda p, r: openai_chat(p, r, False)),
    ("openai_stream", 6, lambda p, r: openai_chat(p, r, True)),
    ("json_schema", 5, json_schema),
    ("tool_call", 5, tool_call),
    ("cancelled_stream", 15, cancelled_stream),  # ~20% of the model requests
    ("dropped_request", 3, dropped_request),
    ("oversize", 2, oversize),
    ("malformed", 4, malformed),
]


# ---- measurement ----

def proc_sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def growth(samples, plateau_until):
    """How far the samples after `plateau_until` rise above the plateau's maximum."""
    early = [v for t, v in samples if t <= plateau_until]
    late = [v for t, v in samples if t > plateau_until]
    if not early or not late:
        return 0.0
    return max(late) / max(early) - 1


class Soak:
    def __init__(self, args, port, pid):
        self.args, self.port, self.pid = args, port, pid
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.served = collections.Counter()
        self.errors = collections.Counter()
        self.examples = {}
        self.requests = 0
        self.rss, self.fds, self.version_ms = [], [], []
        self.t0 = time.monotonic()

    def take_request(self):
        with self.lock:
            if self.requests >= self.args.max_requests:
                return False
            self.requests += 1
            return True

    def client(self, seed):
        rng = random.Random(seed)
        names, weights, fns = zip(*KINDS)
        while not self.stop.is_set() and self.take_request():
            i = rng.choices(range(len(KINDS)), weights=weights)[0]
            try:
                outcome = fns[i](self.port, rng)
            except Exception as e:  # a refused or reset connection is a failure too
                outcome = f"{type(e).__name__}: {e}"
            with self.lock:
                if outcome == "ok":
                    self.served[names[i]] += 1
                else:
                    self.errors[names[i]] += 1
                    self.examples.setdefault(names[i], outcome)

    def sampler(self):
        while not self.stop.is_set():
            t = time.monotonic() - self.t0
            rss, fds = proc_sample(self.pid)
            self.rss.append((t, rss))
            self.fds.append((t, fds))
            self.stop.wait(self.args.sample_every)

    def version_prober(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
                conn.request("GET", "/api/version")
                conn.getresponse().read()
                conn.close()
                self.version_ms.append(1e3 * (time.monotonic() - t0))
            except OSError:
                self.version_ms.append(10000.0)
            self.stop.wait(0.2)

    def run(self):
        self.idle_fds_before = proc_sample(self.pid)[1]
        threads = [threading.Thread(target=self.client, args=(i,)) for i in range(self.args.clients)]
        threads += [threading.Thread(target=self.sampler), threading.Thread(target=self.version_prober)]
        for t in threads:
            t.start()
        deadline = self.t0 + self.args.duration
        while time.monotonic() < deadline and any(t.is_alive() for t in threads[:self.args.clients]):
            time.sleep(0.5)
        self.stop.set()
        for t in threads:
            t.join()
        time.sleep(1)  # the server closes the last connections
        rss, self.idle_fds_after = proc_sample(self.pid)
        self.rss.append((time.monotonic() - self.t0, rss))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hypura", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--duration", type=float, default=1800, help="seconds (default 1800)")
    ap.add_argument("--max-requests", type=int, default=1000000)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--server-args", default="", help="more `hypura serve` arguments")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--asan", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"skipped: no model {args.model} (scripts/fetch-models.sh)")
        return 77
    log = []
    proc, port = start_serve(args.hypura, args.model,
                             ["--parallel", str(args.parallel), "--threads", "2"] + shlex.split(args.server_args),
                             log=log)
    global MODEL
    MODEL = served_model(port)
    soak = Soak(args, port, proc.pid)
    soak.run()
    proc.send_signal(signal.SIGTERM)
    try:
        status = proc.wait(30)
    except Exception:
        proc.kill()
        status = None

    elapsed = time.monotonic() - soak.t0
    plateau = min(60.0, args.duration / 4)
    report = {
        "model": os.path.basename(args.model), "server_args": args.server_args, "parallel": args.parallel,
        "clients": args.clients, "seconds": round(elapsed, 1),
        "requests": soak.requests, "served": dict(soak.served), "errors": dict(soak.errors),
        "error_examples": soak.examples,
        "rss_mib": {"first": soak.rss[0][1] / 2**20, "plateau_max": max(v for t, v in soak.rss if t <= plateau) / 2**20,
                    "max": max(v for _, v in soak.rss) / 2**20, "last": soak.rss[-1][1] / 2**20},
        "rss_growth": growth(soak.rss, plateau), "fds": {"idle_before": soak.idle_fds_before, "max": max(v for _, v in soak.fds),
                                                         "idle_after": soak.idle_fds_after},
        "version_ms": {"n": len(soak.version_ms), "p50": statistics.median(soak.version_ms or [0]),
                       "p99": percentile(soak.version_ms, 0.99), "max": max(soak.version_ms or [0])},
        "exit_status": status, "load_average": os.getloadavg(),
    }
    print(json.dumps(report, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)

    failures = []
    if soak.errors:
        failures.append(f"unintended answers: {dict(soak.errors)} e.g. {soak.examples}")
    if sum(soak.served.values()) == 0:
        failures.append("nothing was served")
    if not args.asan and report["rss_growth"] > 0.02:
        failures.append(f"RSS grew {100 * report['rss_growth']:.1f}% past the plateau")
    if soak.idle_fds_after > soak.idle_fds_before:
        failures.append(f"open descriptors leaked: {report['fds']}")
    if not args.asan and report["version_ms"]["p99"] > 50:
        failures.append(f"/api/version p99 {report['version_ms']['p99']:.1f} ms")
    if status != 0:
        failures.append(f"exit status {status}; log tail:\n" + "".join(log[-20:]))
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
