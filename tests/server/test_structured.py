#!/usr/bin/env python3
"""Issue 18 item 2: structured output. `format: "json"`, `format: {schema}` and OpenAI's
`response_format` are enforced by constrained sampling, so every reply parses and
validates (Python's jsonschema) and ends with done_reason "stop" when the document is
whole. Official `ollama` and `openai` clients against `hypura serve` on Qwen2.5-Coder-0.5B.

  test_structured.py --hypura BUILD/hypura --source-dir .

Skipped (exit 77) without test-models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf or jsonschema.
"""
import argparse
import json
import os
import sys
import unittest
from typing import List, Literal, Optional, Union

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_compat as compat  # noqa: E402  (ServedModel, QWEN)

try:
    import jsonschema
except ImportError:
    jsonschema = None
import ollama  # noqa: E402
import openai  # noqa: E402
import pydantic  # noqa: E402


class Address(pydantic.BaseModel):
    street: str
    city: str
    country: Optional[str] = None


class Person(pydantic.BaseModel):
    name: str
    age: int
    languages: List[str]
    address: Address


class Cat(pydantic.BaseModel):
    kind: Literal["cat"]
    lives: int


class Dog(pydantic.BaseModel):
    kind: Literal["dog"]
    good: bool


class Pets(pydantic.BaseModel):
    pets: List[Union[Cat, Dog]]


# (schema, the request's question) by name.
SCHEMAS = {
    "person": (Person.model_json_schema(),  # pydantic: $defs/$ref, Optional (anyOf null), titles
               "Invent a person: name, age, two languages and an address (street, city). Reply in JSON."),
    "pets": (Pets.model_json_schema(),      # pydantic: a list of a union of models
             "List two pets, a cat with its lives and a dog that is good. Reply in JSON."),
    "enum and bounded array": ({
        "type": "object",
        "properties": {"colour": {"enum": ["red", "green", "blue"]},
                       "scores": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 3},
                       "ok": {"type": "boolean"}, "nothing": {"type": "null"}},
        "required": ["colour", "scores", "ok", "nothing"], "additionalProperties": False},
        "Pick a colour and two scores between 0 and 1. Reply in JSON."),
    "array root of short strings": ({"type": "array", "items": {"type": "string", "maxLength": 12},
                                     "minItems": 3, "maxItems": 3}, "Name three fruits, as a JSON array."),
    "anyOf scalar": ({"anyOf": [{"type": "integer"}, {"type": "string", "minLength": 1, "maxLength": 5}]},
                     "How many legs does a spider have? Reply in JSON."),
}

# Bounded strings keep sampled replies short.
SMALL = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 24},
                                          "age": {"type": "integer"},
                                          "city": {"type": "string", "maxLength": 24}},
         "required": ["name", "age", "city"]}
SMALL_PROMPT = "Invent a person with a name, an age and a city. Reply in JSON."
JSON_PROMPT = "Reply with a JSON object with the keys name and age of a fictional person."


