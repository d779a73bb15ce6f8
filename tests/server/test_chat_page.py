#!/usr/bin/env python3
"""Browser test of the chat page that `hypura serve` serves at / (docs/SERVER.md, "The chat page").

Headless Chromium, driven by Selenium through Debian's chromedriver, against
hypura_fake_server (the real HTTP server over the fake engine, no model needed; --eos 0 so
that an answer runs until num_predict or Stop ends it). A models folder with one pulled
model (HYPURA_MODELS) gives the picker a second entry. The tests run in order in one
browser:

  the page loads with no console error (its Content-Security-Policy allows it) and the
  picker lists the loaded model first, selected; a prompt gets an answer whose text grows
  while it streams and ends with a tok/s figure, from a request with "stream": true and the
  settings as options; Stop ends a long answer (and the server is free for the next one);
  another model in the picker is the "model" sent (the fake server answers 404, shown in
  the chat); an {"error"} line mid-stream is shown; NDJSON split anywhere across chunks
  (even inside a UTF-8 character) is read whole; a reload keeps the conversations; Markdown
  renders (code block with language and a working copy button, lists, links) and hostile
  model text stays text; deleting a conversation removes it.

  test_chat_page.py --server BUILD/tests/server/hypura_fake_server [--screenshot FILE.png]

--screenshot saves the window after a finished exchange (docs/chat-page.png is a real one:
`hypura serve` on Qwen2.5-Coder-0.5B, the same page).
Exits 77 (skipped) when selenium, chromium or chromedriver is missing.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ARGS = None
SECOND_MODEL = "hf.co/hypura-test/second-model-GGUF:Q4_0"  # listed by /api/tags, not served

# Wraps the page's fetch so the test sees each request body the page sends.
RECORD_REQUESTS = """
window.__requests = [];
const realFetch = window.fetch;
window.fetch = function (url, init) {
  if (init && init.body) window.__requests.push({url: String(url), body: JSON.parse(init.body)});
  return realFetch.apply(this, arguments);
};"""

MARKDOWN_ANSWER = """## Reading a file

Use `open` in a **with** block, so the file is *closed* for you:

```python
with open("notes.txt", encoding="utf-8") as f:
    for line in f:
        print(line.rstrip())
```

1. `encoding` avoids the platform's default
2. iterating the file reads it line by line

