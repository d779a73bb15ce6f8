#!/usr/bin/env python3
"""Chat templates rendered by jinja2 the way Hugging Face transformers renders them
(trim_blocks, lstrip_blocks, loopcontrols), compared with our explicit renderers.

  tokenizer_chat_templates.py            checks the hand-written expected texts in
                                         src/tokenizer/testdata/chat/ against the templates
  tokenizer_chat_templates.py CASES.json checks our renderer's outputs listed in CASES.json
                                         ([{template, bos, eos, add_bos, messages,
                                         add_generation_prompt, ours}, ...]) against jinja2

Both modes run from src/tokenizer/chat_template_test.cc. A case whose template raises
(e.g. a system message where the template forbids one) is skipped. Like llama.cpp, a BOS
the template writes first is dropped when the tokenizer adds BOS itself (add_bos).
Needs jinja2 (scripts/setup.sh installs it into .venv); exits 77 ("skipped") without it.
"""
import json
import pathlib
import sys

DATA = pathlib.Path(__file__).resolve().parents[2] / "src/tokenizer/testdata/chat"

# The conversation of the expected files (same as chat_template_test.cc).
SYSTEM = {"role": "system", "content": "You are terse."}
TURNS = [
    {"role": "user", "content": "Hello, who are you?\n"},
    {"role": "assistant", "content": " I am a model. "},
    {"role": "user", "content": "What is 2+2?"},
]
# bos, eos, add_bos_token per template (the real models' values where we have them).
SPECIAL = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", True),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>", True),
    "gemma3": ("<bos>", "<eos>", True),
    "smollm2": ("<|im_start|>", "<|im_end|>", False),
    "qwen2.5": ("<|endoftext|>", "<|im_end|>", False),
    "phi3-mini": ("<s>", "<|endoftext|>", True),
    "phi3.5": ("<s>", "<|endoftext|>", True),
}


def make_env(now=None):
    """transformers' template environment; now: a fixed time for strftime_now (seconds
    since the epoch, rendered in UTC), the local clock if None."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    # transformers' own tojson (keys kept in order, no HTML escaping) and strftime_now.
    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        import datetime
        if now is not None:
            return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(fmt)
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, messages, add_generation_prompt, bos, eos, add_bos):
    got = env.from_string(template).render(messages=messages,
                                           add_generation_prompt=add_generation_prompt,
                                           bos_token=bos, eos_token=eos)
    if add_bos and got.startswith(bos):
        got = got[len(bos):]
    return got


def check_expected_files(env):
    failures = checked = 0
    for expected_path in sorted(DATA.glob("*.txt")):
        name, conv = expected_path.stem.rsplit(".", 1)
        bos, eos, add_bos = SPECIAL.get(name, ("<s>", "</s>", True))
        messages = ([SYSTEM] if conv == "sys" else []) + TURNS
        got = render(env, (DATA / f"{name}.jinja").read_text(), messages, True, bos, eos, add_bos)
        want = expected_path.read_text()
        checked += 1
        if got != want:
            failures += 1
            print(f"MISMATCH {expected_path.name}:\n  template: {got!r}\n  expected: {want!r}")
    print(f"{checked} expected renderings checked, {failures} mismatches")
    return failures, checked


def check_cases(env, path):
    import jinja2
    failures = checked = skipped = 0
    for case in json.loads(pathlib.Path(path).read_text()):
        try:
            got = render(env, case["template"], case["messages"], case["add_generation_prompt"],
                         case["bos"], case["eos"], case["add_bos"])
        except jinja2.exceptions.TemplateError:
            skipped += 1
            continue
        checked += 1
        if got != case["ours"]:
            failures += 1
            print(f"MISMATCH {case.get('name', '?')} gen={case['add_generation_prompt']} "
                  f"messages={case['messages']!r}:\n  jinja2: {got!r}\n  ours:   {case['ours']!r}")
    print(f"{checked} renderings compared ({skipped} rejected by their template), "
          f"{failures} mismatches")
    return failures, checked


def main() -> int:
    try:
        env = make_env()
    except ImportError:
        print("jinja2 not installed: skipped")
        return 77
    if len(sys.argv) > 1:
        failures, checked = check_cases(env, sys.argv[1])
    else:
        failures, checked = check_expected_files(env)
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
