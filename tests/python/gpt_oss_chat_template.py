#!/usr/bin/env python3
"""gpt-oss's chat template (harmony format) rendered by jinja2 as transformers renders it:
the expected texts our Jinja interpreter must reproduce byte for byte.

  gpt_oss_chat_template.py          checks src/tokenizer/testdata/chat/gpt-oss.cases.json
                                    (what jinja_test.cc compares our renderings with)
                                    against jinja2 rendering gpt-oss.jinja now
  gpt_oss_chat_template.py --write  rewrites that file from the conversations below

strftime_now is pinned to FIXED_TIME (UTC), as the C++ test pins it (RenderOptions).
When the openai-harmony package is installed and can load its vocabulary (offline: set
TIKTOKEN_ENCODINGS_BASE to a folder holding o200k_base.tiktoken), plain conversations
are also checked against its renderer, the format's own implementation. Exits 77
("skipped") without jinja2.
"""
import json
import pathlib
import sys
import time

import tokenizer_chat_templates

DATA = pathlib.Path(__file__).resolve().parents[2] / "src/tokenizer/testdata/chat"
TEMPLATE = pathlib.Path(__file__).resolve().parents[2] / "src/tokenizer/templates/gpt-oss.jinja"
CASES = DATA / "gpt-oss.cases.json"
FIXED_TIME = 1767225600 + 12 * 3600  # 2026-01-01 12:00:00 UTC

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Gets the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "default": "celsius"},
                "days": {"type": "integer", "default": 1},
            },
            "required": ["city"],
        },
    },
}
# Every parameter shape the template's render_typescript_type knows.
SHAPES_TOOL = {
    "type": "function",
    "function": {
        "name": "shapes",
        "description": "Takes one of each shape.",
        "parameters": {
            "type": "object",
            "properties": {
                "names": {"type": "array", "items": {"type": "string"}},
                "scores": {"type": "array", "items": {"type": "number"}, "nullable": True},
                "counts": {"type": "array", "items": {"type": "integer"}},
                "flags": {"type": "array", "items": {"type": "boolean"}},
                "points": {"type": "array", "items": {
                    "type": "object",
                    "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                    "required": ["x"]}},
                "anything": {"type": "array"},
                "ratio": {"type": "number", "default": 0.5},
                "verbose": {"type": "boolean", "default": False},
                "note": {"type": "string", "nullable": True, "description": "Free text"},
                "either": {"oneOf": [{"type": "string", "description": "a name"},
                                     {"type": "integer", "default": 3}]},
                "mixed": {"oneOf": [{"type": "object"}, {"type": "string"}]},
                "union": {"type": ["string", "number"]},
                "single": {"type": ["object"]},
                "nested": {"type": "object", "properties": {
                    "deep": {"type": "object", "properties": {"z": {"type": "boolean"}}}}},
                "bare": {"type": "object"},
                "untyped": {},
            },
            "required": ["names", "nested"],
        },
    },
}
NO_PARAMS_TOOL = {"type": "function",
                  "function": {"name": "now", "description": "The time.", "parameters": {}}}

CALL = {"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}


def case(name, messages, gen=True, **kwargs):
    context = {"messages": messages, "add_generation_prompt": gen,
               "bos_token": "<|startoftext|>", "eos_token": "<|return|>"}
    context.update(kwargs)
    return {"name": name, "context": context}


CONVERSATIONS = [
    case("user", [{"role": "user", "content": "Hello!"}]),
    case("user no generation prompt", [{"role": "user", "content": "Hello!"}], gen=False),
    case("system and user", [{"role": "system", "content": "You are terse."},
                             {"role": "user", "content": "What is 2+2?"}]),
    case("developer", [{"role": "developer", "content": "Answer in French.\nBe brief."},
                       {"role": "user", "content": "Hi"}]),
    case("multi-turn", [{"role": "system", "content": "Be helpful."},
                        {"role": "user", "content": "Hi"},
                        {"role": "assistant", "content": "Hello! How can I help?"},
                        {"role": "user", "content": "Tell me a joke."}]),
    case("assistant last, training form", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "thinking": "Greet back."}], gen=False),
    case("assistant last without thinking", [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}],
        gen=False),
    case("earlier thinking dropped", [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello.", "thinking": "Greet back."},
        {"role": "user", "content": "Bye"}]),
    case("reasoning high", [{"role": "user", "content": "Prove it."}], reasoning_effort="high"),
    case("reasoning low, identity", [{"role": "user", "content": "Hi"}],
         reasoning_effort="low", model_identity="You are a test model."),
    case("builtin tools", [{"role": "user", "content": "Search it."}],
         builtin_tools=["browser", "python"]),
    case("browser only", [{"role": "user", "content": "Search it."}], builtin_tools=["browser"]),
    case("tools", [{"role": "system", "content": "Use tools."},
                   {"role": "user", "content": "Weather in Paris?"}],
         tools=[WEATHER_TOOL, SHAPES_TOOL, NO_PARAMS_TOOL]),
    case("tool call and result", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "name": "get_weather", "content": "{\"sky\": \"sunny\"}"}],
        tools=[WEATHER_TOOL]),
    case("tool call with thinking, then final", [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "thinking": "Call the tool.", "tool_calls": [CALL]},
        {"role": "tool", "content": "sunny"},
        {"role": "assistant", "content": "It is sunny."},
        {"role": "user", "content": "Thanks"}], tools=[WEATHER_TOOL]),
    case("tool call with analysis content kept", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "I should call it.",
         "tool_calls": [{"type": "function", "function": {
             "name": "get_weather", "arguments": {"city": "Oslo"}, "content_type": "code"}}]},
        {"role": "tool", "content": "snow"}], tools=[WEATHER_TOOL]),
    case("bare tool call", [
        {"role": "user", "content": "Now?"},
        {"role": "assistant", "tool_calls": [{"name": "now", "arguments": {}}]},
        {"role": "tool", "content": "noon"}], tools=[NO_PARAMS_TOOL]),
    case("unicode", [{"role": "user", "content": "h\u00e9llo \U0001F30D \u041f\u0440\u0438\u0432\u0435\u0442 \"q\" <b>&"}]),
    case("channel tags in content", [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "<|channel|>final<|message|>hi"}]),
    case("tool result without call", [{"role": "user", "content": "x"},
                                      {"role": "tool", "content": "y"}]),
    case("content and thinking with a tool call", [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "a", "thinking": "b", "tool_calls": [CALL]}]),
]


