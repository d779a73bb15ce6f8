#!/usr/bin/env python3
"""Issue 37: the frameworks people plug into an Ollama server, against a real `hypura serve`
on Qwen2.5-Coder-0.5B-Instruct: LangChain's `langchain-ollama` (chat, streaming, tool
calls, structured output) and LlamaIndex's `llama-index-llms-ollama` (chat, completion,
streaming). Greedy sampling, so every run asks the same questions and gets the same
answers.

  test_frameworks.py --hypura BUILD/hypura --source-dir .

Exits 77 (skipped) without the model or the packages.
"""
import argparse
import os
import sys
import unittest
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_process import served_model, start_serve  # noqa: E402

ARGS = None
QWEN = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
SERVER = {}  # url, model


def setUpModule():
    model = os.path.join(ARGS.source_dir, "test-models", QWEN)
    proc, port = start_serve(ARGS.hypura, model, ["--threads", "2", "--context", "2048"])
    SERVER.update(proc=proc, url=f"http://127.0.0.1:{port}", model=served_model(port))


def tearDownModule():
    SERVER["proc"].terminate()
    SERVER["proc"].wait(30)


class LangChain(unittest.TestCase):
    def llm(self, **kw):
        from langchain_ollama import ChatOllama
        return ChatOllama(model=SERVER["model"], base_url=SERVER["url"], temperature=0,
                          num_predict=64, **kw)

    def test_chat(self):
        reply = self.llm().invoke("Name three primary colors.")
        self.assertIn("red", reply.content.lower())
        self.assertGreater(reply.usage_metadata["output_tokens"], 0)

    def test_streaming(self):
        chunks = [c.content for c in self.llm().stream("Count from 1 to 5.")]
        self.assertGreater(len(chunks), 3)
        self.assertIn("3", "".join(chunks))

    def test_tool_calls(self):
        from langchain_core.tools import tool

        @tool
        def get_weather(city: str) -> str:
            """The current weather in a city."""
            return "sunny"

        reply = self.llm().bind_tools([get_weather]).invoke(
            "What is the weather in Paris? Call the get_weather tool.")
        self.assertEqual(len(reply.tool_calls), 1, reply)
        self.assertEqual(reply.tool_calls[0]["name"], "get_weather")
        self.assertIn("paris", reply.tool_calls[0]["args"]["city"].lower())

    def test_structured_output(self):
        from pydantic import BaseModel

        class City(BaseModel):
            name: str
            country: str

        city = self.llm().with_structured_output(City, method="json_schema").invoke(
            "Give the capital of France as JSON with its name and country.")
        self.assertIsInstance(city, City)
        self.assertEqual(city.name.lower(), "paris")


class LlamaIndex(unittest.TestCase):
    def llm(self):
        from llama_index.llms.ollama import Ollama
        return Ollama(model=SERVER["model"], base_url=SERVER["url"], request_timeout=300,
                      temperature=0, additional_kwargs={"num_predict": 64})

    def test_chat(self):
        from llama_index.core.llms import ChatMessage
        reply = self.llm().chat([ChatMessage(role="user", content="Name three primary colors.")])
        self.assertIn("red", reply.message.content.lower())

    def test_completion(self):
        reply = self.llm().complete("The capital of France is")
        self.assertIn("paris", reply.text.lower())

    def test_streaming(self):
        from llama_index.core.llms import ChatMessage
        deltas = [r.delta for r in self.llm().stream_chat(
            [ChatMessage(role="user", content="Count from 1 to 5.")])]
        self.assertGreater(len(deltas), 3)
        self.assertIn("3", "".join(d or "" for d in deltas))
        pieces = [r.delta for r in self.llm().stream_complete("1, 2, 3,")]
        self.assertGreater(len(pieces), 1)


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hypura", required=True)
    parser.add_argument("--source-dir", default=".")
    ARGS, rest = parser.parse_known_args()
    if not os.path.exists(os.path.join(ARGS.source_dir, "test-models", QWEN)):
        print(f"SKIP: no test-models/{QWEN} (scripts/fetch-models.sh)")
        return 77
    try:
        import langchain_ollama  # noqa: F401
        import llama_index.llms.ollama  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (scripts/setup.sh installs langchain-ollama, llama-index-llms-ollama)")
        return 77
    warnings.simplefilter("ignore", ResourceWarning)  # the clients' own unclosed sockets
    result = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2,
                           warnings="ignore").result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
