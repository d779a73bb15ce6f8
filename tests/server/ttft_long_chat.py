#!/usr/bin/env python3
"""Time to first token of a long chat through `hypura serve`, beside llama.cpp's time for
the same number of prompt tokens (issue 15: a ~4,000-token chat history).

The chat is a fixed conversation of filler turns whose rendered prompt is about
--tokens tokens. Each run starts a fresh server (an empty KV cache, so the whole prompt
is processed), sends one streamed /api/chat request and measures the client's time from
sending the request to the first content chunk. The server's own prompt figures
(prompt_eval_count / prompt_eval_duration of the final chunk) are reported too. With
--llama-bench, llama.cpp's prompt time for the same token count is measured right after
(llama-bench -p N, the same threads): its TTFT without HTTP, a lower bound for a server.

  ttft_long_chat.py --hypura build/hypura --model M [--tokens 4000] [--runs 2]
                    [--llama-bench /path/llama-bench]
"""
import argparse
import json
import statistics
import subprocess
import time
import urllib.request

from serve_process import served_model, start_serve

TURN = ("Here is another paragraph of our long conversation about lighthouses, ships, the "
        "weather on the coast and the people who keep the lamps burning through the night. ")


def conversation(n_turns):
    msgs = [{"role": "system", "content": "You are a helpful assistant."}]
    for i in range(n_turns):
        msgs.append({"role": "user", "content": f"Turn {i}. " + TURN * 3})
        msgs.append({"role": "assistant", "content": f"Noted, turn {i}. " + TURN})
    msgs.append({"role": "user", "content": "Summarise our conversation in one sentence."})
    return msgs


def start_server(args):
    return start_serve(args.hypura, args.model, ["--context", str(args.context), "-t", str(args.threads)])


def chat_ttft(port, msgs):
    body = json.dumps({"model": served_model(port), "messages": msgs, "stream": True,
                       "options": {"temperature": 0, "num_predict": 8}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/api/chat", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    ttft, final = None, None
    with urllib.request.urlopen(req, timeout=1800) as resp:
        for line in resp:
            chunk = json.loads(line)
            if ttft is None and chunk.get("message", {}).get("content"):
                ttft = time.monotonic() - t0
            if chunk.get("done"):
                final = chunk
    return ttft, final


def llama_prompt_seconds(binary, model, n, threads):
    out = subprocess.run([binary, "-m", model, "-t", str(threads), "-p", str(n), "-n", "0",
                          "-r", "2", "-fa", "1", "-o", "json"], capture_output=True, text=True,
                         check=True)
    tps = json.loads(out.stdout)[0]["avg_ts"]
    return n / tps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hypura", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=4000)
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--llama-bench")
    args = ap.parse_args()
    # Each filler turn pair renders to ~153 tokens (Qwen2.5 and SmolLM2 tokenizers: 40 pairs
    # gave 6128 and 6169 prompt tokens); the real count is read back from the server.
    msgs = conversation(max(1, round(args.tokens / 153)))
    ttfts, n_prompt = [], 0
    for _ in range(args.runs):
        proc, port = start_server(args)
        try:
            ttft, final = chat_ttft(port, msgs)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        n_prompt = final["prompt_eval_count"]
        pe = final["prompt_eval_duration"] / 1e9
        print(f"hypura serve: {n_prompt} prompt tokens, first token after {ttft:.2f} s "
              f"(server prompt time {pe:.2f} s, {n_prompt / pe:.1f} tok/s)")
        ttfts.append(ttft)
    print(f"hypura TTFT median {statistics.median(ttfts):.2f} s")
    if args.llama_bench:
        ls = llama_prompt_seconds(args.llama_bench, args.model, n_prompt, args.threads)
        print(f"llama.cpp pp{n_prompt}: {ls:.2f} s; hypura / llama.cpp = "
              f"{statistics.median(ttfts) / ls:.2f}")


if __name__ == "__main__":
    main()
