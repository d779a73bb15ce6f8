#!/usr/bin/env python3
"""Generation speed through `hypura serve` (/api/chat, streamed) against `hypura run`.

Runs made alternately, back to back (run, chat, run, chat, ...), the same model, prompt,
greedy sampling and token count; reports each run and the medians. For the server two
figures: the engine's own (eval_count / eval_duration of the final chunk, the same clock
`hypura run` prints) and the client's (tokens received / time from the first token chunk
to the last, so it includes HTTP, JSON and the queue hand-off).

  bench_server.py --hypura build/hypura --model test-models/default.gguf [--runs 3] [--tokens 128]
"""
import argparse
import json
import re
import signal
import statistics
import subprocess
import time
import urllib.request

from serve_process import served_model, start_serve

PROMPT = "Write a long story about a lighthouse keeper and the sea."


def run_cli(args):
    out = subprocess.run([args.hypura, "run", args.model, "--prompt", PROMPT, "-n", str(args.tokens),
                          "--temperature", "0", "--seed", "1", "-c", str(args.context)],
                         capture_output=True, text=True, check=True)
    m = re.search(r"generation: (\d+) tokens, ([\d.]+) tok/s", out.stderr)
    return int(m.group(1)), float(m.group(2))


def start_server(args):
    return start_serve(args.hypura, args.model, ["--context", str(args.context)])


def run_chat(port, args):
    body = json.dumps({"model": "x", "stream": True,
                       "messages": [{"role": "user", "content": PROMPT}],
                       "options": {"temperature": 0, "seed": 1, "num_predict": args.tokens}})
    name = served_model(port)
    body = body.replace('"model": "x"', f'"model": "{name}"')
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/chat", data=body.encode(),
                                 headers={"Content-Type": "application/json"})
    first = last = None
    n_chunks = 0
    final = None
    with urllib.request.urlopen(req) as resp:
        for line in resp:
            chunk = json.loads(line)
            now = time.perf_counter()
            if chunk.get("done"):
                final = chunk
                break
            n_chunks += 1
            first = first or now
            last = now
    engine_tps = final["eval_count"] / (final["eval_duration"] / 1e9)
    client_tps = (n_chunks - 1) / (last - first) if n_chunks > 1 else 0.0
    return final["eval_count"], engine_tps, client_tps


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hypura", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--context", type=int, default=2048)
    args = p.parse_args()
    proc, port = start_server(args)
    try:
        run_chat(port, args)  # warm-up (page cache, first-touch allocations)
        cli, engine, client = [], [], []
        for i in range(args.runs):
            n, tps = run_cli(args)
            cli.append(tps)
            print(f"run {i + 1}: hypura run      {n} tokens {tps:.2f} tok/s", flush=True)
            n, e, c = run_chat(port, args)
            engine.append(e)
            client.append(c)
            print(f"run {i + 1}: /api/chat       {n} tokens {e:.2f} tok/s (engine), "
                  f"{c:.2f} tok/s (client)", flush=True)
        mc, me, mcl = statistics.median(cli), statistics.median(engine), statistics.median(client)
        print(f"median: hypura run {mc:.2f} tok/s | /api/chat {me:.2f} tok/s engine "
              f"({me / mc:.3f}x), {mcl:.2f} tok/s client ({mcl / mc:.3f}x)")
        # Each chat against the run just before it: robust to load that drifts slowly.
        pairs = statistics.median(c / r for c, r in zip(client, cli))
        print(f"median of per-pair ratios (client / run): {pairs:.3f}")
    finally:
        proc.send_signal(signal.SIGTERM)
        print(f"server exit status: {proc.wait(30)}")


if __name__ == "__main__":
    main()
