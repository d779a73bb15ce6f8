#!/usr/bin/env python3
"""Client tests of `hypura serve`: real clients against a real server process.

Starts the server on a free loopback port (--port 0; the port is read from its
"serving ... on http://HOST:PORT" log line) and talks to it with the official `ollama`
and `openai` Python clients, with curl and with raw HTTP:

  generate and chat, streaming and not; options honoured (seed, num_predict, stop); the
  stats fields present and plausible; the OpenAI endpoints (SSE, include_usage); a
  malformed-request suite (every answer a 400/404 JSON error, the server stays up); a
  concurrency test (N clients at once, some hanging up mid-stream: every completed greedy
  answer equals the same request served alone, and the server's memory does not grow
  across rounds); with the real engine, requests joining, leaving and cancelled in the
  middle of a shared batch (--parallel 4); SIGTERM / SIGINT stopping it gracefully with
  exit status 0. (A full queue answering 503: server_test's FullQueueGets503, which holds
  the running request at a gate instead of timing slow tokens.)

  test_clients.py --server BUILD/hypura_fake_server --fake
  test_clients.py --server BUILD/hypura --source-dir . [--model FILE]

With a real binary the model is --model, else $HYPURA_SERVE_MODEL, else
test-models/smollm2-135m-instruct-q4_1.gguf, else ../shared/golden/llama-q4_k_m.gguf; when none exists the
test is skipped (exit status 77).
"""
import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import ollama
import openai

ARGS = None
MODEL_PATH = None