class StructuredTests(compat.ServedModel):
    MODEL_FILE = compat.QWEN
    SERVE_ARGS = ("--context", "2048", "--alias", "qwen")

    def check(self, text, schema):
        value = json.loads(text)
        if schema is not None:
            jsonschema.validate(value, schema)
        return value

    def chat(self, content):
        return [{"role": "user", "content": content}]

    def test_ollama_format_json(self):
        opts = {"temperature": 0, "num_predict": 120}
        since = len(self.s.lines)
        last = self.s.ollama.chat(self.model, messages=self.chat(JSON_PROMPT), format="json", options=opts)
        self.assertEqual(last.done_reason, "stop", last.message.content)
        self.assertIsInstance(json.loads(last.message.content), dict)
        parts = list(self.s.ollama.chat(self.model, messages=self.chat(JSON_PROMPT), format="json", stream=True,
                                        options=opts))
        self.assertEqual(parts[-1].done_reason, "stop")
        self.assertEqual("".join(p.message.content for p in parts), last.message.content)
        r = self.s.ollama.generate(self.model, JSON_PROMPT, format="json", options=opts)
        self.assertEqual(r.done_reason, "stop")
        self.assertIsInstance(json.loads(r.response), dict)
        # The log line says what the masks cost per token.
        found = self.s.wait_log(r"mask=([0-9.]+)ms/token", since)
        self.assertTrue(found, self.s.log())
        print(f"\n  mask {found[-1]} ms/token (server log)", file=sys.stderr)

    def test_ollama_schemas(self):
        for name, (schema, prompt) in SCHEMAS.items():
            with self.subTest(schema=name):
                r = self.s.ollama.chat(self.model, messages=self.chat(prompt), format=schema,
                                       options={"temperature": 0, "num_predict": 200})
                self.assertEqual(r.done_reason, "stop", r.message.content)
                self.check(r.message.content, schema)
        for name in ("person", "anyOf scalar"):
            schema, prompt = SCHEMAS[name]
            g = self.s.ollama.generate(self.model, prompt, format=schema, options={"temperature": 0, "num_predict": 200})
            self.assertEqual(g.done_reason, "stop", g.response)
            self.check(g.response, schema)
        Person.model_validate_json(self.s.ollama.chat(self.model, messages=self.chat(SCHEMAS["person"][1]),
                                                      format=Person.model_json_schema(),
                                                      options={"temperature": 0, "num_predict": 200}).message.content)

    def test_sampling_after_the_mask(self):
        # Temperature, top-k and top-p pick among the allowed tokens only: every draw validates.
        texts = set()
        for seed in range(3):
            r = self.s.ollama.chat(self.model, messages=self.chat(SMALL_PROMPT), format=SMALL,
                                   options={"temperature": 1.2, "top_k": 60, "top_p": 0.98, "seed": seed,
                                            "num_predict": 120})
            self.assertEqual(r.done_reason, "stop", r.message.content)
            self.check(r.message.content, SMALL)
            texts.add(r.message.content)
        self.assertGreater(len(texts), 1)  # sampled, not greedy

    def test_openai_response_format(self):
        schema, prompt = SCHEMAS["enum and bounded array"]
        c = self.s.openai.chat.completions.create(
            model=self.model, messages=self.chat(prompt), temperature=0, max_tokens=200, response_format={"type": "json_schema",
                                             "json_schema": {"name": "pick", "schema": schema, "strict": True}})
        self.assertEqual(c.choices[0].finish_reason, "stop")
        self.check(c.choices[0].message.content, schema)
        chunks = list(self.s.openai.chat.completions.create(
            model=self.model, messages=self.chat(JSON_PROMPT), temperature=0, max_tokens=120, stream=True,
            response_format={"type": "json_object"}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual([ch.choices[0].finish_reason for ch in chunks if ch.choices][-1], "stop")
        self.assertIsInstance(json.loads(text), dict)
        comp = self.s.openai.completions.create(model=self.model, prompt="A JSON object with a cat's name and age: ",
                                                max_tokens=120, temperature=0,
                                                extra_body={"response_format": {"type": "json_object"}})
        self.assertEqual(comp.choices[0].finish_reason, "stop")
        self.assertIsInstance(json.loads(comp.choices[0].text), dict)

    def test_openai_parse_with_pydantic(self):
        # The OpenAI client's structured-output helper sends a strict json_schema built from
        # the model class and parses the reply into it.
        parse = getattr(self.s.openai.chat.completions, "parse", None)
        if parse is None:
            parse = self.s.openai.beta.chat.completions.parse
        c = parse(model=self.model, messages=self.chat(SCHEMAS["pets"][1]), response_format=Pets,
                  temperature=0, max_tokens=200)
        self.assertIsInstance(c.choices[0].message.parsed, Pets)

    def test_unsupported_keywords_are_400s(self):
        bad = {"type": "object", "properties": {"d": {"type": "string", "pattern": "^[0-9]+$"}}}
        with self.assertRaises(ollama.ResponseError) as e:
            self.s.ollama.chat(self.model, messages=self.chat("x"), format=bad)
        self.assertEqual(e.exception.status_code, 400)
        self.assertIn('"pattern" at #/properties/d is not supported', str(e.exception))
        with self.assertRaises(openai.BadRequestError) as e2:
            self.s.openai.chat.completions.create(
                model=self.model, messages=self.chat("x"),
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}})
        self.assertIn("pattern", str(e2.exception))

    def test_cut_reply_is_length(self):
        r = self.s.ollama.chat(self.model, messages=self.chat(SMALL_PROMPT), format=SMALL,
                               options={"temperature": 0, "num_predict": 5})
        self.assertEqual(r.done_reason, "length")
        self.assertEqual(r.eval_count, 5)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hypura", required=True)
    parser.add_argument("--source-dir", default=".")
    compat.ARGS, rest = parser.parse_known_args()
    if jsonschema is None:
        print("SKIP: jsonschema is not installed (scripts/setup.sh)")
        return 77
    if not compat.model_path(compat.QWEN):
        print("SKIP: no " + compat.QWEN + " (scripts/fetch-models.sh)")
        return 77
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
