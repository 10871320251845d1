"""`serve --thinking-budget N` on the real server with the demo model (which thinks in a <think> block
before it answers): the server closes the block after N reasoning tokens in chat completions, Responses
and Messages, the model goes on to answer, and requests override the budget ("thinking_budget",
chat_template_kwargs.thinking_budget, Messages' thinking.budget_tokens). Run by ctest like
test_openai_e2e.py."""
import anthropic
import pytest

from serverutil import API_KEY, first_model, serve

BUDGET = 4


@pytest.fixture(scope="module")
def server():
    yield from serve("--thinking-budget", str(BUDGET))


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def model(server):
    return first_model(server)["id"]


MESSAGES = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
THINK = {"chat_template_kwargs": {"enable_thinking": True}}


def chat(client, model, extra, **kwargs):
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=300, temperature=0,
                                       extra_body={**THINK, **extra}, **kwargs)
    return r


def test_chat_reasoning_is_cut_and_the_model_answers(client, model):
    cut = chat(client, model, {})
    free = chat(client, model, {"thinking_budget": 0})  # 0: no limit for this request
    cut_msg, free_msg = cut.choices[0].message, free.choices[0].message
    assert len(free_msg.reasoning_content) > 30, free_msg  # the demo model thinks for more than 4 tokens
    assert cut_msg.reasoning_content and free_msg.reasoning_content.startswith(cut_msg.reasoning_content)
    assert len(cut_msg.reasoning_content) < len(free_msg.reasoning_content)
    assert cut_msg.content and "<think>" not in cut_msg.content and "</think>" not in cut_msg.content
    assert BUDGET < cut.usage.completion_tokens <= 300  # both parts and the injected close are counted
    # chat_template_kwargs.thinking_budget is the same override; a budget above the reasoning changes nothing.
    roomy = chat(client, model, {"chat_template_kwargs": {"enable_thinking": True, "thinking_budget": 1000}})
    assert roomy.choices[0].message.reasoning_content == free_msg.reasoning_content
    assert roomy.choices[0].message.content == free_msg.content


def test_chat_stream_matches_whole_reply(client, model):
    whole = chat(client, model, {}).choices[0].message
    reasoning, content = "", ""
    for chunk in chat(client, model, {}, stream=True):
        if chunk.choices:
            d = chunk.choices[0].delta
            reasoning += getattr(d, "reasoning_content", None) or ""
            content += d.content or ""
    assert reasoning == whole.reasoning_content and content == whole.content


def test_chat_n2_cuts_each_choice(client, model):
    r = chat(client, model, {}, n=2, seed=1)
    whole = chat(client, model, {})
    for c in r.choices:  # greedy: both choices are the single reply
        assert c.message.reasoning_content == whole.choices[0].message.reasoning_content
        assert c.message.content == whole.choices[0].message.content


def reasoning_and_text(resp):
    reasoning = "".join(c.text for item in resp.output if item.type == "reasoning" for c in item.content or [])
    return reasoning, resp.output_text


def test_responses_reasoning_is_cut(client, model):
    cut = client.responses.create(model=model, input=MESSAGES[0]["content"], max_output_tokens=300, temperature=0)
    free = client.responses.create(model=model, input=MESSAGES[0]["content"], max_output_tokens=300, temperature=0,
                                   extra_body={"thinking_budget": 0})
    (cut_r, cut_t), (free_r, free_t) = reasoning_and_text(cut), reasoning_and_text(free)
    assert cut_r and free_r.startswith(cut_r) and len(cut_r) < len(free_r)
    assert cut_t and "</think>" not in cut_t
    reasoning_tokens = [x.usage.output_tokens_details.reasoning_tokens for x in (cut, free)]
    assert BUDGET <= reasoning_tokens[0] < reasoning_tokens[1] < free.usage.output_tokens, reasoning_tokens
    events, final = [], None
    for ev in client.responses.create(model=model, input=MESSAGES[0]["content"], max_output_tokens=300,
                                      temperature=0, stream=True):
        events.append(ev.type)
        if ev.type in ("response.completed", "response.incomplete"):  # incomplete: max_output_tokens hit
            final = ev.response
    assert final is not None and final.status == cut.status
    assert reasoning_and_text(final) == (cut_r, cut_t)
    assert "response.reasoning_text.delta" in events and events[-1] == "response." + cut.status


def test_messages_budget_tokens_overrides_the_server_budget(server, model):
    client = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)

    def thinking(budget):
        msg = client.messages.create(model=model, max_tokens=300, messages=MESSAGES, extra_body={"temperature": 0},
                                     thinking={"type": "enabled", "budget_tokens": budget})
        return [b.thinking for b in msg.content if b.type == "thinking"]

    long, short = thinking(250), thinking(BUDGET)
    assert long and short and long[0].startswith(short[0]) and len(short[0]) < len(long[0])
