#!/usr/bin/env python3
"""Renders many conversations through every chat template in ../shared/text-fixtures with transformers' own
apply_chat_template code path (no torch needed) and writes the results as JSON for the C++ comparison test
(tests/text/test_jinja_goldens.cpp). Run live by ctest as a fixture:

    python tools/chat_template_goldens.py --fixtures ../shared/text-fixtures --out build/chat_template_goldens.json

A (template, conversation) pair whose rendering raises in Python is recorded as {"error": ...}; the C++
renderer must raise for it too.
"""
import argparse
import glob
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
import transformers  # noqa: E402
from transformers.utils import chat_template_utils as ctu  # noqa: E402

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "max_results": {"type": "integer", "default": 5},
            },
            "required": ["query"],
        },
    },
}
RICH_TOOL = {
    "type": "function",
    "function": {
        "name": "book",
        "description": "Book a table — any restaurant, any city.",
        "parameters": {
            "type": "object",
            "properties": {
                "guests": {"type": "integer", "minimum": 1, "maximum": 20},
                "ratio": {"type": "number", "default": 0.5, "maximum": 1e10},
                "vip": {"type": "boolean", "default": False},
                "note": {"type": ["string", "null"], "description": "Free text, e.g. \"no nuts\""},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["window", "quiet", "bar"]}},
                "when": {
                    "type": "object",
                    "properties": {"day": {"type": "string"}, "hour": {"type": "integer"}},
                    "required": ["day"],
                },
            },
            "required": ["guests", "when"],
        },
    },
}
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
}
TOOL_CALL_2 = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "search", "arguments": {"query": "Eiffel tower height", "max_results": 3}},
}

SYS = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! How are you?"}
A1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
U2 = {"role": "user", "content": "What's the weather in Paris?"}


def case(name, messages, tools=None, agp=True, **kwargs):
    return {"name": name, "messages": messages, "tools": tools, "add_generation_prompt": agp, "kwargs": kwargs}


