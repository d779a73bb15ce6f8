#!/usr/bin/env python3
"""Issue 18: `hypura serve` for the clients people plug in (Open WebUI, LangChain,
Continue, Copilot Chat), against a real `hypura serve` on fetched models, with the
official `ollama` and `openai` Python clients and curl.

  test_compat.py --hypura BUILD/hypura --source-dir .

Uses test-models/smollm2-135m-instruct-q4_1.gguf (and, for fill-in-the-middle and
tools, test-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf); a test whose model is
missing is skipped, and with neither the script exits 77 (skipped).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

import ollama
import openai

ARGS = None
SMOLLM = "smollm2-135m-instruct-q4_1.gguf"
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def model_path(name):
    path = os.path.join(ARGS.source_dir, "test-models", name)
    return os.path.realpath(path) if os.path.exists(path) else None


class Serve:
    """`hypura serve MODEL --port 0 ...`; its log is kept for assertions."""

    def __init__(self, model, *extra):
        self.cmd = [ARGS.hypura, "serve", model, "--port", "0", "--threads", "2"] + list(extra)
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        self.lines, self.port, self.name = [], None, None
        ready = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(r'serving "([^"]+)" on http://[^:]+:(\d+)', line)
                if m:
                    self.name, self.port = m.group(1), int(m.group(2))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(120) or self.port is None:
            self.proc.kill()
            raise RuntimeError("server did not start: " + " ".join(self.cmd) + "\n" + self.log())
        self.url = f"http://127.0.0.1:{self.port}"
        self.ollama = ollama.Client(host=self.url, timeout=300)
        self.openai = openai.OpenAI(base_url=self.url + "/v1", api_key="unused", timeout=300,
                                    max_retries=0)

    def log(self):
        return "".join(self.lines[-40:])

    def wait_log(self, pattern, since=0, timeout=10):
        """The matches of `pattern` in log lines from line `since` on, once one has come
        (a request's line is written just after its response)."""
        deadline = time.time() + timeout
        while True:
            found = [m for line in list(self.lines)[since:] for m in re.findall(pattern, line)]
            if found or time.time() > deadline:
                return found
            time.sleep(0.05)

    def curl(self, *args):
        """(status, headers text, body) of one curl call."""
        out = subprocess.run(["curl", "-s", "-D", "-", "--max-time", "300"] + list(args),
                             capture_output=True, timeout=320).stdout.decode("utf-8", "replace")
        head, _, body = out.partition("\r\n\r\n")
        while head.startswith("HTTP/1.1 100"):
            head, _, body = body.partition("\r\n\r\n")
        return int(head.split()[1]), head, body

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None


GREEDY = {"temperature": 0, "num_predict": 8}


def gpt2_byte_decoder():
    """Byte-level BPE's printable stand-ins for bytes (GPT-2's table) -> the bytes."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def assert_close(test, a, b, tol=1e-4):
    test.assertEqual(len(a), len(b))
    test.assertLess(max(abs(x - y) for x, y in zip(a, b)), tol)


class ServedModel(unittest.TestCase):
    """A test class with one `hypura serve` of MODEL_FILE (SERVE_ARGS) for all its tests;
    skipped when the model is not fetched."""
    MODEL_FILE = None
    SERVE_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.path = model_path(cls.MODEL_FILE)
        if cls.path is None:
            raise unittest.SkipTest("no " + cls.MODEL_FILE)
        cls.s = Serve(cls.path, *cls.SERVE_ARGS)
        cls.model = cls.s.name

    @classmethod
    def tearDownClass(cls):
        assert cls.s.stop() == 0, cls.s.log()

    def tearDown(self):
        self.assertIsNone(self.s.proc.poll(), "server died:\n" + self.s.log())


class SmolTests(ServedModel):
    """One `hypura serve` of SmolLM2-135M with a 512-token context."""
    MODEL_FILE = SMOLLM
    SERVE_ARGS = ("--context", "512", "--alias", "smol")

    def long_conversation(self, turns):
        m = [{"role": "system", "content": "You are a terse assistant."}]
        for i in range(turns):
            m.append({"role": "user", "content": f"Tell me fact number {i} about the sea, in detail."})
            m.append({"role": "assistant", "content": f"Fact {i}: the sea is large, salty, deep and "
                                                      "home to many fish, whales and corals."})
        m.append({"role": "user", "content": "Name one colour."})
        return m

    # -- item 1: long chats -------------------------------------------------------------

    def test_long_chat_keeps_answering_on_api_and_400_on_v1(self):
        messages = self.long_conversation(25)  # ~1000 tokens: twice the context
        since = len(self.s.lines)
        r = self.s.ollama.chat(self.model, messages=messages, options=GREEDY)
        self.assertTrue(r.done)
        self.assertGreater(r.eval_count, 0)
        self.assertLessEqual(r.prompt_eval_count + 8, 512)
        self.assertTrue(self.s.wait_log(r"dropped=(\d+) messages", since), self.s.log())
        with self.assertRaises(openai.BadRequestError) as cm:
            self.s.openai.chat.completions.create(model=self.model, messages=messages, max_tokens=8)
        self.assertEqual(cm.exception.code, "context_length_exceeded")

    # -- item 5: prompt_eval_count ------------------------------------------------------

    def test_prompt_eval_count_counts_the_whole_prompt(self):
        messages = [{"role": "user", "content": "Say one word."}]
        first = self.s.ollama.chat(self.model, messages=messages, options=GREEDY)
        follow = messages + [{"role": "assistant", "content": first.message.content},
                             {"role": "user", "content": "Another word."}]
        since = len(self.s.lines)
        second = self.s.ollama.chat(self.model, messages=follow, options=GREEDY)
        usage = self.s.openai.chat.completions.create(model=self.model, messages=follow,
                                                      max_tokens=1, temperature=0).usage
        self.assertEqual(second.prompt_eval_count, usage.prompt_tokens)
        # ...while the KV cache still served the shared prefix (the log line says so).
        reused = [int(m) for m in self.s.wait_log(r"prompt=\d+ \(reused ([1-9]\d*)\)", since)]
        self.assertTrue(reused, self.s.log())

    # -- item 6: curl's default content type --------------------------------------------

    def test_curl_form_body_is_json(self):
        # Past httplib's 8 KiB form limit (an unknown field pads it; unknown fields are ignored).
        body = json.dumps({"model": self.model, "prompt": "Hi", "stream": False,
                           "options": GREEDY, "padding": "x" * (20 << 10)})
        status, _, reply = self.s.curl(self.s.url + "/api/generate", "-d", body)  # form type
        self.assertEqual(status, 200, reply[:300])
        self.assertTrue(json.loads(reply)["done"])

    # -- item 7: /api/version -------------------------------------------------------------

    def test_version(self):
        status, _, body = self.s.curl(self.s.url + "/api/version")
        v = json.loads(body)
        self.assertEqual(status, 200)
        self.assertGreaterEqual(tuple(int(x) for x in v["version"].split(".")), (0, 6, 4))
        self.assertRegex(v["hypura_version"], r"^\d+\.\d+\.\d+$")

    # -- item 8: CORS ---------------------------------------------------------------------

    def test_cors(self):
        status, head, _ = self.s.curl("-X", "OPTIONS", self.s.url + "/api/chat",
                                      "-H", "Origin: vscode-webview://ext",
                                      "-H", "Access-Control-Request-Method: POST",
                                      "-H", "Access-Control-Request-Headers: content-type")
        self.assertEqual(status, 204)
        self.assertIn("Access-Control-Allow-Origin: vscode-webview://ext", head)
        self.assertIn("Access-Control-Allow-Headers: content-type", head)
        status, head, _ = self.s.curl(self.s.url + "/api/tags", "-H", "Origin: http://localhost:3000")
        self.assertEqual(status, 200)
        self.assertIn("Access-Control-Allow-Origin: http://localhost:3000", head)
        status, head, _ = self.s.curl(self.s.url + "/api/tags", "-H", "Origin: https://evil.example")
        self.assertEqual(status, 403)
        self.assertNotIn("Access-Control-Allow-Origin", head)

    # -- item 9 ---------------------------------------------------------------------------

    def test_assistant_message_is_continued(self):
        prefix = "The capital of France is"
        messages = [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "What is the capital of France?"},
                    {"role": "assistant", "content": prefix}]
        r = self.s.ollama.chat(self.model, messages=messages, options=GREEDY)
        # The same text as the raw prompt that ends inside the assistant's turn.
        raw = ("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n"
               "What is the capital of France?<|im_end|>\n<|im_start|>assistant\n" + prefix)
        expected = self.s.ollama.generate(self.model, raw, raw=True, options=GREEDY)
        self.assertEqual(r.message.content, expected.response)
        self.assertGreater(len(r.message.content), 0)

    def test_keep_alive_zero_unloads_and_next_request_loads(self):
        r = self.s.ollama.generate(self.model, keep_alive=0)
        self.assertEqual(r.done_reason, "unload")
        self.assertEqual(self.s.ollama.ps().models, [])
        again = self.s.ollama.generate(self.model, "Hi", options=GREEDY)
        self.assertTrue(again.done)
        self.assertEqual(len(self.s.ollama.ps().models), 1)

    # -- item 4: embeddings ------------------------------------------------------------

    def test_embeddings_endpoints(self):
        texts = ["The cat sat on the mat.", "Stock markets fell sharply today."]
        e = self.s.ollama.embed(self.model, input=texts)
        self.assertEqual(len(e.embeddings), 2)
        for v in e.embeddings:
            self.assertEqual(len(v), 576)  # SmolLM2-135M's n_embd
            self.assertAlmostEqual(sum(x * x for x in v), 1.0, places=4)
        self.assertGreater(max(abs(x - y) for x, y in zip(*e.embeddings)), 0.01)
        single = self.s.ollama.embed(self.model, input=texts[0]).embeddings[0]
        assert_close(self, single, e.embeddings[0])  # a batch equals its inputs alone
        assert_close(self, self.s.ollama.embeddings(model=self.model, prompt=texts[0]).embedding, single)
        o = self.s.openai.embeddings.create(model=self.model, input=texts)  # base64 on the wire
        assert_close(self, o.data[1].embedding, e.embeddings[1])
        self.assertEqual(o.usage.prompt_tokens, e.prompt_eval_count)
        f = self.s.openai.embeddings.create(model=self.model, input=texts[0], encoding_format="float")
        assert_close(self, f.data[0].embedding, single)
        d = self.s.ollama.embed(self.model, input=texts[0], dimensions=32).embeddings[0]
        self.assertEqual(len(d), 32)
        norm = sum(x * x for x in single[:32]) ** 0.5
        assert_close(self, d, [x / norm for x in single[:32]])
        long_text = "sea " * 700  # more than --context 512 tokens
        with self.assertRaises(ollama.ResponseError) as cm:
            self.s.ollama.embed(self.model, input=long_text, truncate=False)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(self.s.ollama.embed(self.model, input=long_text).prompt_eval_count, 512)
        with self.assertRaises(openai.BadRequestError):
            self.s.openai.embeddings.create(model=self.model, input=long_text)

    def test_embedding_is_the_final_hidden_state(self):
        """Independent check: SmolLM2 has no pooling type, so its embedding is the last
        token's final-norm state; the output layer (its tied token embedding, read and
        dequantized here with the gguf package) applied to it must give the greedy next token."""
        try:
            import gguf
            import numpy as np
            from gguf import quants
        except ImportError as e:
            self.skipTest(f"gguf/numpy not installed: {e}")
        reader = gguf.GGUFReader(self.path)
        t = next(t for t in reader.tensors if t.name == "token_embd.weight")
        w = quants.dequantize(t.data, t.tensor_type).reshape(-1, 576)
        tokens = reader.fields["tokenizer.ggml.tokens"]
        prompt = "The capital of France is"
        e = np.array(self.s.ollama.embed(self.model, input=prompt).embeddings[0], dtype=np.float32)
        logits = w @ e
        top = np.argsort(logits)[::-1][:2]
        self.assertGreater(logits[top[0]] - logits[top[1]], 1e-3 * abs(logits[top[0]]))  # a clear winner
        dec = gpt2_byte_decoder()
        piece = bytes(dec[c] for c in bytes(tokens.parts[tokens.data[top[0]]]).decode()).decode()
        greedy = self.s.ollama.generate(self.model, prompt, raw=True,
                                        options={"temperature": 0, "num_predict": 1, "repeat_penalty": 1})
        self.assertEqual(greedy.response, piece)

    def test_v1_models_created(self):
        created = self.s.openai.models.list().data[0].created
        self.assertEqual(created, int(os.stat(self.path).st_mtime))

    def test_suffix_without_fim_tokens(self):
        # SmolLM2-135M-Instruct's vocabulary has no FIM tokens: insert is refused clearly.
        with self.assertRaises(ollama.ResponseError) as cm:
            self.s.ollama.generate(self.model, "def add(a, b):\n    return ", suffix="\n", options=GREEDY)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn("does not support insert", cm.exception.error)

    def test_stream_cut_never_breaks_utf8(self):
        # Greedy, so a shorter answer is a prefix of a longer one; a cut inside a
        # multi-byte character must drop its start rather than emit broken bytes or U+FFFD.
        prompt = "Write the word 'cat' in Japanese, Chinese and Korean, and three animal emoji."
        # How soon the answer reaches its CJK words depends on the SIMD path's rounding
        # (some paths open with a sentence of English): cut longer until a cut fell inside
        # a character, at most 48 tokens.
        texts = []
        for n in range(1, 49):
            raw = b""
            for chunk in self.s.ollama.generate(self.model, prompt, stream=True,
                                                options={"temperature": 0, "num_predict": n}):
                raw += chunk.response.encode("utf-8")
            text = raw.decode("utf-8", errors="strict")
            self.assertNotIn("\ufffd", text)
            texts.append(text)
            if len(texts) > 1 and texts[-1] == texts[-2] and any(ord(c) > 0x7ff for c in text):
                break
        for t in texts:
            self.assertTrue(texts[-1].startswith(t), (t, texts[-1]))
        self.assertTrue(any(ord(c) > 0x7ff for c in texts[-1]), texts[-1])
        # At least one cut fell inside a character (a token added no text).
        self.assertTrue(any(a == b for a, b in zip(texts, texts[1:])), texts)

    def test_num_ctx_grows_the_context_and_is_reported(self):
        prompt = "one two three four " * 200  # ~800 tokens: more than --context 512
        with self.assertRaises(ollama.ResponseError):
            self.s.ollama.generate(self.model, prompt, raw=True, options={"num_predict": 1})
        r = self.s.ollama.generate(self.model, prompt, raw=True,
                                   options={"num_predict": 1, "num_ctx": 2048})
        self.assertGreater(r.prompt_eval_count, 512)
        ps = self.s.ollama.ps().models
        self.assertGreaterEqual(ps[0].context_length, 2048)
        show = self.s.ollama.show(self.model)
        self.assertIn("num_ctx %d" % ps[0].context_length, show.parameters)
        self.assertEqual(show.modelinfo["llama.context_length"], 8192)  # the trained length

    def test_open_webui_sequence(self):
        """The order Open WebUI calls endpoints when a user opens a chat and sends a message."""
        self.assertEqual(self.s.curl(self.s.url + "/api/version")[0], 200)
        self.assertEqual(self.s.curl(self.s.url + "/api/tags")[0], 200)
        self.assertIn(self.model, [m.model for m in self.s.ollama.list().models])
        self.assertIn("completion", self.s.ollama.show(self.model).capabilities)
        self.s.ollama.ps()
        chunks = list(self.s.ollama.chat(self.model, stream=True, keep_alive="5m",
                                         messages=[{"role": "user", "content": "Hello!"}],
                                         options={"temperature": 0, "num_predict": 6, "num_ctx": 512}))
        self.assertTrue(chunks[-1].done)
        # Title generation: a non-streamed request through the OpenAI-compatible API.
        title = self.s.openai.chat.completions.create(
            model=self.model, max_tokens=8, temperature=0,
            messages=[{"role": "user", "content": "Hello!"},
                      {"role": "assistant", "content": "".join(c.message.content for c in chunks)},
                      {"role": "user", "content": "Generate a 3-word title for this chat."}])
        self.assertEqual(title.choices[0].message.role, "assistant")


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_current_weather",
    "description": "Get the current weather in a given city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}},
                   "required": ["city"]}}}


class QwenTests(ServedModel):
    """Qwen2.5-Coder-0.5B: fill-in-the-middle tokens, and tools through its own template."""
    MODEL_FILE = QWEN
    SERVE_ARGS = ("--context", "1024", "--alias", "qwen")

    def test_fill_in_the_middle(self):
        r = self.s.ollama.generate(self.model, "def add(a, b):\n    return ",
                                   suffix="\n\nprint(add(1, 2))\n",
                                   options={"temperature": 0, "num_predict": 8, "repeat_penalty": 1})
        self.assertIn("a + b", r.response)
        c = self.s.openai.completions.create(model=self.model, prompt="def add(a, b):\n    return ",
                                             suffix="\n\nprint(add(1, 2))\n", max_tokens=8,
                                             temperature=0)
        self.assertEqual(c.choices[0].text, r.response)


class LookupTests(ServedModel):
    """`serve --lookup` (issue 33): greedy replies are the plain server's, token for token,
    whole and streamed, and the request's log line counts the guesses kept."""
    MODEL_FILE = QWEN
    SERVE_ARGS = ("--context", "1024", "--alias", "qwen", "--lookup")
    PROMPT = ("Copy this code exactly, without any explanation:\n"
              "def scale(values, factor):\n    out = []\n    for value in values:\n"
              "        out.append(value * factor)\n    return out\n")
    OPTIONS = {"temperature": 0, "num_predict": 48, "repeat_penalty": 1}

    def test_greedy_replies_are_the_plain_servers(self):
        plain = Serve(self.path, "--context", "1024", "--alias", "qwen")
        try:
            want = plain.ollama.generate(self.model, self.PROMPT, options=self.OPTIONS).response
        finally:
            self.assertEqual(plain.stop(), 0, plain.log())
        since = len(self.s.lines)
        got = self.s.ollama.generate(self.model, self.PROMPT, options=self.OPTIONS)
        self.assertEqual(got.response, want)
        spec = self.s.wait_log(r"spec=(\d+)/(\d+) in (\d+) passes", since)
        self.assertTrue(spec, self.s.log())
        kept, drafted, passes = map(int, spec[-1])
        self.assertGreater(drafted, 0)
        self.assertGreater(kept, 0, "no guess kept on a reply that copies its prompt")
        self.assertLess(passes, got.eval_count, "every token took a pass of its own")
        streamed = "".join(part.response for part in self.s.ollama.generate(
            self.model, self.PROMPT, options=self.OPTIONS, stream=True))
        self.assertEqual(streamed, want)


