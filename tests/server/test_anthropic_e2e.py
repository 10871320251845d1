"""POST /v1/messages and /v1/messages/count_tokens of the real `tensorfold serve` (demo model by default),
driven with the official anthropic SDK; bad input checked for Anthropic's error shape. Run by ctest with
TF_SERVER_CMD (and optionally TF_SERVER_MODEL); the server starts through serverutil.py."""
import json

import anthropic
import pytest
import requests

from serverutil import API_KEY, first_model, serve


@pytest.fixture(scope="module")
def server():
    yield from serve()


@pytest.fixture(scope="module")
def model(server):
    return first_model(server)["id"]


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)


# Sampling fields go in extra_body: recent anthropic SDKs no longer take temperature as an argument.
GREEDY = {"temperature": 0}
HELLO = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


def text_of(msg):
    return "".join(b.text for b in msg.content if b.type == "text")


def test_create_and_count_tokens(client, model):
    msg = client.messages.create(model=model, max_tokens=24, messages=HELLO, extra_body=GREEDY)
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_")
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert text_of(msg)
    assert 1 <= msg.usage.output_tokens <= 24
    count = client.messages.count_tokens(model=model, messages=HELLO)
    # Anthropic counts cached prompt tokens apart from input_tokens.
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens == count.input_tokens
    again = client.messages.create(model=model, max_tokens=24, messages=HELLO, extra_body=GREEDY)
    assert text_of(again) == text_of(msg)  # greedy is reproducible
    assert again.usage.cache_read_input_tokens > 0  # the prompt cache served the repeat


def test_stream_matches_whole_reply(client, model):
    whole = client.messages.create(model=model, max_tokens=32, messages=HELLO, extra_body=GREEDY)
    events = []
    with client.messages.stream(model=model, max_tokens=32, messages=HELLO, extra_body=GREEDY) as stream:
        pieces = []
        for ev in stream:
            events.append(ev.type)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                pieces.append(ev.delta.text)
        final = stream.get_final_message()
    assert "".join(pieces) == text_of(whole) == text_of(final)
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert "content_block_start" in events and "content_block_stop" in events and "message_delta" in events


