#!/usr/bin/env python3
"""The JSON-schema grammar against an independent validator: Python's `jsonschema`.

Random schemas (fixed seed) built from every supported keyword; for each, documents made
from the schema (valid by construction) and mutations of them (mostly invalid), each
written in one of the spellings the grammar's language covers (compact, ", "/": ", or
indented). Objects with "properties" and no "additionalProperties" are read as closed, as
the grammar (and Ollama's) reads them. For every document the grammar's verdict (hypura_grammar_tool check) must equal
jsonschema's; and every document the automaton generates by random walks must parse and
validate.

  test_jsonschema.py --tool BUILD/tests/grammar/hypura_grammar_tool [--schemas N] [--seed S]

Exits 77 (skipped) when jsonschema is not installed (scripts/setup.sh installs it).
"""
import argparse
import json
import random
import string
import subprocess
import sys

try:
    import jsonschema
except ImportError:
    print("jsonschema is not installed: skipped (scripts/setup.sh installs it)")
    sys.exit(77)

KEY_CHARS = string.ascii_letters + string.digits + "_- "
TEXT = ["", "a", "hello", "é", "naïve café", "line\nbreak", "tab\t", "quote\"", "back\\slash",
        "€", "𝄞 clef", "x" * 30, "\u0001ctl"]


def rand_key(rng):
    return "".join(rng.choice(KEY_CHARS) for _ in range(rng.randint(1, 6)))


class SchemaGen:
    """Random schemas; $defs entries are collected and put at the root."""

    def __init__(self, rng):
        self.rng = rng
        self.defs = {}

    def scalar_enum(self):
        r = self.rng
        pool = ["red", "green", "blue", "a b", 0, 1, 12, -3, True, False, None, 2.5]
        return r.sample(pool, r.randint(1, 4))

    def schema(self, depth):
        r = self.rng
        kinds = ["string", "integer", "number", "boolean", "null", "enum", "const"]
        if depth < 3:
            kinds += ["object", "object", "array", "anyOf", "oneOf", "ref", "typelist"]
        k = r.choice(kinds)
        if k == "string":
            s = {"type": "string"}
            if r.random() < 0.3:
                s["minLength"] = r.randint(0, 3)
            if r.random() < 0.3:
                s["maxLength"] = r.randint(s.get("minLength", 0), 8)
            return s
        if k in ("integer", "number", "boolean", "null"):
            return {"type": k}
        if k == "enum":
            return {"enum": self.scalar_enum()}
        if k == "const":
            return {"const": r.choice(["x", 7, True, None, "const value"])}
        if k == "typelist":
            return {"type": r.sample(["string", "integer", "null", "boolean"], 2)}
        if k == "object":
            props = {rand_key(r): self.schema(depth + 1) for _ in range(r.randint(0, 4))}
            s = {"type": "object", "properties": props}
            names = list(props)
            if names and r.random() < 0.7:
                s["required"] = r.sample(names, r.randint(1, len(names)))
            ap = r.random()
            if ap < 0.4:
                s["additionalProperties"] = False
            elif ap < 0.6:
                s["additionalProperties"] = self.schema(depth + 1)
            if r.random() < 0.3:
                s["title"] = "T"
                s["description"] = "an annotation"
            return s
        if k == "array":
            s = {"type": "array", "items": self.schema(depth + 1)}
            if r.random() < 0.4:
                s["minItems"] = r.randint(0, 2)
            if r.random() < 0.4:
                s["maxItems"] = r.randint(s.get("minItems", 0), 4)
            return s
        if k == "anyOf":
            return {"anyOf": [self.schema(depth + 1) for _ in range(r.randint(1, 3))]}
        if k == "oneOf":  # alternatives of disjoint types, or objects told apart by a const
            if r.random() < 0.5:
                types = r.sample(["string", "integer", "boolean", "null", "array"], r.randint(2, 3))
                return {"oneOf": [{"type": t} for t in types]}
            alts = []
            for tag in r.sample(["cat", "dog", "fish"], 2):
                alts.append({"type": "object", "properties": {"kind": {"const": tag},
                                                              "n": {"type": "integer"}},
                             "required": ["kind"], "additionalProperties": r.random() < 0.5})
            return {"oneOf": alts}
        name = "D%d" % len(self.defs)
        self.defs[name] = True  # reserved before the definition's own $refs take names
        self.defs[name] = self.schema(depth + 1)
        return {"$ref": "#/$defs/" + name}

    def root(self):
        s = self.schema(0)
        if self.defs:
            s = {"allOf": [s], "$defs": self.defs} if "$ref" in s or "anyOf" in s or "oneOf" in s \
                else dict(s, **{"$defs": self.defs})
        return s


