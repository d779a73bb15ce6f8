#!/usr/bin/env python3
"""Checks the hand-written expected chat renderings in src/tokenizer/testdata/chat/
against the templates themselves, rendered with jinja2 the way Hugging Face
transformers renders chat templates (trim_blocks, lstrip_blocks, loopcontrols).

The C++ test (src/tokenizer/chat_template_test.cc) compares our explicit renderers with
the same expected files, so together they show renderer == template; it also runs this
script (ChatTemplate.ExpectedTextsMatchJinja2). Needs jinja2 (scripts/setup.sh installs
it into .venv); exits 77 ("skipped") when it is missing.
"""
import pathlib
import sys

DATA = pathlib.Path(__file__).resolve().parents[2] / "src/tokenizer/testdata/chat"

# Same conversations as chat_template_test.cc.
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


def main() -> int:
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        print("jinja2 not installed: skipped")
        return 77

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    failures = 0
    checked = 0
    for expected_path in sorted(DATA.glob("*.txt")):
        name, conv = expected_path.stem.rsplit(".", 1)
        template = env.from_string((DATA / f"{name}.jinja").read_text())
        bos, eos, add_bos = SPECIAL.get(name, ("<s>", "</s>", True))
        messages = ([SYSTEM] if conv == "sys" else []) + TURNS
        got = template.render(messages=messages, add_generation_prompt=True,
                              bos_token=bos, eos_token=eos)
        # Like llama.cpp, a leading BOS is left to the tokenizer when it adds one itself.
        if add_bos and got.startswith(bos):
            got = got[len(bos):]
        want = expected_path.read_text()
        checked += 1
        if got != want:
            failures += 1
            print(f"MISMATCH {expected_path.name}:\n  template: {got!r}\n  expected: {want!r}")
    print(f"{checked} expected renderings checked, {failures} mismatches")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