def test_max_tokens_and_stop_sequences(client, model):
    msg = client.messages.create(model=model, max_tokens=3, messages=HELLO, extra_body=GREEDY)
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3
    full = text_of(client.messages.create(model=model, max_tokens=40, messages=HELLO, extra_body=GREEDY))
    stop = full[len(full) // 2:len(full) // 2 + 3]
    assert stop.strip(), full
    cut = client.messages.create(model=model, max_tokens=40, messages=HELLO, extra_body=GREEDY, stop_sequences=[stop])
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert full.startswith(text_of(cut)) and stop not in text_of(cut)


def test_system_blocks_and_tool_turns(client, model):
    a = client.messages.count_tokens(model=model, system="You are terse.", messages=HELLO)
    b = client.messages.count_tokens(model=model, system=[{"type": "text", "text": "You are terse."}], messages=HELLO)
    assert a.input_tokens == b.input_tokens > client.messages.count_tokens(model=model, messages=HELLO).input_tokens
    tools = [{"name": "add", "description": "Add two numbers",
              "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}]
    turns = HELLO + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"}]},
    ]
    with_tools = client.messages.count_tokens(model=model, tools=tools, messages=turns)
    assert with_tools.input_tokens > a.input_tokens
    msg = client.messages.create(model=model, max_tokens=8, tools=tools, messages=turns, extra_body=GREEDY)
    assert msg.stop_reason in ("end_turn", "max_tokens", "tool_use")
    for block in msg.content:  # no markup leaks into text
        if block.type == "text":
            assert "<tool_call>" not in block.text and "<think>" not in block.text


def test_thinking_blocks(client, model):
    msg = client.messages.create(model=model, max_tokens=1100, messages=HELLO, extra_body=GREEDY,
                                 thinking={"type": "enabled", "budget_tokens": 1024})
    types = [b.type for b in msg.content]
    assert types and set(types) <= {"thinking", "text", "tool_use"}
    if model == "demo":
        assert "thinking" in types  # the demo model was trained to think first
    if "thinking" in types:
        assert types[0] == "thinking"
    for block in msg.content:
        if block.type == "text":
            assert "<think>" not in block.text and "</think>" not in block.text
    with client.messages.stream(model=model, max_tokens=1100, messages=HELLO, extra_body=GREEDY,
                                thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == types
    for a, b in zip(final.content, msg.content):
        assert (a.thinking if a.type == "thinking" else a.text) == (b.thinking if b.type == "thinking" else b.text)


def test_thinking_budget_ends_the_block(client, model):
    free = client.messages.create(model=model, max_tokens=300, messages=HELLO, extra_body=GREEDY,
                                  thinking={"type": "enabled", "budget_tokens": 200})
    cut = client.messages.create(model=model, max_tokens=300, messages=HELLO, extra_body=GREEDY,
                                 thinking={"type": "enabled", "budget_tokens": 4})
    thoughts = [b.thinking for b in free.content if b.type == "thinking"]
    assert thoughts and len(thoughts[0]) > 30, free.content  # the demo model thinks for more than 4 tokens
    cut_thoughts = [b.thinking for b in cut.content if b.type == "thinking"]
    assert cut_thoughts and thoughts[0].startswith(cut_thoughts[0]) and len(cut_thoughts[0]) < len(thoughts[0])
    assert any(b.type == "text" and b.text for b in cut.content), cut.content  # it went on to answer
    with client.messages.stream(model=model, max_tokens=300, messages=HELLO, extra_body=GREEDY,
                                thinking={"type": "enabled", "budget_tokens": 4}) as s:
        final = s.get_final_message()
    assert [b.type for b in final.content] == [b.type for b in cut.content]
    assert text_of(final) == text_of(cut) and final.usage.output_tokens == cut.usage.output_tokens
    # Usage covers both parts: the cut thinking, the close and the answer.
    assert 4 < cut.usage.output_tokens <= 300


def anthropic_error(r, status, etype):
    assert r.status_code == status, r.text
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == etype and body["error"]["message"], body
    return body["error"]["message"]


def post(server, body, headers=None, path="/v1/messages"):
    h = {"Content-Type": "application/json", "x-api-key": API_KEY} if headers is None else headers
    return requests.post(server.url + path, data=json.dumps(body), headers=h, timeout=60)


def test_errors_in_anthropic_shape(server, client, model):
    assert "max_tokens" in anthropic_error(post(server, {"model": model, "messages": HELLO}), 400, "invalid_request_error")
    anthropic_error(post(server, {"model": model, "max_tokens": 4, "messages": HELLO},
                         {"Content-Type": "application/json", "x-api-key": "wrong"}), 401, "authentication_error")
    anthropic_error(post(server, {"model": model, "max_tokens": 4, "messages": HELLO}, {"Content-Type": "application/json"}),
                    401, "authentication_error")
    anthropic_error(post(server, {"model": "no-such-model", "max_tokens": 4, "messages": HELLO}), 404, "not_found_error")
    image = [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}]}]
    assert "image" in anthropic_error(post(server, {"model": model, "max_tokens": 4, "messages": image}), 400,
                                      "invalid_request_error")
    anthropic_error(post(server, {"model": model, "max_tokens": 4, "messages": HELLO, "tool_choice": {"type": "any"}}),
                    400, "invalid_request_error")  # forcing a call needs tools
    anthropic_error(post(server, {"model": model, "max_tokens": 4, "messages": HELLO, "tool_choice": {"type": "maybe"}}),
                    400, "invalid_request_error")
    anthropic_error(post(server, {"model": model, "max_tokens": 4, "messages": "hi"}), 400, "invalid_request_error")
    anthropic_error(post(server, {"model": model, "max_tokens": 2000, "messages": HELLO,
                                  "thinking": {"type": "enabled", "budget_tokens": 2000}}), 400, "invalid_request_error")
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(model=model, max_tokens=4, messages=HELLO, extra_body={"temperature": 3})
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.url, api_key="nope", max_retries=0).messages.create(
            model=model, max_tokens=4, messages=HELLO)
    # Statuses the HTTP layer sets itself come in Anthropic's shape on these paths too.
    r = requests.get(server.url + "/v1/messages", headers={"x-api-key": API_KEY}, timeout=10)
    assert r.json()["type"] == "error" and r.status_code in (404, 405), r.text
    r = post(server, {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "x" * (2 << 20)}]})
    anthropic_error(r, 413, "request_too_large")
    # A bearer token works as well as x-api-key.
    r = post(server, {"model": model, "max_tokens": 2, "messages": HELLO},
             {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"})
    assert r.status_code == 200 and r.json()["type"] == "message"