class QwenToolTests(ServedModel):
    """Tool calling with Qwen2.5-Coder's template and <tool_call> format."""
    MODEL_FILE = QWEN
    SERVE_ARGS = ("--context", "2048", "--alias", "qwen")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.question = [{"role": "user", "content": "What is the weather in Paris right now?"}]
        cls.opts = {"temperature": 0, "num_predict": 48, "repeat_penalty": 1}

    def test_show_lists_tools_and_insert(self):
        caps = self.s.ollama.show(self.model).capabilities
        self.assertIn("tools", caps)
        self.assertIn("insert", caps)

    def test_ollama_tool_call_and_answer(self):
        r = self.s.ollama.chat(self.model, messages=self.question, tools=[WEATHER_TOOL], options=self.opts)
        calls = r.message.tool_calls
        self.assertTrue(calls, r.message)
        self.assertEqual(calls[0].function.name, "get_current_weather")
        self.assertIn("paris", json.dumps(calls[0].function.arguments).lower())
        self.assertNotIn("<tool_call>", r.message.content)
        # Streamed: the same call arrives in a chunk of its own.
        streamed = [c for c in self.s.ollama.chat(self.model, messages=self.question, tools=[WEATHER_TOOL],
                                                  options=self.opts, stream=True) if c.message.tool_calls]
        self.assertEqual(len(streamed), 1)
        self.assertEqual(streamed[0].message.tool_calls[0].function.name, "get_current_weather")
        # The tool's result goes back as a "tool" message; the model answers with it.
        follow = self.question + [{"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_current_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": '{"temperature_c": 23, "sky": "sunny"}',
             "tool_name": "get_current_weather"}]
        answer = self.s.ollama.chat(self.model, messages=follow, tools=[WEATHER_TOOL], options=self.opts)
        self.assertFalse(answer.message.tool_calls)
        self.assertIn("23", answer.message.content)

    def test_openai_tool_call_streamed_and_not(self):
        r = self.s.openai.chat.completions.create(model=self.model, messages=self.question,
                                                  tools=[WEATHER_TOOL], temperature=0, max_tokens=48)
        choice = r.choices[0]
        self.assertEqual(choice.finish_reason, "tool_calls")
        call = choice.message.tool_calls[0]
        self.assertEqual(call.type, "function")
        self.assertEqual(call.function.name, "get_current_weather")
        self.assertIn("paris", json.loads(call.function.arguments)["city"].lower())
        stream = self.s.openai.chat.completions.create(model=self.model, messages=self.question,
                                                       tools=[WEATHER_TOOL], temperature=0, max_tokens=48,
                                                       stream=True)
        names, args, finish = [], "", None
        for chunk in stream:
            for ch in chunk.choices:
                for tc in ch.delta.tool_calls or []:
                    names.append(tc.function.name)
                    args += tc.function.arguments or ""
                finish = ch.finish_reason or finish
        self.assertEqual(names, ["get_current_weather"])
        self.assertEqual(json.loads(args), json.loads(call.function.arguments))
        self.assertEqual(finish, "tool_calls")
        # The assistant's call and the tool's result, in OpenAI's shapes.
        follow = self.question + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 23, "sky": "sunny"}'}]
        answer = self.s.openai.chat.completions.create(model=self.model, messages=follow, tools=[WEATHER_TOOL],
                                                       temperature=0, max_tokens=48)
        self.assertEqual(answer.choices[0].finish_reason, "stop")
        self.assertIn("23", answer.choices[0].message.content)
        # tool_choice "none" withdraws the tools: a plain answer.
        plain = self.s.openai.chat.completions.create(model=self.model, messages=self.question,
                                                      tools=[WEATHER_TOOL], tool_choice="none",
                                                      temperature=0, max_tokens=16)
        self.assertIsNone(plain.choices[0].message.tool_calls)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hypura", required=True)
    parser.add_argument("--source-dir", default=".")
    ARGS, rest = parser.parse_known_args()
    if not model_path(SMOLLM) and not model_path(QWEN):
        print("SKIP: no test models (scripts/fetch-models.sh)")
        return 77
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