class DocGen:
    """Instances of a schema (valid when the schema allows one), resolving $refs."""

    def __init__(self, rng, root):
        self.rng = rng
        self.root = root

    def resolve(self, s):
        while isinstance(s, dict) and ("$ref" in s or "allOf" in s):
            if "$ref" in s:
                s = self.root["$defs"][s["$ref"].split("/")[-1]]
            else:
                s = s["allOf"][0]
        return s

    def value(self, s, depth=0):
        r = self.rng
        s = self.resolve(s)
        if s is True or s == {} or depth > 6:
            return r.choice([1, "s", None, True, [], {}])
        if "enum" in s:
            return r.choice(s["enum"])
        if "const" in s:
            return s["const"]
        if "anyOf" in s or "oneOf" in s:
            return self.value(r.choice(s.get("anyOf") or s.get("oneOf")), depth + 1)
        t = s.get("type")
        if isinstance(t, list):
            t = r.choice(t)
        if t == "string":
            lo, hi = s.get("minLength", 0), s.get("maxLength", 12)
            text = r.choice(TEXT)
            while len(text) < lo:
                text += "z"
            return text[:hi]
        if t == "integer":
            return r.choice([0, 1, -7, 42, 10**12, -10**17])
        if t == "number":
            return r.choice([0, 0.5, -2.25, 1e-05, 3.0, 1e20, 123.456])
        if t == "boolean":
            return r.random() < 0.5
        if t == "null":
            return None
        if t == "array":
            lo, hi = s.get("minItems", 0), s.get("maxItems", 3)
            return [self.value(s.get("items", True), depth + 1) for _ in range(r.randint(lo, max(lo, hi)))]
        if t == "object":
            out = {}
            props = s.get("properties", {})
            for name, sub in props.items():
                if name in s.get("required", []) or r.random() < 0.5:
                    out[name] = self.value(sub, depth + 1)
            ap = s.get("additionalProperties", "properties" not in s)
            if ap is not False and r.random() < 0.3:
                key = rand_key(r)
                if key not in props:
                    out[key] = self.value(ap, depth + 1)
            items = list(out.items())
            r.shuffle(items)
            return dict(items)
        return None

    def mutate(self, v):
        r = self.rng
        choice = r.randint(0, 5)
        if isinstance(v, dict) and v and choice < 2:
            v = dict(v)
            v.pop(r.choice(list(v)))
            return v
        if isinstance(v, dict) and choice < 4:
            v = dict(v)
            v[rand_key(r) if choice == 2 else r.choice(list(v) or ["k"])] = r.choice([1, "x", None, [1]])
            return v
        if isinstance(v, list) and v:
            return v + [r.choice([1, "x", None, {}])] if choice < 3 else v[:-1]
        return r.choice([1, 2.5, "x", None, True, [], {}, "a longer string than eight"])


def narrowed(s):
    """The schema as the grammar reads it: an object with "properties" and no
    "additionalProperties" takes no other keys (as Ollama's grammar does)."""
    if isinstance(s, list):
        return [narrowed(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: (v if k in ("enum", "const") else narrowed(v)) for k, v in s.items()}
    if "properties" in s and "additionalProperties" not in s:
        out["additionalProperties"] = False
    return out


def spell(rng, v):
    """A JSON text of v in a spelling the grammar's language covers."""
    ascii_only = rng.random() < 0.3 and "𝄞" not in json.dumps(v, ensure_ascii=False)
    style = rng.randint(0, 2)
    if style == 0:
        return json.dumps(v, ensure_ascii=ascii_only, separators=(",", ":"))
    if style == 1:
        return json.dumps(v, ensure_ascii=ascii_only)
    return json.dumps(v, ensure_ascii=ascii_only, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--schemas", type=int, default=300)
    ap.add_argument("--seed", type=int, default=18)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tool = subprocess.Popen([args.tool, "check"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    failures, compiled, n_docs, n_valid, n_walks = [], 0, 0, 0, 0
    for i in range(args.schemas):
        schema = SchemaGen(rng).root()
        gen = DocGen(rng, schema)
        values = [gen.value(schema) for _ in range(6)]
        values += [gen.mutate(v) for v in values[:4]]
        docs = [spell(rng, v) for v in values]
        tool.stdin.write(json.dumps({"schema": schema, "docs": docs, "walks": 3, "seed": i}) + "\n")
        tool.stdin.flush()
        out = json.loads(tool.stdout.readline())
        if "error" in out:
            failures.append(f"schema {i} did not compile: {out['error']}\n  {json.dumps(schema)}")
            continue
        compiled += 1
        validator = jsonschema.Draft202012Validator(narrowed(schema))
        for doc, accepted in zip(docs, out["accept"]):
            valid = validator.is_valid(json.loads(doc))
            n_docs += 1
            n_valid += valid
            if valid != accepted:
                failures.append(f"schema {i}: grammar {'accepts' if accepted else 'refuses'} a document "
                                f"jsonschema finds {'valid' if valid else 'invalid'}\n  schema {json.dumps(schema)}"
                                f"\n  doc {doc!r}")
        for doc in out["walks"]:
            n_walks += 1
            try:
                value = json.loads(doc)
            except ValueError as e:
                failures.append(f"schema {i}: generated text does not parse ({e}): {doc!r}")
                continue
            errors = list(validator.iter_errors(value))
            if errors:
                failures.append(f"schema {i}: generated document is invalid ({errors[0].message})\n"
                                f"  schema {json.dumps(schema)}\n  doc {doc!r}")
    tool.stdin.close()
    tool.wait()
    print(f"{compiled} schemas, {n_docs} documents ({n_valid} valid) compared with jsonschema, "
          f"{n_walks} generated documents validated; {len(failures)} failures")
    for f in failures[:20]:
        print(f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
