"""POST /v1/responses and GET/DELETE /v1/responses/{id} of the real `tensorfold serve` (demo model by
default) driven with the official openai SDK: whole and streamed responses, stored responses continued
with previous_response_id, and what is refused. Run by ctest like test_openai_e2e.py."""
import openai
import pytest
import requests

from serverutil import API_KEY


PROMPT = "Write a Python function that adds two numbers."


def test_create_matches_chat(client, model):
    r = client.responses.create(model=model, input=PROMPT, max_output_tokens=24, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.status in ("completed", "incomplete")
    chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": PROMPT}], max_tokens=24,
                                          temperature=0)
    assert r.output_text == chat.choices[0].message.content  # same template, same greedy reply
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    short = client.responses.create(model=model, input=PROMPT, max_output_tokens=2, temperature=0)
    assert short.status == "incomplete" and short.incomplete_details.reason == "max_output_tokens"


def test_items_input_and_instructions(client, model):
    a = client.responses.create(model=model, input=PROMPT, instructions="Answer in one line.", max_output_tokens=8,
                                temperature=0)
    b = client.responses.create(model=model, max_output_tokens=8, temperature=0, input=[
        {"role": "developer", "content": "Answer in one line."},
        {"role": "user", "content": [{"type": "input_text", "text": PROMPT}]}])
    assert a.output_text == b.output_text and a.usage.input_tokens == b.usage.input_tokens
    assert a.instructions == "Answer in one line."
    tools = [{"type": "function", "name": "add", "description": "Add", "parameters": {"type": "object", "properties": {}}}]
    c = client.responses.create(model=model, max_output_tokens=8, temperature=0, tools=tools, input=[
        {"role": "user", "content": PROMPT},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": "{\"a\": 1}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "3"}])
    assert c.usage.input_tokens > a.usage.input_tokens
    for item in c.output:
        assert item.type in ("message", "function_call", "reasoning")
        if item.type == "message":
            assert "<tool_call>" not in item.content[0].text


def test_stream_event_sequence(client, model):
    whole = client.responses.create(model=model, input=PROMPT, max_output_tokens=24, temperature=0)
    events = list(client.responses.create(model=model, input=PROMPT, max_output_tokens=24, temperature=0, stream=True))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] in ("response.completed", "response.incomplete")
    assert [e.sequence_number for e in events] == list(range(len(events)))
    for t in ("response.output_item.added", "response.content_part.added", "response.output_text.delta",
              "response.output_text.done", "response.content_part.done", "response.output_item.done"):
        assert t in types, (t, types)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == whole.output_text == events[-1].response.output_text
    assert events[-1].response.usage.output_tokens == whole.usage.output_tokens
    # The SDK's stream helper needs response.completed: a prompt the demo model answers in full.
    short = "What is the weather in Paris?"
    whole = client.responses.create(model=model, input=short, max_output_tokens=400, temperature=0)
    assert whole.status == "completed"
    with client.responses.stream(model=model, input=short, max_output_tokens=400, temperature=0) as stream:
        final = stream.get_final_response()
    assert final.output_text == whole.output_text and final.status == "completed"
    assert [i.type for i in final.output] == [i.type for i in whole.output]


def test_stored_responses_and_previous_response_id(server, client, model):
    first = client.responses.create(model=model, input=PROMPT, max_output_tokens=8, temperature=0)
    got = client.responses.retrieve(first.id)
    assert got.id == first.id and got.output_text == first.output_text
    follow = client.responses.create(model=model, input="And now subtract them.", previous_response_id=first.id,
                                     max_output_tokens=8, temperature=0)
    # The follow-up's prompt holds the first exchange: as long as sending it all again by hand.
    by_hand = client.responses.create(model=model, max_output_tokens=8, temperature=0, input=[
        {"role": "user", "content": PROMPT}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "And now subtract them."}])
    assert follow.usage.input_tokens == by_hand.usage.input_tokens
    assert follow.output_text == by_hand.output_text
    client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=model, input="x", previous_response_id=first.id, max_output_tokens=2)
    unstored = client.responses.create(model=model, input=PROMPT, max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"tool_choice": {"type": "function", "name": "g"}, "tools": [{"type": "function", "name": "f"}]}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"text": {"format": {"type": "regex", "regex": "a+"}}}, "text.format.type"),
    ({"background": True}, "background"),
    ({"truncation": "auto"}, "truncation"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]},
     "input[0].content[0].type"),
    ({"input": 5}, "input"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
])
def test_unsupported_is_a_clear_400(server, model, extra, param):
    body = {"model": model, "input": PROMPT, "max_output_tokens": 4, **extra}
    r = requests.post(server.url + "/v1/responses", json=body, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and err["type"] == "invalid_request_error", err
    r = requests.post(server.url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 401