class ServerProcess:
    """One server process; its output is drained by a thread so the pipe never fills."""

    def __init__(self, extra_args=()):
        if ARGS.fake:
            cmd = [ARGS.server, "--port", "0", "--token-delay-ms", "3"] + list(extra_args)
        else:
            cmd = [ARGS.server, "serve", MODEL_PATH, "--port", "0", "--context", "1024",
                   "--alias", "testmodel", "--parallel", "4"] + list(extra_args)
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines = []
        self.port = None
        self.name = None
        self._ready = threading.Event()
        threading.Thread(target=self._drain, daemon=True).start()
        if not self._ready.wait(120) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start: " + " ".join(cmd) + "\n" + self.log())

    def _drain(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            m = re.search(r'serving "([^"]+)" on http://[^:]+:(\d+)', line)
            if m:
                self.name, self.port = m.group(1), int(m.group(2))
                self._ready.set()
        self._ready.set()

    def log(self):
        return "".join(self.lines[-40:])

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def alive(self):
        return self.proc.poll() is None

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.alive():
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.proc.stdout.close()


def raw_request(port, method, path, body=b"", headers=None, timeout=60):
    """(status, parsed JSON body or text) of one HTTP request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=body, headers=headers or {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read().decode("utf-8", "replace")
    conn.close()
    try:
        return resp.status, json.loads(data)
    except ValueError:
        return resp.status, data


def stream_and_hang_up(port, path, body, n_chunks=2):
    """Starts a streaming request, reads a few chunks, then closes the connection."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    payload = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    got = b""
    while got.count(b"\n") < 8 + 2 * n_chunks:
        chunk = sock.recv(4096)
        if not chunk:
            break
        got += chunk
    sock.close()
    return got


class ClientTests(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess()
        cls.model = cls.server.name
        cls.ollama = ollama.Client(host=cls.server.url, timeout=120)
        cls.openai = openai.OpenAI(base_url=cls.server.url + "/v1", api_key="unused",
                                   timeout=120, max_retries=0)
        # A greedy, bounded request used by several tests.
        cls.greedy = {"temperature": 0, "num_predict": 12}

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop(signal.SIGTERM)
        if code != 0:
            print(cls.server.log(), file=sys.stderr)
        assert code == 0, f"server exit status after SIGTERM: {code}"

    def tearDown(self):
        self.assertTrue(self.server.alive(), "server died:\n" + self.server.log())

    # -- listings -------------------------------------------------------------------------

    def test_listings(self):
        models = self.ollama.list().models
        self.assertEqual(len(models), 1)
        self.assertEqual(models[0].model, self.model)
        self.assertGreater(len(models[0].details.family), 0)
        show = self.ollama.show(self.model)
        self.assertIn("general.architecture", show.modelinfo)
        self.assertIn("num_ctx", show.parameters)
        ps = self.ollama.ps().models
        self.assertEqual(ps[0].model, self.model)
        status, version = raw_request(self.server.port, "GET", "/api/version")
        self.assertEqual(status, 200)
        self.assertRegex(version["version"], r"^\d+\.\d+\.\d+$")
        ids = [m.id for m in self.openai.models.list().data]
        self.assertEqual(ids, [self.model])
        status, text = raw_request(self.server.port, "GET", "/")
        self.assertEqual((status, text), (200, "Hypura is running"))
        head = subprocess.run(["curl", "-sI", self.server.url + "/"], capture_output=True, text=True)
        self.assertIn("200", head.stdout.splitlines()[0])

    # -- generation -----------------------------------------------------------------------

    def assert_stats(self, r, max_eval):
        self.assertTrue(r.done)
        self.assertIn(r.done_reason, ("stop", "length"))
        self.assertGreater(r.eval_count, 0)
        self.assertLessEqual(r.eval_count, max_eval)
        self.assertGreater(r.prompt_eval_count, 0)
        for field in ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration"):
            self.assertIsInstance(getattr(r, field), int, field)
            self.assertGreaterEqual(getattr(r, field), 0, field)
        self.assertGreater(r.eval_duration, 0)
        self.assertGreaterEqual(r.total_duration, r.eval_duration + r.prompt_eval_duration)
        self.assertLess(r.total_duration, 600 * 10**9)

    def test_generate_stream_and_not(self):
        whole = self.ollama.generate(self.model, "Why is the sky blue?", options=self.greedy)
        self.assert_stats(whole, 12)
        chunks = list(self.ollama.generate(self.model, "Why is the sky blue?", options=self.greedy,
                                           stream=True))
        self.assertTrue(all(not c.done for c in chunks[:-1]))
        self.assert_stats(chunks[-1], 12)
        self.assertEqual("".join(c.response for c in chunks), whole.response)
        self.assertEqual(chunks[-1].eval_count, whole.eval_count)

    def test_chat_stream_and_not(self):
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name a colour."}]
        whole = self.ollama.chat(self.model, messages=messages, options=self.greedy)
        self.assertEqual(whole.message.role, "assistant")
        self.assert_stats(whole, 12)
        chunks = list(self.ollama.chat(self.model, messages=messages, options=self.greedy,
                                       stream=True))
        self.assertEqual("".join(c.message.content for c in chunks), whole.message.content)
        self.assert_stats(chunks[-1], 12)
        # The next turn: its prompt shares the first turn's tokens, which are not processed
        # again; prompt_eval_count still counts the whole prompt, as Ollama does.
        follow = messages + [{"role": "assistant", "content": whole.message.content},
                             {"role": "user", "content": "Another one."}]
        second = self.ollama.chat(self.model, messages=follow, options=self.greedy)
        self.assert_stats(second, 12)
        usage = self.openai.chat.completions.create(model=self.model, messages=follow,
                                                    max_tokens=1, temperature=0).usage
        self.assertEqual(second.prompt_eval_count, usage.prompt_tokens)

    def test_seed_reproducibility(self):
        opts = {"temperature": 1.0, "seed": 1234, "num_predict": 16}
        a = self.ollama.generate(self.model, "Once upon a time", options=opts)
        b = self.ollama.generate(self.model, "Once upon a time", options=opts)
        self.assertEqual(a.response, b.response)
        self.assertEqual(a.eval_count, b.eval_count)

    def test_num_predict(self):
        r = self.ollama.generate(self.model, "Count: one, two,", options={"temperature": 0,
                                                                         "num_predict": 5})
        self.assertLessEqual(r.eval_count, 5)
        if r.done_reason == "length":
            self.assertEqual(r.eval_count, 5)

    def test_stop(self):
        opts = {"temperature": 0, "num_predict": 24}
        full = self.ollama.generate(self.model, "Tell me a story.", options=opts).response
        if len(full) < 8:
            self.skipTest(f"answer too short to pick a stop string: {full!r}")
        stop = full[len(full) // 2: len(full) // 2 + 3]
        expected = full[: full.find(stop)]
        r = self.ollama.generate(self.model, "Tell me a story.", options=dict(opts, stop=[stop]))
        self.assertEqual(r.response, expected)
        self.assertEqual(r.done_reason, "stop")

    def test_openai_chat(self):
        messages = [{"role": "user", "content": "Say hello."}]
        whole = self.openai.chat.completions.create(model=self.model, messages=messages,
                                                    max_tokens=10, temperature=0)
        self.assertEqual(whole.object, "chat.completion")
        self.assertIn(whole.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(whole.usage.prompt_tokens, 0)
        self.assertEqual(whole.usage.total_tokens,
                         whole.usage.prompt_tokens + whole.usage.completion_tokens)
        stream = self.openai.chat.completions.create(model=self.model, messages=messages,
                                                     max_tokens=10, temperature=0, stream=True,
                                                     stream_options={"include_usage": True})
        text, usage, finish = "", None, None
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        self.assertEqual(text, whole.choices[0].message.content)
        self.assertEqual(finish, whole.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, whole.usage.completion_tokens)

    def test_openai_completion(self):
        r = self.openai.completions.create(model=self.model, prompt="The capital of France is",
                                           max_tokens=4, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertLessEqual(r.usage.completion_tokens, 4)
        streamed = self.openai.completions.create(model=self.model, prompt="The capital of France is",
                                                  max_tokens=4, temperature=0, stream=True)
        self.assertEqual("".join(c.choices[0].text for c in streamed if c.choices), r.choices[0].text)

    def test_curl(self):
        body = json.dumps({"model": self.model, "prompt": "Hi", "options": self.greedy})
        out = subprocess.run(["curl", "-sN", self.server.url + "/api/generate", "-d", body],
                             capture_output=True, text=True, timeout=120).stdout
        lines = [json.loads(line) for line in out.splitlines()]
        self.assertTrue(lines[-1]["done"])
        self.assertTrue(all("response" in line for line in lines))
        body = json.dumps({"model": self.model, "stream": True, "max_tokens": 4,
                           "messages": [{"role": "user", "content": "Hi"}]})
        out = subprocess.run(["curl", "-sN", self.server.url + "/v1/chat/completions",
                              "-H", "Content-Type: application/json", "-d", body],
                             capture_output=True, text=True, timeout=120).stdout
        self.assertTrue(out.endswith("data: [DONE]\n\n"), out[-200:])

    # -- errors ---------------------------------------------------------------------------

    def test_official_clients_see_errors(self):
        with self.assertRaises(ollama.ResponseError) as cm:
            self.ollama.generate("no-such-model", "hi")
        self.assertEqual(cm.exception.status_code, 404)
        self.assertIn("not found", cm.exception.error)
        with self.assertRaises(openai.NotFoundError):
            self.openai.chat.completions.create(model="gpt-4o",
                                                messages=[{"role": "user", "content": "x"}])
        with self.assertRaises(openai.BadRequestError) as cm:
            self.openai.chat.completions.create(model=self.model, messages=[
                {"role": "user", "content": [{"type": "image_url",
                                              "image_url": {"url": "data:image/png;base64,AA"}}]}])
        self.assertIn("not supported", str(cm.exception))
        with self.assertRaises(ollama.ResponseError) as cm:
            self.ollama.chat(self.model, messages=[{"role": "user", "content": "x",
                                                    "images": [b"\x89PNG"]}])
        self.assertEqual(cm.exception.status_code, 400)

    def test_malformed_requests(self):
        port = self.server.port
        m = self.model
        cases = [
            ("/api/chat", b"{not json"),
            ("/api/chat", b"[]"),
            ("/api/chat", b""),
            ("/api/generate", json.dumps({"model": m, "prompt": 42}).encode()),
            ("/api/generate", json.dumps({"model": m, "prompt": "x", "stream": "yes"}).encode()),
            ("/api/generate", json.dumps({"model": m, "prompt": "x",
                                          "options": {"num_predict": "many"}}).encode()),
            ("/api/generate", json.dumps({"model": m, "prompt": "x",
                                          "options": {"temperature": -3}}).encode()),
            ("/api/chat", json.dumps({"model": m, "messages": [{"role": "god", "content": "x"}]}).encode()),
            ("/api/chat", json.dumps({"model": m, "messages": "hello"}).encode()),
            ("/api/chat", json.dumps({"model": m, "messages": [{"role": "user", "content": 5}]}).encode()),
            ("/api/generate", json.dumps({"model": m, "prompt": "x", "images": ["AAAA"]}).encode()),
            ("/api/generate", json.dumps({"model": m, "prompt": "x " * 3000, "raw": True}).encode()),
            ("/api/generate", b'{"model": "' + m.encode() + b'", "prompt": "' + b"a" * (5 << 20) + b'"}'),
            ("/api/generate", b"\xff\xfe\x00garbage"),
            ("/api/generate", json.dumps({"model": m, "prompt": "\udcff"}, ensure_ascii=True).encode()),
            ("/v1/chat/completions", json.dumps({"model": m, "messages": [], "n": 1}).encode()),
            ("/v1/chat/completions", json.dumps({"model": m, "n": 3,
                                                 "messages": [{"role": "user", "content": "x"}]}).encode()),
            ("/v1/completions", json.dumps({"model": m, "prompt": {"a": 1}}).encode()),
            ("/api/show", b"{}"),
        ]
        for path, body in cases:
            with self.subTest(path=path, body=body[:80]):
                status, reply = raw_request(port, "POST", path, body)
                self.assertEqual(status, 400, reply)
                self.assertIsInstance(reply, dict, reply)
                self.assertIn("error", reply)
        status, reply = raw_request(port, "POST", "/api/chat",
                                    json.dumps({"model": "other", "messages": []}).encode())
        self.assertEqual(status, 404)
        self.assertIn("not found", reply["error"])
        # Not HTTP at all.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"\x16\x03\x01\x02\x00garbage\r\n\r\n")
            sock.recv(4096)
        self.assertTrue(self.server.alive())
        self.assertEqual(raw_request(port, "GET", "/api/tags")[0], 200)

    # -- concurrency ----------------------------------------------------------------------

    def test_concurrency_and_memory(self):
        prompts = ["Hello there", "What is 2+2?", "Write a haiku"]
        n_clients = 6
        opts = {"temperature": 0, "num_predict": 10}
        alone = {p: self.ollama.generate(self.model, p, options=opts).response for p in prompts}
        rss = []
        for _ in range(3 if ARGS.fake else 2):  # a real model's rounds are slower
            results, errors = {}, []

            def client(i):
                p = prompts[i % len(prompts)]
                try:
                    if i % 3 == 2:  # hangs up mid-stream
                        stream_and_hang_up(self.server.port, "/api/generate",
                                           {"model": self.model, "prompt": p,
                                            "options": {"temperature": 0, "num_predict": 200}})
                    else:
                        c = ollama.Client(host=self.server.url, timeout=300)
                        results[i] = (p, c.generate(self.model, p, options=opts).response)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))

            threads = [threading.Thread(target=client, args=(i,)) for i in range(n_clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            self.assertEqual(errors, [])
            self.assertEqual(len(results), n_clients - n_clients // 3)
            for p, text in results.values():
                self.assertEqual(text, alone[p], p)
            rss.append(self.server.rss_kib())
        growth = rss[-1] - rss[0]
        self.assertLess(growth, max(8 * 1024, rss[0] // 20), f"RSS by round (KiB): {rss}")


    def test_batch_join_leave_cancel(self):
        """Requests that share steps (--parallel 4): one decodes throughout, one leaves early
        (a small num_predict), one joins once the first has streamed some tokens, one hangs
        up after three chunks. The greedy answers equal the same requests served alone."""
        if ARGS.fake:
            self.skipTest("needs the real engine's batching")
        long_opts = {"temperature": 0, "num_predict": 40}
        short_opts = {"temperature": 0, "num_predict": 5}
        p_long, p_short, p_late = "Tell me about the sea", "Count to ten", "Name three colours"
        alone = {(p, n["num_predict"]): self.ollama.generate(self.model, p, options=n).response
                 for p, n in [(p_long, long_opts), (p_short, short_opts), (p_late, long_opts)]}
        got, errors, started = {}, [], threading.Event()

        def run(key, prompt, opts, signal_after=None):
            try:
                c = ollama.Client(host=self.server.url, timeout=300)
                text = ""
                for i, part in enumerate(c.generate(self.model, prompt, options=opts, stream=True)):
                    text += part.response
                    if signal_after is not None and i + 1 == signal_after:
                        started.set()
                got[key] = text
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
            finally:
                started.set()

        def late():
            started.wait(120)
            run("late", p_late, long_opts)

        threads = [threading.Thread(target=run, args=("long", p_long, long_opts, 5)),
                   threading.Thread(target=run, args=("short", p_short, short_opts)),
                   threading.Thread(target=late),
                   threading.Thread(target=stream_and_hang_up,
                                    args=(self.server.port, "/api/generate",
                                          {"model": self.model, "prompt": "Write a poem",
                                           "options": {"temperature": 0, "num_predict": 200}}, 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        self.assertEqual(errors, [])
        self.assertEqual(got["long"], alone[(p_long, 40)])
        self.assertEqual(got["short"], alone[(p_short, 5)])
        self.assertEqual(got["late"], alone[(p_late, 40)])
        self.assertIn("4 parallel", self.server.log())


class StopTests(unittest.TestCase):
    """SIGTERM and SIGINT stop the server gracefully, with exit status 0."""

    def test_sigterm_during_stream(self):
        server = ServerProcess()
        got = []

        def reader():
            try:
                c = ollama.Client(host=server.url, timeout=60)
                for chunk in c.generate(server.name, "Go on and on", stream=True,
                                        options={"num_predict": 100000, "temperature": 0}):
                    got.append(chunk)
            except Exception as e:  # noqa: BLE001 - the server ends the stream with an error
                got.append(e)

        t = threading.Thread(target=reader)
        t.start()
        deadline = time.time() + 60
        while len(got) < 3 and time.time() < deadline:
            time.sleep(0.02)
        t0 = time.time()
        self.assertEqual(server.stop(signal.SIGTERM), 0)
        t.join(30)
        self.assertFalse(t.is_alive())
        self.assertLess(time.time() - t0, 15)
        self.assertIsInstance(got[-1], ollama.ResponseError)  # "server is shutting down"

    def test_sigint_idle(self):
        server = ServerProcess()
        self.assertEqual(raw_request(server.port, "GET", "/")[0], 200)
        self.assertEqual(server.stop(signal.SIGINT), 0)


def find_model(source_dir):
    candidates = [ARGS.model, os.environ.get("HYPURA_SERVE_MODEL"),
                  os.path.join(source_dir, "test-models", "smollm2-135m-instruct-q4_1.gguf"),
                  os.path.join(source_dir, "..", "shared", "golden", "llama-q4_k_m.gguf")]
    for c in candidates:
        if c and os.path.exists(c):
            return os.path.realpath(c)
    return None


def main():
    global ARGS, MODEL_PATH
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="hypura or hypura_fake_server binary")
    parser.add_argument("--fake", action="store_true", help="--server is hypura_fake_server")
    parser.add_argument("--source-dir", default=".")
    parser.add_argument("--model")
    ARGS, rest = parser.parse_known_args()
    if not ARGS.fake:
        MODEL_PATH = find_model(ARGS.source_dir)
        if MODEL_PATH is None:
            print("SKIP: no model (test-models/smollm2-135m-instruct-q4_1.gguf or ../shared/golden/llama-q4_k_m.gguf)")
            return 77
        print(f"model: {MODEL_PATH}")
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