CASES = [
    case("user", [U1]),
    case("user_no_gen", [U1], agp=False),
    case("system_user", [SYS, U1]),
    case("multi_turn", [SYS, U1, A1, U2]),
    case("multi_turn_final_assistant", [U1, A1], agp=False),
    case("unicode", [{"role": "user", "content": "Grüße 👋 日本語 \"q\" 'single' <b>&amp;</b> \\ back\n\tline\u2028end"}]),
    case("tools", [SYS, U2], tools=[WEATHER_TOOL, SEARCH_TOOL]),
    case("tools_no_system", [U2], tools=[WEATHER_TOOL]),
    case(
        "tool_call_roundtrip",
        [
            U2,
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": '{"temp": 18, "sky": "clear"}'},
        ],
        tools=[WEATHER_TOOL],
    ),
    case(
        "tool_call_full",
        [
            SYS,
            U2,
            {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL, TOOL_CALL_2]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18C, clear"},
            {"role": "tool", "tool_call_id": "call_2", "name": "search", "content": "330 m"},
            {"role": "assistant", "content": "It is 18C and clear; the tower is 330 m tall."},
            {"role": "user", "content": "Thanks!"},
        ],
        tools=[WEATHER_TOOL, SEARCH_TOOL],
    ),
    case(
        "reasoning",
        [
            U1,
            {"role": "assistant", "content": "Fine.", "reasoning_content": "The user greets me.\nBe brief."},
            U2,
        ],
    ),
    case(
        "reasoning_last",
        [U1, {"role": "assistant", "content": "Fine.", "reasoning_content": "Greeting."}],
        agp=False,
    ),
    case("thinking_off", [SYS, U1], enable_thinking=False),
    case("thinking_on", [U1, A1, U2], enable_thinking=True),
    case("reasoning_effort", [SYS, U2], reasoning_effort="high"),
    case(
        "content_parts",
        [
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
        ],
    ),
    case(
        "tool_call_string_args",
        [
            U2,
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_9", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Zürich", "unit": "celsius"}'}}]},
            {"role": "tool", "tool_call_id": "call_9", "content": "12°C"},
        ],
        tools=[WEATHER_TOOL],
        agp=False,
    ),
    case(
        "rich_tool_schema",
        [SYS, {"role": "user", "content": "Book it."}],
        tools=[RICH_TOOL, WEATHER_TOOL],
    ),
    case(
        "nested_tool_args",
        [
            {"role": "user", "content": "Book a table."},
            {"role": "assistant", "tool_calls": [{"id": "c3", "type": "function", "function": {
                "name": "book", "arguments": {"guests": 4, "ratio": 0.5, "vip": True, "note": None,
                                              "tags": ["window", "quiet"], "when": {"day": "Fri", "hour": 20}}}}]},
            {"role": "tool", "tool_call_id": "c3", "content": "ok"},
            {"role": "assistant", "content": "Booked ✓"},
        ],
        tools=[RICH_TOOL],
        agp=False,
    ),
    case("thinking_field", [U1, {"role": "assistant", "content": "Hi.", "thinking": "Short."}, U2]),
    case("reasoning_field", [U1, {"role": "assistant", "content": "Hi.", "reasoning": "Quick."}, U2]),
    case("jinja_like_content", [{"role": "user", "content": "{{ 1 + 1 }} {% if %} {# x #} </s> <|im_end|>"}]),
    case("empty_content", [SYS, {"role": "user", "content": ""}]),
    case("system_only", [SYS]),
    case(
        "long_reasoning_chat",
        [
            SYS,
            U1,
            {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
            U2,
            {"role": "assistant", "content": "A2", "reasoning_content": "R2\n\nmore"},
            {"role": "user", "content": "And tomorrow?"},
        ],
        enable_thinking=True,
    ),
    case("effort_low_tools", [U2], tools=[WEATHER_TOOL], reasoning_effort="low", enable_thinking=False),
    case("gpt_oss_kwargs", [SYS, U1], builtin_tools=["browser", "python"], model_identity="You are Tester.",
         reasoning_effort="medium"),
    case("date_string", [U1], date_string="26 Jul 2024"),
    case(
        "documents",
        [U2],
        documents=[{"title": "Paris", "text": "Paris is the capital of France."},
                   {"title": "Weather", "text": "Sunny, 21°C."}],
    ),
    case("named_user", [{"role": "user", "content": "Hey", "name": "alice"}]),
    case(
        "image_part",
        [{"role": "user", "content": [{"type": "image", "url": "https://example.com/cat.png"},
                                      {"type": "text", "text": "What is this?"}]}],
    ),
    case("developer_role", [{"role": "developer", "content": "Answer in French."}, U1]),
    case("system_mid_conversation", [U1, A1, {"role": "system", "content": "Be brief."}, U2]),
    case("empty_tools", [U1], tools=[]),
    case(
        "tool_result_parts",
        [
            U2,
            {"role": "assistant", "content": "Checking.", "reasoning_content": "Need the weather tool.",
             "tool_calls": [TOOL_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
             "content": [{"type": "text", "text": "18C"}]},
        ],
        tools=[WEATHER_TOOL],
        enable_thinking=True,
    ),
    case("bad_roles", [U1, U1]),
    case("assistant_first", [A1, U1]),
]


def special_tokens_from_config(config):
    tokens = {}
    for name in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = config.get(name)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            tokens[name] = v
    return tokens


def dir_template(path):
    """Mirrors how transformers loads a tokenizer dir: chat_template.jinja wins over tokenizer_config.json."""
    config_path = os.path.join(path, "tokenizer_config.json")
    config = json.load(open(config_path, encoding="utf-8")) if os.path.exists(config_path) else {}
    jinja_path = os.path.join(path, "chat_template.jinja")
    templates = None
    if os.path.exists(jinja_path):
        templates = open(jinja_path, encoding="utf-8").read()
    elif isinstance(config.get("chat_template"), str):
        templates = config["chat_template"]
    elif isinstance(config.get("chat_template"), list):
        templates = {t["name"]: t["template"] for t in config["chat_template"]}
    return templates, special_tokens_from_config(config)


def collect(fixtures):
    entries = []
    for path in sorted(glob.glob(os.path.join(fixtures, "templates", "**", "*.jinja"), recursive=True)):
        entries.append({"id": os.path.relpath(path, fixtures), "kind": "file", "path": path,
                        "source": open(path, encoding="utf-8").read(),
                        "special": {"bos_token": "<s>", "eos_token": "</s>"}})
    for path in sorted(glob.glob(os.path.join(fixtures, "nemotron", "*.jinja"))):
        entries.append({"id": os.path.relpath(path, fixtures), "kind": "file", "path": path,
                        "source": open(path, encoding="utf-8").read(),
                        "special": {"bos_token": "<s>", "eos_token": "</s>"}})
    jsonl = os.path.join(fixtures, "templates", "ollama", "templates.jsonl")
    if os.path.exists(jsonl):
        for i, line in enumerate(open(jsonl, encoding="utf-8")):
            (name, source), = json.loads(line).items()
            entries.append({"id": f"templates/ollama/templates.jsonl#{i}-{name}", "kind": "source", "path": jsonl,
                            "source": source, "special": {"bos_token": "<s>", "eos_token": "</s>"}})
    for config in sorted(glob.glob(os.path.join(fixtures, "**", "tokenizer_config.json"), recursive=True)):
        d = os.path.dirname(config)
        templates, special = dir_template(d)
        if templates is None:
            continue
        entries.append({"id": os.path.relpath(d, fixtures) + "/", "kind": "dir", "path": d, "source": templates,
                        "special": special})
    return entries


def render(entry, c):
    templates = entry["source"]
    if isinstance(templates, dict):  # named templates: transformers' get_chat_template
        templates = templates["tool_use"] if c["tools"] is not None and "tool_use" in templates else templates["default"]
    conversations = [ctu._normalize_chat_messages(json.loads(json.dumps(c["messages"])))]
    kwargs = dict(c["kwargs"])
    documents = kwargs.pop("documents", None)
    template_kwargs = {**entry["special"], **kwargs}
    rendered, _ = ctu.render_jinja_template(
        conversations=conversations,
        tools=c["tools"],
        documents=documents,
        chat_template=templates,
        add_generation_prompt=c["add_generation_prompt"],
        **template_kwargs,
    )
    return rendered[0]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", default=os.path.join(here, "..", "..", "shared", "text-fixtures"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = {"transformers": transformers.__version__, "cases": CASES, "templates": []}
    n_ok = n_err = 0
    for entry in collect(os.path.abspath(args.fixtures)):
        results = []
        for c in CASES:
            try:
                results.append({"expected": render(entry, c)})
                n_ok += 1
            except Exception as e:  # the template rejects this conversation: ours must raise too
                results.append({"error": f"{type(e).__name__}: {e}"[:300]})
                n_err += 1
        rec = {"id": entry["id"], "kind": entry["kind"], "path": entry["path"], "special": entry["special"],
               "results": results}
        if entry["kind"] == "source":
            rec["source"] = entry["source"]
        out["templates"].append(rec)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"{len(out['templates'])} templates x {len(CASES)} conversations: {n_ok} rendered, {n_err} raised",
          file=sys.stderr)


if __name__ == "__main__":
    main()
