"""GET /metrics of the real `tensorfold serve`: Prometheus text that prometheus_client's parser reads, with
vLLM's metric names as aliases, whose counters move by what the requests report; plus reasoning and tool-call
parsing in chat completions seen through the openai SDK. Run by ctest like test_openai_e2e.py."""
import time

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families



def scrape(server):
    r = requests.get(server.url + "/metrics", timeout=10)  # no key needed, as /health
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            key = s.name + ("" if "le" not in s.labels else "{le=" + s.labels["le"] + "}")
            samples[key] = s.value
    return samples


MESSAGES = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


def test_metrics_parse_and_alias(server):
    m = scrape(server)
    for ours, vllm in [("tensorfold_requests_running", "vllm:num_requests_running"),
                       ("tensorfold_requests_waiting", "vllm:num_requests_waiting"),
                       ("tensorfold_prompt_tokens_total", "vllm:prompt_tokens_total"),
                       ("tensorfold_generation_tokens_total", "vllm:generation_tokens_total"),
                       ("tensorfold_kv_cache_usage_ratio", "vllm:gpu_cache_usage_perc"),
                       ("tensorfold_spec_decode_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"),
                       ("tensorfold_time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_count"),
                       ("tensorfold_inter_token_latency_seconds_count", "vllm:inter_token_latency_seconds_count")]:
        assert ours in m and vllm in m and m[ours] == m[vllm], (ours, vllm)
    assert 0 <= m["vllm:gpu_cache_usage_perc"] <= 1
    assert m["tensorfold_kv_blocks_total"] > 0


def test_counters_move_with_requests(server, client, model):
    before = scrape(server)
    usage = [0, 0]
    for stream in (False, True):
        if stream:
            chunks = list(client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, temperature=0,
                                                         stream=True, stream_options={"include_usage": True}))
            u = chunks[-1].usage
        else:
            u = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, temperature=0).usage
        usage[0] += u.prompt_tokens
        usage[1] += u.completion_tokens
    # Latencies are recorded when the server logs the request, just after the client has its last byte,
    # and the engine's gauges follow its rounds: give both a moment.
    deadline = time.time() + 10
    while True:
        after = scrape(server)
        settled = (after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"] == 2
                   and after["vllm:num_requests_running"] == 0)
        if settled or time.time() > deadline:
            break
        time.sleep(0.05)
    assert after["vllm:prompt_tokens_total"] - before["vllm:prompt_tokens_total"] == usage[0]
    assert (after["tensorfold_prompt_tokens_prefilled_total"] - before["tensorfold_prompt_tokens_prefilled_total"]
            + after["tensorfold_prompt_tokens_cached_total"] - before["tensorfold_prompt_tokens_cached_total"] == usage[0])
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == usage[1]
    assert after["vllm:time_to_first_token_seconds_count"] - before["vllm:time_to_first_token_seconds_count"] == 2
    assert after["vllm:e2e_request_latency_seconds_count"] - before["vllm:e2e_request_latency_seconds_count"] == 2
    assert (after["vllm:inter_token_latency_seconds_count"] - before["vllm:inter_token_latency_seconds_count"]
            == usage[1] - 2)
    assert after["vllm:time_to_first_token_seconds_sum"] > before["vllm:time_to_first_token_seconds_sum"]
    assert after["tensorfold_time_to_first_token_seconds_bucket{le=+Inf}"] == after[
        "tensorfold_time_to_first_token_seconds_count"]
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    # Round time: the forwards' share of it, both growing with the rounds run.
    rounds = after["tensorfold_forward_passes_total"] - before["tensorfold_forward_passes_total"]
    fwd = after["tensorfold_forward_seconds_total"] - before["tensorfold_forward_seconds_total"]
    total = after["tensorfold_round_seconds_total"] - before["tensorfold_round_seconds_total"]
    assert rounds >= 2 and 0 < fwd <= total, (rounds, fwd, total)
    # The rounds without prompt rows: a part of those, their forwards a part of their time.
    d = {k: after[k] - before[k] for k in ("tensorfold_decode_rounds_total", "tensorfold_decode_round_seconds_total",
                                           "tensorfold_decode_forward_seconds_total")}
    assert d["tensorfold_decode_rounds_total"] <= rounds, (d, rounds)
    assert 0 <= d["tensorfold_decode_forward_seconds_total"] <= d["tensorfold_decode_round_seconds_total"] <= total, d
    if usage[1] > 2:  # some request decoded past its first token
        assert d["tensorfold_decode_rounds_total"] >= 1 and d["tensorfold_decode_forward_seconds_total"] > 0, d


TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}]


def test_chat_reasoning_and_tools_never_leak_markup(client, model):
    for kwargs in ({"tools": TOOLS}, {"extra_body": {"chat_template_kwargs": {"enable_thinking": True}}}):
        whole = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=200, temperature=0, **kwargs)
        msg = whole.choices[0].message
        for text in (msg.content or "",):
            assert "<tool_call>" not in text and "<think>" not in text and "</think>" not in text
        if msg.tool_calls:
            assert whole.choices[0].finish_reason == "tool_calls"
            assert all(c.id.startswith("call_") and c.type == "function" for c in msg.tool_calls)
        content, reasoning, calls = "", "", {}
        finish = None
        for chunk in client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=200, temperature=0,
                                                    stream=True, **kwargs):
            d = chunk.choices[0].delta
            content += d.content or ""
            reasoning += getattr(d, "reasoning_content", None) or ""
            for c in d.tool_calls or []:
                calls.setdefault(c.index, [c.function.name, ""])[1] += c.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        assert content == (msg.content or "")
        assert reasoning == (getattr(msg, "reasoning_content", None) or "")
        assert [v for _, v in sorted(calls.items())] == [[c.function.name, c.function.arguments]
                                                         for c in msg.tool_calls or []]
        assert finish == whole.choices[0].finish_reason


def test_forced_tool_choice(client, model):
    """tool_choice "required" / a named function writes the call's start for the model (there is no
    constrained decoding): the prompt grows by it, and the reply is a call or, when the model does not
    finish one, the raw text starting with the forced marker."""
    auto = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, tools=TOOLS, temperature=0)
    for choice in ("required", {"type": "function", "function": {"name": "add"}}):
        r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=40, tools=TOOLS,
                                           tool_choice=choice, temperature=0)
        assert r.usage.prompt_tokens > auto.usage.prompt_tokens
        msg = r.choices[0].message
        if msg.tool_calls:
            assert r.choices[0].finish_reason == "tool_calls"
            assert choice == "required" or msg.tool_calls[0].function.name == "add"
        else:
            assert msg.content.startswith("<tool_call>")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, tools=TOOLS,
                                       tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, tool_choice="required")
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=4, tools=TOOLS, tool_choice="none")
    assert r.choices[0].message.tool_calls is None
