"""Tool calls streamed piece by piece, read back by the official SDKs' own stream accumulators (the
anthropic SDK parses every input_json_delta prefix as partial JSON; the openai SDK assembles Responses
function calls from their argument deltas), against the real HTTP layer over the fake engine, which
writes a fixed reply one byte per token. Run by ctest with TF_SERVER_CMD=tf_fake_server."""
import json

import anthropic
import pytest

from serverutil import API_KEY, serve

HERMES = ('<think>\nplan\n</think>\n\nSure.\n<tool_call>\n{"name": "get_weather", "arguments": '
          '{"city": "Paris", "days": 3}}\n</tool_call>')
QWEN_CODER = ("<tool_call>\n<function=get_weather>\n<parameter=city>\n07\n</parameter>\n<parameter=days>\n3\n"
              "</parameter>\n</function>\n</tool_call>")
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
USER = [{"role": "user", "content": "weather?"}]


@pytest.fixture(scope="module", params=[(HERMES, {"city": "Paris", "days": 3}),
                                        (QWEN_CODER, {"city": "07", "days": 3})], ids=["hermes", "qwen3-coder"])
def case(request):
    reply, args = request.param
    for s in serve("--reply", reply, "--step-us", "100"):
        yield s, args


def test_chat_completions_stream(case):
    server, args = case
    client = server.client()
    whole = client.chat.completions.create(model="fake-model", messages=USER, tools=CHAT_TOOLS)
    call = whole.choices[0].message.tool_calls[0]
    assert whole.choices[0].finish_reason == "tool_calls" and json.loads(call.function.arguments) == args
    pieces, name, finish = [], None, None
    for chunk in client.chat.completions.create(model="fake-model", messages=USER, tools=CHAT_TOOLS, stream=True):
        finish = chunk.choices[0].finish_reason or finish
        for c in chunk.choices[0].delta.tool_calls or []:
            name = name or c.function.name
            pieces.append(c.function.arguments or "")
    assert name == "get_weather" and finish == "tool_calls"
    assert "".join(pieces) == call.function.arguments and len([p for p in pieces if p]) > 3


def test_responses_stream(case):
    server, args = case
    client = server.client()
    tools = [{"type": "function", "name": "get_weather", "parameters": SCHEMA}]
    whole = client.responses.create(model="fake-model", input="weather?", tools=tools)
    call = [i for i in whole.output if i.type == "function_call"][0]
    assert json.loads(call.arguments) == args
    deltas = []
    with client.responses.stream(model="fake-model", input="weather?", tools=tools) as s:
        for ev in s:
            if ev.type == "response.function_call_arguments.delta":
                deltas.append(ev.delta)
        final = s.get_final_response()
    streamed = [i for i in final.output if i.type == "function_call"][0]
    assert streamed.name == "get_weather" and streamed.arguments == call.arguments == "".join(deltas)
    assert len(deltas) > 3


def test_anthropic_messages_stream(case):
    server, args = case
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=60)
    tools = [{"name": "get_weather", "input_schema": SCHEMA}]
    whole = client.messages.create(model="fake-model", max_tokens=300, messages=USER, tools=tools)
    assert whole.stop_reason == "tool_use" and whole.content[-1].input == args
    snapshots = []
    with client.messages.stream(model="fake-model", max_tokens=300, messages=USER, tools=tools) as s:
        for ev in s:
            if ev.type == "input_json":  # the SDK's partial-JSON snapshot after each delta
                snapshots.append(ev.snapshot)
        final = s.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[-1].input == args
    assert len(snapshots) > 3 and snapshots[-1] == args
