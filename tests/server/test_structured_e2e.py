"""Structured outputs and logit_bias through the real `tensorfold serve` (demo model) with the official
openai SDK: response_format json_schema / json_object (chat, completions) and Responses text.format give
replies that parse and satisfy the schema (checked with the `jsonschema` package), streamed or not; what the
matcher does not support is a 400 that names it; logit_bias moves tokens and is validated."""
import json
import re

import jsonschema
import openai
import pytest
import requests

from serverutil import API_KEY

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "language": {"enum": ["python", "c++", "rust"]},
        "lines": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3},
        "tested": {"type": "boolean"},
    },
    "required": ["name", "language", "lines", "tags", "tested"],
    "additionalProperties": False,
}
ASK = [{"role": "user", "content": "Describe the function `json.loads` as JSON."}]


def person_format():
    return {"type": "json_schema", "json_schema": {"name": "function_card", "schema": PERSON, "strict": True}}


def test_chat_json_schema_replies_validate(client, model):
    """The demo model thinks first (<think>...</think>, free text) and then writes the constrained answer."""
    finished = thought = 0
    for temperature, seed in [(0, 1), (0.7, 2), (1.0, 3), (0.8, 4)]:
        r = client.chat.completions.create(model=model, messages=ASK, max_tokens=200, temperature=temperature,
                                           seed=seed, response_format=person_format())
        choice = r.choices[0]
        if choice.finish_reason != "stop":
            assert choice.finish_reason == "length"
            continue
        doc = json.loads(choice.message.content)
        jsonschema.validate(doc, PERSON)
        assert list(doc) == list(PERSON["properties"])  # the schema's order
        finished += 1
        thought += bool(getattr(choice.message, "reasoning_content", None))
    assert finished >= 2, "most constrained replies should close their document within 200 tokens"
    assert thought >= 1, "the reasoning block stays free text before the constrained answer"


def test_streamed_constrained_reply_equals_the_whole_one(client, model):
    whole = client.chat.completions.create(model=model, messages=ASK, max_tokens=120, temperature=0.9, seed=9,
                                           response_format=person_format())
    text = ""
    for chunk in client.chat.completions.create(model=model, messages=ASK, max_tokens=120, temperature=0.9, seed=9,
                                                response_format=person_format(), stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == whole.choices[0].message.content


def test_json_object_mode_chat_and_completions(client, model):
    r = client.chat.completions.create(model=model, messages=ASK, max_tokens=120, temperature=0.5, seed=5,
                                       response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.startswith("{")
    c = client.completions.create(model=model, prompt="config = ", max_tokens=80, temperature=0,
                                  extra_body={"response_format": {"type": "json_object"}})
    assert c.choices[0].text.startswith("{")
    if c.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(c.choices[0].text), dict)


def test_responses_text_format_json_schema(client, model):
    fmt = {"type": "json_schema", "name": "function_card", "schema": PERSON, "strict": True}
    r = client.responses.create(model=model, input=ASK[0]["content"], max_output_tokens=200, temperature=0,
                                text={"format": fmt})
    if r.status == "completed":
        jsonschema.validate(json.loads(r.output_text), PERSON)
    else:
        assert r.output_text.startswith("{")


@pytest.mark.parametrize("fmt, param, word", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}},
     "response_format.json_schema.schema", "uniqueItems"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 3}}},
     "response_format.json_schema.schema", "minimum"),
    ({"type": "json_schema"}, "response_format.json_schema", "json_schema"),
    ({"type": "grammar", "grammar": "root ::= \"a\""}, "response_format.type", "grammar"),
])
def test_unsupported_formats_are_a_clear_400(server, client, model, fmt, param, word):
    body = {"model": model, "messages": ASK, "max_tokens": 4, "response_format": fmt}
    r = requests.post(server.url + "/v1/chat/completions", json=body,
                      headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and word in err["message"] and err["type"] == "invalid_request_error", err
    ok = client.chat.completions.create(model=model, messages=ASK, max_tokens=2)  # still serving
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_logit_bias_bans_and_forces_tokens(server, client, model):
    plain = client.chat.completions.create(model=model, messages=ASK, max_tokens=4, temperature=0, logprobs=True)
    first = plain.choices[0].logprobs.content[0]
    tok = requests.post(server.url + "/tokenize", json={"model": model, "prompt": first.token, "add_special_tokens": False},
                        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60).json()["tokens"]
    assert len(tok) == 1, tok
    banned = client.chat.completions.create(model=model, messages=ASK, max_tokens=4, temperature=0, logprobs=True,
                                            logit_bias={str(tok[0]): -100})
    assert banned.choices[0].logprobs.content[0].token != first.token
    forced = client.chat.completions.create(model=model, messages=ASK, max_tokens=3, temperature=0.8, seed=3,
                                            logit_bias={"30": 100})
    ids = requests.post(server.url + "/tokenize", json={"model": model, "prompt": forced.choices[0].message.content,
                                                        "add_special_tokens": False},
                        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60).json()["tokens"]
    assert ids and all(i == 30 for i in ids), ids
    for bias, param in [({"abc": 1}, "logit_bias.abc"), ({"5": 101}, "logit_bias.5"),
                        ({"99999999": 1}, "logit_bias.99999999")]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=model, messages=ASK, max_tokens=2, logit_bias=bias)
        assert e.value.body["param"] == param, e.value.body


TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["c", "f"]}},
        "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("tool_choice", ["required", {"type": "function", "function": {"name": "add"}}])
def test_forced_tool_calls_are_valid_calls(client, model, tool_choice):
    """Forcing a call (Hermes syntax here) constrains the reply to one call whose arguments satisfy the tool's
    schema, closed by </tool_call>: even the demo model, never trained on tools, calls correctly."""
    for seed in (1, 2, 3):
        r = client.chat.completions.create(model=model, messages=WEATHER, max_tokens=100, temperature=0.8,
                                           seed=seed, tools=TOOLS, tool_choice=tool_choice)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls
        if isinstance(tool_choice, dict):
            assert call.function.name == "add"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_forced_call_and_response_format_together_are_refused(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=WEATHER, max_tokens=8, tools=TOOLS,
                                       tool_choice="required", response_format={"type": "json_object"})
    assert e.value.body["param"] == "response_format"


def test_anthropic_tool_choice_any_gives_a_valid_tool_use(server, model):
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    body = {"model": model, "max_tokens": 100, "messages": WEATHER, "tools": tools,
            "tool_choice": {"type": "any"}, "temperature": 0.5}
    r = requests.post(server.url + "/v1/messages", json=body, headers={"x-api-key": API_KEY}, timeout=60)
    assert r.status_code == 200, r.text
    msg = r.json()
    assert msg["stop_reason"] == "tool_use", msg
    [use] = [b for b in msg["content"] if b["type"] == "tool_use"]
    jsonschema.validate(use["input"], SCHEMAS[use["name"]])


def test_vllm_and_llama_cpp_spellings(server, client, model):
    """vLLM's guided_json (object or JSON text) and llama.cpp's {"type": "json_object", "schema"} constrain
    like response_format json_schema: the same seeded request gives the same reply."""
    ref = client.chat.completions.create(model=model, messages=ASK, max_tokens=120, temperature=0.7, seed=21,
                                         response_format=person_format())
    for extra in ({"guided_json": PERSON}, {"guided_json": json.dumps(PERSON)},
                  {"response_format": {"type": "json_object", "schema": PERSON}}):
        body = {"model": model, "messages": ASK, "max_tokens": 120, "temperature": 0.7, "seed": 21, **extra}
        r = requests.post(server.url + "/v1/chat/completions", json=body,
                          headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == ref.choices[0].message.content, extra
    body = {"model": model, "messages": ASK, "max_tokens": 4, "guided_json": PERSON, "response_format": person_format()}
    r = requests.post(server.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"},
                      timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_json", r.text


def test_anthropic_output_format(server, model):
    body = {"model": model, "max_tokens": 200, "messages": ASK, "temperature": 0,
            "output_format": {"type": "json_schema", "schema": PERSON}}
    r = requests.post(server.url + "/v1/messages", json=body, headers={"x-api-key": API_KEY}, timeout=60)
    assert r.status_code == 200, r.text
    msg = r.json()
    [text] = [b["text"] for b in msg["content"] if b["type"] == "text"]
    if msg["stop_reason"] == "end_turn":
        jsonschema.validate(json.loads(text), PERSON)
    else:
        assert msg["stop_reason"] == "max_tokens" and text.startswith("{")
    body["output_format"] = {"type": "json_schema", "schema": {"type": "integer", "minimum": 3}}
    r = requests.post(server.url + "/v1/messages", json=body, headers={"x-api-key": API_KEY}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["type"] == "error" and "minimum" in err["error"]["message"], err


def test_vllm_guided_choice_and_regex(server, client, model):
    choices = ["positive", "negative", "neutral"]
    seen = set()
    for seed in range(1, 6):
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Sentiment of: great!"}],
                                           max_tokens=120, temperature=1.0, seed=seed,
                                           extra_body={"guided_choice": choices})
        assert r.choices[0].message.content in choices and r.choices[0].finish_reason == "stop"
        seen.add(r.choices[0].message.content)
    assert len(seen) >= 2
    c = client.completions.create(model=model, prompt="date = '", max_tokens=20, temperature=0.8, seed=3,
                                  extra_body={"guided_regex": r"20\d\d-(0[1-9]|1[0-2])-[0-2]\d"})
    assert re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])-[0-2]\d", c.choices[0].text), c.choices[0].text
    for extra, param in [({"guided_regex": "(?=a)b"}, "guided_regex"), ({"guided_choice": []}, "guided_choice"),
                         ({"guided_choice": ["a"], "guided_regex": "a"}, "guided_choice")]:
        body = {"model": model, "prompt": "x", "max_tokens": 2, **extra}
        r = requests.post(server.url + "/v1/completions", json=body, headers={"Authorization": f"Bearer {API_KEY}"},
                          timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