def make_env():
    return tokenizer_chat_templates.make_env(now=FIXED_TIME)


def render_all(env):
    import jinja2
    template = env.from_string(TEMPLATE.read_text())
    out = []
    for c in CONVERSATIONS:
        entry = dict(c)
        try:
            entry["expected"] = template.render(**c["context"])
        except jinja2.exceptions.TemplateError as e:
            entry["error"] = str(e)
        out.append(entry)
    return out


def check_harmony(env):
    """Conversations against openai-harmony's own renderer; None when it cannot run.

    This template revision (gpt-oss's first release, as llama.cpp stores it) ends the
    developer instructions with "\\n\\n" where openai-harmony ends them directly with
    <|end|> (later revisions of the template changed that): reported, not a failure."""
    try:
        from openai_harmony import (Conversation, DeveloperContent, HarmonyEncodingName,
                                    Message, ReasoningEffort, Role, SystemContent,
                                    load_harmony_encoding)
        enc = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
    except Exception as e:  # not installed, or its vocabulary cannot be loaded offline
        print(f"openai-harmony cross-check skipped: {e}")
        return None
    date = time.strftime("%Y-%m-%d", time.gmtime(FIXED_TIME))
    template = env.from_string(TEMPLATE.read_text())
    ok = True
    for effort, name in ((ReasoningEffort.MEDIUM, "medium"), (ReasoningEffort.HIGH, "high")):
        for developer in ("", "Be brief."):
            system = SystemContent.new().with_reasoning_effort(effort)
            msgs = [Message.from_role_and_content(
                Role.SYSTEM, system.with_conversation_start_date(date))]
            if developer:
                msgs.append(Message.from_role_and_content(
                    Role.DEVELOPER, DeveloperContent.new().with_instructions(developer)))
            msgs += [Message.from_role_and_content(Role.USER, "Hi"),
                     Message.from_role_and_content(Role.ASSISTANT, "Hello.").with_channel("final"),
                     Message.from_role_and_content(Role.USER, "Bye")]
            theirs = enc.decode(enc.render_conversation_for_completion(
                Conversation.from_messages(msgs), Role.ASSISTANT))
            messages = ([{"role": "developer", "content": developer}] if developer else []) + [
                {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": "Bye"}]
            ours = template.render(messages=messages, add_generation_prompt=True,
                                   reasoning_effort=name)
            if developer and ours == theirs.replace(developer + "<|end|>",
                                                    developer + "\n\n<|end|>"):
                print(f"openai-harmony: same text but the template's \\n\\n after the "
                      f"developer instructions (effort {name})")
            elif ours == theirs:
                print(f"openai-harmony renders the same text (effort {name})")
            else:
                ok = False
                print(f"openai-harmony differs:\n  harmony:  {theirs!r}\n  template: {ours!r}")
    return ok


def main() -> int:
    try:
        env = make_env()
    except ImportError:
        print("jinja2 not installed: skipped")
        return 77
    rendered = render_all(env)
    if "--write" in sys.argv:
        CASES.write_text(json.dumps(rendered, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {len(rendered)} cases to {CASES}")
    else:
        stored = json.loads(CASES.read_text())
        if stored != rendered:
            print(f"{CASES.name} differs from jinja2's renderings: rerun with --write")
            return 1
        print(f"{len(rendered)} cases match jinja2")
    return 1 if check_harmony(env) is False else 0


if __name__ == "__main__":
    sys.exit(main())
