"""Malformed requests against the real HTTP layer: every field of a full request to each route, in turn,
replaced by values of other types and shapes or left out, streamed and not. The server must answer each
with a status below 500 and an error in the route's own format (OpenAI's error object; Anthropic's for
/v1/messages), never an error event inside a 200 stream, and keep serving; it exits cleanly on SIGTERM.

Session 43 found this way that a fake chat template read a missing key of a const JSON object (undefined
behaviour, a crash once in ~1300 requests) and that a tool call without `arguments` reached the template.

    TF_SERVER_CMD=build/tests/server/tf_fake_server pytest tests/server/test_fuzz_e2e.py
    TF_SERVER_CMD="build/tensorfold serve --backend cpu" TF_FUZZ_STRIDE=7 pytest tests/server/test_fuzz_e2e.py

With `tensorfold serve` (no TF_SERVER_MODEL: the demo model) the requests go through the real chat template
and engine; TF_FUZZ_STRIDE=N sends every Nth case only (the demo model generates on the CPU).
"""
import copy
import json
import os

import pytest
import requests

import serverutil

MESSAGES = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
]
TOOLS = [{"type": "function", "function": {"name": "f", "description": "d",
                                            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]
BASES = {
    "/v1/chat/completions": {
        "model": None, "messages": MESSAGES, "max_tokens": 3, "tools": TOOLS, "tool_choice": "auto",
        "temperature": 0.5, "top_p": 0.9, "stop": ["x"], "logprobs": True, "top_logprobs": 2, "n": 2, "seed": 3,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
        "logit_bias": {"5": 1}, "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"enable_thinking": False}},
    "/v1/completions": {
        "model": None, "prompt": ["ab", "cd"], "max_tokens": 3, "echo": True, "logprobs": 2, "stop": "x", "n": 2},
    "/v1/responses": {
        "model": None, "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
        "instructions": "be brief", "max_output_tokens": 3,
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}, "store": False},
    "/v1/messages": {
        "model": None, "max_tokens": 3, "system": [{"type": "text", "text": "s"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]},
                     {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "auto"},
        "stop_sequences": ["x"], "thinking": {"type": "enabled", "budget_tokens": 1024}, "temperature": 0.3},
    "/v1/messages/count_tokens": {
        "model": None, "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}]},
    "/tokenize": {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True, "with_pieces": True},
    "/detokenize": {"tokens": [104, 105]},
}
STREAMED = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"}
# What each field is replaced by in turn (and, last, left out).
VALUES = [None, 0, -1, 1, 2**63, -2**63, 1e308, 0.5, "", "x", "\u0000", "\ud7ff" * 3, [], [None], [1, "a"], {},
          {"a": None}, True, False, [{"type": "text"}], [{"role": "user"}], {"type": None}, "auto", "none",
          "required", [[1]], "9" * 400]
DELETE = object()


def paths(v, p=()):
    yield p
    if isinstance(v, dict):
        for k in v:
            yield from paths(v[k], p + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, p + (i,))


def mutated(base, p, x):
    if not p:
        return x
    out = copy.deepcopy(base)
    cur = out
    for k in p[:-1]:
        cur = cur[k]
    if x is DELETE:
        del cur[p[-1]]
    else:
        cur[p[-1]] = x
    return out


def cases(model):
    for route, base in BASES.items():
        base = {k: (model if k == "model" else v) for k, v in base.items()}
        for p in paths(base):
            for x in VALUES + ([DELETE] if p else []):
                for stream in ([False, True] if route in STREAMED else [False]):
                    body = mutated(base, p, x)
                    if stream and isinstance(body, dict):
                        body = dict(body, stream=True)
                    yield route, p, x, body


@pytest.fixture(scope="module")
def server():
    # A small default reply length: a request whose max_tokens was taken away must not generate for long.
    yield from serverutil.serve("--max-tokens", "4")


def test_every_malformed_request_is_answered_in_its_api_format(server):
    model = serverutil.first_model(server)["id"]
    stride = int(os.environ.get("TF_FUZZ_STRIDE", "1"))
    headers = dict(serverutil.auth(server.api_key), **{"x-api-key": server.api_key})
    session = requests.Session()
    seen, failures, statuses = 0, [], {}
    for i, (route, p, x, body) in enumerate(cases(model)):
        if i % stride:
            continue
        seen += 1
        what = f"{route} {'.'.join(map(str, p)) or '(body)'} = {'(left out)' if x is DELETE else repr(x)[:40]}"
        try:
            r = session.post(server.url + route, data=json.dumps(body), headers=headers, timeout=60)
        except requests.RequestException as e:
            failures.append(f"{what}: no answer ({e})")
            assert server.proc.poll() is None, f"the server died at {what}:\n{server.log_text()[-4000:]}"
            continue
        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
        text = r.text
        if r.status_code >= 500:
            failures.append(f"{what}: {r.status_code} {text[:200]}")
        elif r.status_code >= 400:
            try:
                err = r.json()
            except ValueError:
                failures.append(f"{what}: {r.status_code} without a JSON body: {text[:200]}")
                continue
            if route.startswith("/v1/messages"):
                ok = err.get("type") == "error" and isinstance(err.get("error", {}).get("message"), str)
            else:
                ok = isinstance(err.get("error"), dict) and isinstance(err["error"].get("message"), str)
            if not ok:
                failures.append(f"{what}: {r.status_code} not in the API's error format: {text[:200]}")
        elif body.get("stream") if isinstance(body, dict) else False:
            if '"type":"error"' in text.replace(" ", "") or "server_error" in text:
                failures.append(f"{what}: an error inside the 200 stream: {text[-300:]}")
    assert not failures, f"{len(failures)} of {seen} requests:\n" + "\n".join(failures[:30])
    # Sanity of the sweep itself: most cases are refused, some still generate.
    assert statuses.get(200, 0) > seen // 20 and statuses.get(400, 0) > seen // 2, statuses
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_deeply_nested_bodies_are_refused_not_crashing(server):
    """400k levels of arrays (800 KB, under the test server's 1 MiB body limit) in each place a request
    carries free-form JSON: refused with a 400 (or, as JSON text inside a string, by the field's own
    check), never a crashed worker (copying such a value recursed once a level: session 43)."""
    model = serverutil.first_model(server)["id"]
    deep = "[" * 400000 + "]" * 400000
    msgs = '[{"role":"user","content":"hi"}]'
    bodies = {
        "/v1/chat/completions": [
            '{"model":"%s","messages":%s,"chat_template_kwargs":{"x":%s}}' % (model, msgs, deep),
            '{"model":"%s","messages":%s,"response_format":{"type":"json_schema","json_schema":'
            '{"name":"n","schema":{"type":"object","default":%s}}}}' % (model, msgs, deep),
            '{"model":"%s","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function",'
            '"function":{"name":"f","arguments":%s}}]},{"role":"user","content":"x"}]}' % (model, json.dumps(deep)),
            '{"model":"%s","messages":%s,"guided_json":%s}' % (model, msgs, json.dumps(deep)),
        ],
        "/v1/responses": ['{"model":"%s","input":"hi","metadata":%s}' % (model, deep)],
        "/v1/messages": ['{"model":"%s","max_tokens":2,"messages":%s,"metadata":%s}' % (model, msgs, deep)],
        "/tokenize": ['{"messages":%s,"chat_template_kwargs":%s}' % (msgs, deep)],
    }
    headers = dict(serverutil.auth(server.api_key), **{"x-api-key": server.api_key,
                                                       "content-type": "application/json"})
    for route, items in bodies.items():
        for body in items:
            r = requests.post(server.url + route, data=body, headers=headers, timeout=120)
            assert r.status_code == 400, f"{route} {body[:120]}...: {r.status_code} {r.text[:300]}"
            assert server.proc.poll() is None, server.log_text()[-4000:]
    assert requests.get(server.url + "/health", timeout=10).status_code == 200


def test_responses_metadata_is_checked_as_openai_does(server):
    """At most 16 pairs, keys up to 64 characters, string values up to 512; echoed back when valid."""
    model = serverutil.first_model(server)["id"]
    url, headers = server.url + "/v1/responses", serverutil.auth(server.api_key)
    base = {"model": model, "input": "hi", "max_output_tokens": 2, "store": False}
    for metadata, param in [({str(i): "v" for i in range(17)}, "metadata"), ({"k": 1}, "metadata.k"),
                            ({"k": "v" * 513}, "metadata.k"), ({"k" * 65: "v"}, "metadata." + "k" * 65),
                            ([1], "metadata")]:
        r = requests.post(url, json=dict(base, metadata=metadata), headers=headers, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text[:300]
    r = requests.post(url, json=dict(base, metadata={"user": "u1", "run": "7"}), headers=headers, timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert r.json()["metadata"] == {"user": "u1", "run": "7"}