- docs: [the tutorial](https://docs.python.org/3/tutorial/inputoutput.html)
- plain `read()` loads it all at once"""

HOSTILE_ANSWER = """<img src=x onerror="window.__pwned=1"> <script>window.__pwned=1</script>
[click](javascript:window.__pwned=1) **<b>bold</b>** *<i>it</i>*
[quote](https://example.com/"onmouseover="window.__pwned=1)
```"><img src=x onerror=window.__pwned=1>
</code></pre><img src=x onerror=window.__pwned=1>
```
# <svg onload=window.__pwned=1>
- <iframe src="javascript:window.__pwned=1"></iframe>"""


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


class FakeServer:
    """hypura_fake_server on a free port, answering slowly enough to watch it stream."""

    def __init__(self, models_dir):
        cmd = [ARGS.server, "--port", "0", "--token-delay-ms", "60", "--eos", "0",
               "--n-ctx", "4096"]
        env = dict(os.environ, HYPURA_MODELS=models_dir)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace", env=env)
        self.lines = []
        self.port = None
        ready = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(r"on http://[^:]+:(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(60) or self.port is None:
            self.proc.kill()
            raise RuntimeError("fake server did not start:\n" + "".join(self.lines))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_browser(webdriver, chromium, chromedriver):
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1100,860", "--force-device-scale-factor=1",
                 "--force-prefers-reduced-motion"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = webdriver.ChromeService(executable_path=chromedriver)
    return webdriver.Chrome(options=options, service=service)


def wait_for(condition, timeout, what):
    """condition()'s first truthy value, polled every 30 ms; fails after `timeout` s."""
    deadline = time.time() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out ({timeout} s) waiting for {what}")
        time.sleep(0.03)


class ChatPageTests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from selenium import webdriver
        cls.models_dir = tempfile.mkdtemp(prefix="hypura-chat-page-")
        manifest = {"models": [{"name": SECOND_MODEL, "source": "https://example.invalid/m.gguf",
                                "pulled_at": 1700000000,
                                "files": [{"path": "hf.co/x/m.gguf", "size": 1, "sha256": "0" * 64}]}]}
        with open(os.path.join(cls.models_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        cls.server = FakeServer(cls.models_dir)
        cls.url = f"http://127.0.0.1:{cls.server.port}/"
        cls.driver = start_browser(webdriver, ARGS.chromium, ARGS.chromedriver)
        cls.driver.get(cls.url)
        cls.driver.execute_script("localStorage.clear()")  # a fresh profile, but to be sure
        cls.driver.refresh()

    @classmethod
    def tearDownClass(cls):
        cls.driver.quit()
        cls.server.stop()
        shutil.rmtree(cls.models_dir, ignore_errors=True)

    # -- helpers --
    def el(self, css):
        return self.driver.find_element("css selector", css)

    def els(self, css):
        return self.driver.find_elements("css selector", css)

    def js(self, script, *args):
        return self.driver.execute_script(script, *args)

    def set_value(self, css, value):
        field = self.el(css)
        field.clear()
        if value:
            field.send_keys(value)

    def open_settings(self):
        if not self.el("#settings").get_attribute("open"):
            self.el("#settings summary").click()

    def send(self, prompt, num_predict):
        self.open_settings()
        self.set_value("#num_predict", str(num_predict) if num_predict is not None else "")
        self.set_value("#prompt", prompt)
        self.el("#send").click()

    def last_answer(self):
        return self.els("#messages .msg.assistant")[-1]

    def wait_answer_done(self, timeout=30):
        wait_for(lambda: not self.el("#send").get_attribute("disabled"), timeout, "the answer to end")
        return self.last_answer()

    def new_chat(self):
        self.el("#new-chat").click()
        wait_for(lambda: not self.els("#messages .msg"), 5, "an empty chat")

    def requests(self):
        return self.js("return window.__requests || []")

    def console_errors(self):
        return [e for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    # -- tests, in order --
    def test_1_page_loads_with_models(self):
        self.assertEqual(self.driver.title, "Hypura chat")
        wait_for(lambda: len(self.els("#model option")) == 2, 10, "the model picker")
        names = [o.get_attribute("value") for o in self.els("#model option")]
        self.assertEqual(names, ["fake:latest", SECOND_MODEL])  # the loaded one first
        self.assertEqual(self.el("#model").get_attribute("value"), "fake:latest")
        for css in ("#prompt", "#send", "#stop", "#system", "#temperature", "#top_p",
                    "#num_predict", "#messages", "#new-chat", "#conversations"):
            self.assertTrue(self.els(css), css)
        self.assertTrue(self.el("#stop").get_attribute("disabled"))
        self.assertEqual(self.console_errors(), [])  # nothing blocked by the CSP, no JS error

    def test_2_streamed_answer_with_tok_s(self):
        self.js(RECORD_REQUESTS)
        self.open_settings()
        self.set_value("#system", "You are terse.")
        self.set_value("#temperature", "0.5")
        self.send("Hello there", 20)
        self.assertFalse(self.el("#stop").get_attribute("disabled"))
        lengths = set()  # the answer's lengths seen while it streams (20 tokens, 60 ms each)
        answer = wait_for(lambda: self.els("#messages .msg.assistant"), 5, "the answer")[-1]
        deadline = time.time() + 30
        while self.el("#send").get_attribute("disabled") and time.time() < deadline:
            if answer.text:
                lengths.add(len(answer.text))
            time.sleep(0.03)
        self.assertGreaterEqual(len(lengths), 3, "the text grows while streaming")
        tps = self.last_answer().find_element("css selector", ".tps").text
        self.assertRegex(tps, r"^\d+(\.\d+)? tok/s · 20 tokens · fake:latest$")
        self.assertTrue(self.el("#stop").get_attribute("disabled"))
        body = self.requests()[-1]["body"]
        self.assertEqual(self.requests()[-1]["url"], "/api/chat")
        self.assertIs(body["stream"], True)
        self.assertEqual(body["model"], "fake:latest")
        self.assertEqual(body["options"], {"temperature": 0.5, "num_predict": 20})
        self.assertEqual(body["messages"], [{"role": "system", "content": "You are terse."},
                                            {"role": "user", "content": "Hello there"}])
        self.assertEqual(self.el("#conversations li.active .conv-title").text, "Hello there")

    def test_3_stop_ends_a_long_answer(self):
        self.new_chat()
        self.send("Tell me a very long story", None)  # no num_predict: until the context ends
        answer = wait_for(lambda: self.els("#messages .msg.assistant"), 5, "the answer")[-1]
        wait_for(lambda: len(answer.text) > 20, 10, "some streamed text")
        self.el("#stop").click()
        wait_for(lambda: self.el("#stop").get_attribute("disabled"), 5, "Stop to end the stream")
        answer = self.last_answer()
        self.assertIn("stopped", answer.find_element("css selector", ".note").text)
        text = answer.text
        time.sleep(0.5)
        self.assertEqual(self.last_answer().text, text, "nothing arrives after Stop")
        self.assertFalse(self.last_answer().find_elements("css selector", ".tps"))
        # The server cancelled that generation: the next answer comes at once (otherwise it
        # would queue behind ~4000 tokens at 60 ms).
        self.send("And now a short one", 3)
        done = self.wait_answer_done(timeout=15)
        self.assertIn("3 tokens", done.find_element("css selector", ".tps").text)
        sent = self.requests()[-1]["body"]["messages"]
        self.assertEqual(sent[-2]["role"], "assistant")  # the stopped part stays in the chat
        self.assertEqual(sent[-1]["content"], "And now a short one")

    def test_4_model_picker_sets_the_model(self):
        from selenium.webdriver.support.ui import Select
        self.new_chat()
        Select(self.el("#model")).select_by_value(SECOND_MODEL)
        self.send("Who are you?", 5)
        answer = self.wait_answer_done()
        self.assertEqual(self.requests()[-1]["body"]["model"], SECOND_MODEL)
        # hypura serve serves only its loaded model: the 404 is shown in the chat.
        error = answer.find_element("css selector", ".error").text
        self.assertIn("HTTP 404", error)
        self.assertIn(SECOND_MODEL, error)
        Select(self.el("#model")).select_by_value("fake:latest")
        self.send("Who are you?", 5)
        self.assertEqual(self.requests()[-1]["body"]["model"], "fake:latest")
        self.assertIn("fake:latest", self.wait_answer_done().find_element("css selector", ".tps").text)
        # The failed turn's empty answer is not sent back as part of the conversation.
        sent = [m for m in self.requests()[-1]["body"]["messages"] if m["role"] != "system"]
        self.assertEqual(sent, [{"role": "user", "content": "Who are you?"}] * 2)
        # The browser logs the 404; nothing else.
        errors = self.console_errors()
        self.assertTrue(all("404" in e["message"] for e in errors), errors)

    def test_5_error_line_mid_stream(self):
        # A server that fails mid-answer sends {"error": ...} as an NDJSON line (status 200).
        self.new_chat()
        self.js("""
          window.fetch = async () => new Response(
            '{"message":{"role":"assistant","content":"partial "},"done":false}\\n' +
            '{"error":"the engine failed"}\\n', {status: 200});""")
        self.send("Break, please", None)
        answer = self.wait_answer_done()
        self.assertIn("partial", answer.text)
        self.assertEqual(answer.find_element("css selector", ".error").text, "the engine failed")

    def test_6_ndjson_split_across_chunks(self):
        # Every split point, byte by byte, of two lines with a 4-byte UTF-8 character.
        result = self.driver.execute_async_script("""
          const done = arguments[arguments.length - 1];
          const bytes = new TextEncoder().encode(
            '{"message":{"content":"h\u00e9\ud83e\udd99"}}\\n{"done":true,"eval_count":2}');
          (async () => {
            const seen = [];
            for (let size = 1; size <= bytes.length; size++) {
              const chunks = [];
              for (let i = 0; i < bytes.length; i += size) chunks.push(bytes.slice(i, i + size));
              const body = new ReadableStream({start(c) { chunks.forEach((x) => c.enqueue(x)); c.close(); }});
              const got = [];
              await readNdjson(body, (o) => got.push(o));
              seen.push(JSON.stringify(got));
            }
            done(Array.from(new Set(seen)));
          })().catch((e) => done(['error: ' + e]));""")
        self.assertEqual(len(result), 1, result)
        self.assertEqual(json.loads(result[0]),
                         [{"message": {"content": "h\u00e9\U0001f999"}}, {"done": True, "eval_count": 2}])

    def test_7_reload_keeps_conversations(self):
        titles = [e.text for e in self.els("#conversations .conv-title")]
        self.assertEqual(len(titles), 4)
        self.el("#conversations li:last-child .conv-title").click()  # the first chat
        wait_for(lambda: "Hello there" in self.el("#messages").text, 5, "the first chat")
        before = self.el("#messages").text
        self.driver.refresh()
        wait_for(lambda: len(self.els("#model option")) == 2, 10, "the model picker")
        self.assertEqual([e.text for e in self.els("#conversations .conv-title")], titles)
        self.assertEqual(self.el("#messages").text, before)
        self.assertIn("tok/s", self.last_answer().find_element("css selector", ".tps").text)
        self.assertEqual(self.el("#system").get_attribute("value"), "You are terse.")  # settings too

    def add_conversation(self, title, messages):
        """Stores a conversation as the page does and reloads, so the page renders it."""
        self.js("""
          const store = JSON.parse(localStorage.getItem('hypura.chat.conversations'));
          store.list.unshift({id: arguments[0], title: arguments[0], messages: arguments[1]});
          store.current = arguments[0];
          localStorage.setItem('hypura.chat.conversations', JSON.stringify(store));""",
                title, messages)
        self.driver.refresh()
        wait_for(lambda: len(self.els("#model option")) == 2, 10, "the model picker")

    def test_8_markdown_and_a_finished_exchange(self):
        self.add_conversation("Reading a file in Python", [
            {"role": "user", "content": "How do I read a text file in Python?"},
            {"role": "assistant", "content": MARKDOWN_ANSWER, "model": "fake:latest"}])
        msg = self.els("#messages .msg.assistant")[0]
        self.assertEqual(msg.find_element("css selector", "h2").text, "Reading a file")
        self.assertEqual(msg.find_element("css selector", ".code .lang").text, "python")
        code = msg.find_element("css selector", ".code pre code").text
        self.assertTrue(code.startswith('with open("notes.txt"'), code)
        self.assertEqual(len(msg.find_elements("css selector", "ol > li")), 2)
        self.assertEqual(len(msg.find_elements("css selector", "ul > li")), 2)
        self.assertEqual(msg.find_element("css selector", "strong").text, "with")
        self.assertEqual(msg.find_element("css selector", "em").text, "closed")
        self.assertEqual(msg.find_element("css selector", "p code").text, "open")
        link = msg.find_element("css selector", "a")
        self.assertEqual(link.get_attribute("href"), "https://docs.python.org/3/tutorial/inputoutput.html")
        self.assertEqual(link.get_attribute("rel"), "noopener noreferrer")
        # The copy button puts the code on the clipboard.
        self.driver.execute_cdp_cmd("Browser.grantPermissions", {
            "origin": self.url.rstrip("/"),
            "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
        button = msg.find_element("css selector", ".code .copy")
        button.click()
        wait_for(lambda: button.text == "Copied", 5, "the copy button to report")
        copied = self.driver.execute_async_script(
            "navigator.clipboard.readText().then(arguments[0], (e) => arguments[0]('error: ' + e))")
        self.assertEqual(copied, code)
        # A real exchange after it, for the screenshot.
        self.send("Thanks! Anything else?", 24)
        self.assertIn("tok/s", self.wait_answer_done().find_element("css selector", ".tps").text)
        if ARGS.screenshot:
            self.el("#settings summary").click()  # closed, as when the page opens
            self.js("document.activeElement.blur()")
            time.sleep(0.3)
            self.driver.save_screenshot(ARGS.screenshot)
            print(f"screenshot: {ARGS.screenshot} ({os.path.getsize(ARGS.screenshot)} bytes)")

    def test_9_hostile_text_stays_text(self):
        self.add_conversation("<b>title</b>", [
            {"role": "user", "content": "<img src=x onerror=\"window.__pwned=1\">"},
            {"role": "assistant", "content": HOSTILE_ANSWER}])
        box = self.el("#messages")
        for tag in ("img", "script", "iframe", "svg", "b", "i"):
            self.assertFalse(box.find_elements("css selector", tag), tag)
        for a in box.find_elements("css selector", "a"):
            self.assertRegex(a.get_attribute("href"), r"^https?://")
            self.assertIsNone(a.get_attribute("onmouseover"))
        self.assertIn("<script>window.__pwned=1</script>", box.text)
        self.assertIn("<img src=x onerror", box.text)
        self.assertEqual(self.el("#conversations li.active .conv-title").text, "<b>title</b>")
        time.sleep(0.3)
        self.assertIsNone(self.js("return window.__pwned"))

    def test_zz_delete_conversation(self):
        before = len(self.els("#conversations li"))
        self.el("#conversations li.active .conv-delete").click()
        wait_for(lambda: len(self.els("#conversations li")) == before - 1, 5, "the deletion")
        self.driver.refresh()
        wait_for(lambda: len(self.els("#model option")) == 2, 10, "the model picker")
        titles = [e.text for e in self.els("#conversations .conv-title")]
        self.assertEqual(len(titles), before - 1)
        self.assertNotIn("<b>title</b>", titles)
        self.assertEqual(self.console_errors(), [])


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, help="the hypura_fake_server binary")
    parser.add_argument("--screenshot", help="save a finished exchange as this PNG")
    ARGS, rest = parser.parse_known_args()
    try:
        import selenium  # noqa: F401
    except ImportError:
        skip("selenium is not installed (bash scripts/setup.sh installs it)")
    ARGS.chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                         "google-chrome"))), None)
    if ARGS.chromium is None:
        skip("no chromium (apt-get install chromium chromium-driver)")
    ARGS.chromedriver = next(filter(os.path.exists, ("/usr/bin/chromedriver",
                                                     shutil.which("chromedriver") or "")), None)
    if ARGS.chromedriver is None:
        skip("no chromedriver (apt-get install chromium-driver)")
    if ARGS.screenshot:
        ARGS.screenshot = os.path.abspath(ARGS.screenshot)
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
