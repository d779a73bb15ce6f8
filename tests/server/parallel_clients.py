#!/usr/bin/env python3
"""Aggregate generation speed of N clients at once through `hypura serve --parallel N`,
beside `hypura bench --batch N` on the same model (issue 19: within 0.9x of it).

Starts the server, warms it with one request, then N threads each send one streamed
/api/generate at the same moment (raw prompts that differ, greedy, num_predict tokens).
Aggregate = tokens generated for all clients / time from the first client's first token to
the last client's last token (each client's first token: its last one less the server's
eval_duration; HTTP, JSON and the queue included). Then runs
`hypura bench --batch N -p P -n T` (P: the prompts' mean token count, from the server's
prompt_eval_count) right after, and prints both and their ratio.

  parallel_clients.py --hypura build/hypura --model M [--clients 4] [--tokens 64] [--runs 2]
                      [--ram-budget 3G] [--device cuda]   (passed to both serve and bench)
"""
import argparse
import json
import statistics
import subprocess
import threading
import time
import urllib.request

from serve_process import served_model, start_serve

TOPICS = ["a lighthouse keeper and the sea", "a clockmaker in a mountain village",
          "a ship's cat that learned to navigate", "a library that opened only at night",
          "two rival bakers on one street", "a map that redrew itself", "a garden on the moon",
          "a train that never stopped"]


def start_server(args):
    return start_serve(args.hypura, args.model, ["--parallel", str(args.clients), "--context", str(args.context),
                                                 "-t", str(args.threads)] + budget_args(args))


def budget_args(args):
    return (["--ram-budget", args.ram_budget] if args.ram_budget else []) + ["--device", args.device]


def generate(port, model, prompt, tokens, out, barrier):
    body = json.dumps({"model": model, "prompt": prompt, "raw": True, "stream": True,
                       "options": {"temperature": 0, "num_predict": tokens}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/generate", data=body,
                                 headers={"Content-Type": "application/json"})
    if barrier:
        barrier.wait()
    final, done = {}, None
    with urllib.request.urlopen(req, timeout=1800) as resp:
        for line in resp:
            chunk = json.loads(line)
            if chunk.get("done"):
                final = chunk
                done = time.monotonic()
    # The client's generation ran from its first token to its last: the server's own
    # eval_duration before the final chunk. Chunk arrival times do not say it: a synthetic
    # model's chunks on the GPU arrived in bursts (spans of milliseconds for 128 tokens).
    done = done or time.monotonic()  # a stream without its final chunk: no tokens counted
    out.append({"first": done - final.get("eval_duration", 0) / 1e9, "last": done,
                "eval_count": final.get("eval_count", 0),
                "prompt_eval_count": final.get("prompt_eval_count", 0)})


def served_run(port, model, args):
    results, barrier = [], threading.Barrier(args.clients)
    threads = [threading.Thread(target=generate, args=(port, model, f"Once upon a time, a story about {TOPICS[i % len(TOPICS)]}:",
                                                     args.tokens, results, barrier)) for i in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    tokens = sum(r["eval_count"] for r in results)
    span = max(r["last"] for r in results) - min(r["first"] for r in results)
    return tokens / span, results


def bench_batch(args, n_prompt):
    out = subprocess.run([args.hypura, "bench", args.model, "--batch", f"1,{args.clients}", "-p", str(n_prompt),
                          "-n", str(args.tokens), "-r", "2", "-t", str(args.threads), "--json"]
                         + budget_args(args),
                         capture_output=True, text=True, check=True)
    rows = json.loads(out.stdout)["batch"]
    return rows[0]["tg_tps"], rows[-1]["tg_tps"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hypura", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ram-budget", default="")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    args = ap.parse_args()
    proc, port = start_server(args)
    try:
        model = served_model(port)
        generate(port, model, "Warm up:", 8, [], None)
        figures = []
        for run in range(args.runs):
            tps, results = served_run(port, model, args)
            figures.append(tps)
            counts = [r["eval_count"] for r in results]
            print(f"serve run {run}: {args.clients} clients, tokens {counts}, aggregate {tps:.2f} tok/s")
        n_prompt = round(statistics.mean(r["prompt_eval_count"] for r in results))
    finally:
        proc.terminate()
        proc.wait()
    one, batch = bench_batch(args, n_prompt)
    served = statistics.median(figures)
    print(f"bench --batch 1,{args.clients} -p {n_prompt} -n {args.tokens}: {one:.2f} / {batch:.2f} tok/s")
    print(f"serve {args.clients} clients: {served:.2f} tok/s = {served / batch:.2f}x of bench --batch {args.clients}")


if __name__ == "__main__":
    main()
