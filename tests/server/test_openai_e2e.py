"""End-to-end tests of `tensorfold serve`: start the real binary on a free port and drive it with the
official openai SDK (and raw HTTP for bad input). Run by ctest:

  TF_SERVER_CMD="build/tensorfold serve --backend cpu" TF_SERVER_MODEL=tests/data/tiny/qwen3 pytest ...
  TF_SERVER_CMD=build/tests/server/tf_fake_server pytest ...   (the HTTP layer over a fake engine)

Nothing is skipped: a missing binary or model fails with a message saying what to build.
"""
import concurrent.futures
import json
import signal
import socket
import time

import openai
import pytest
import requests

from serverutil import API_KEY, READ_TIMEOUT_S, Server, auth, first_model


@pytest.fixture(scope="module")
def model_info(server):
    return first_model(server)


def health(server):
    r = requests.get(server.url + "/health", timeout=5)
    assert r.status_code == 200
    return r.json()


def post(server, path, body, headers=None, raw=False):
    h = {"Content-Type": "application/json", **(auth() if headers is None else headers)}
    data = body if raw else json.dumps(body)
    return requests.post(server.url + path, data=data, headers=h, timeout=60)


def assert_good_request(client, model_info):
    """The server keeps serving: a normal request right after a bad one succeeds."""
    r = client.chat.completions.create(model=model_info["id"], messages=[{"role": "user", "content": "Hello"}],
                                       max_tokens=4, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens >= 1


def assert_error(r, status, param=None, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["message"]
    if param is not None:
        assert err["param"] == param, err
        assert param.split("[")[0].split(".")[0] in err["message"], err
    if code is not None:
        assert err["code"] == code, err
    return err


CHAT = [{"role": "user", "content": "Tell me a story about a cat."}]


def reply(msg):
    """A chat reply as (reasoning, content): thinking models' <think> part is parsed into reasoning_content."""
    return (getattr(msg, "reasoning_content", None) or "", msg.content or "")


def full(msg):
    return "".join(reply(msg))


def streamed_replies(chunks, n=1):
    out = [["", ""] for _ in range(n)]
    for ch in chunks:
        for c in ch.choices:
            out[c.index][0] += getattr(c.delta, "reasoning_content", None) or ""
            out[c.index][1] += c.delta.content or ""
    return [tuple(x) for x in out]


# ---------------------------------------------------------------------------------------------- SDK


def test_models(server, client, model_info):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert model_info["id"] in ids
    assert model_info["owned_by"] == "tensorfold"
    assert model_info["context_length"] > 0


def test_chat_completion(client, model_info):
    r = client.chat.completions.create(model=model_info["id"], messages=CHAT, max_tokens=8, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.system_fingerprint
    c = r.choices[0]
    assert c.message.role == "assistant"
    assert isinstance(c.message.content, str)
    assert c.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.usage.prompt_tokens_details.cached_tokens >= 0


def test_usage_matches_tokenize(server, client, model_info):
    r = client.chat.completions.create(model=model_info["id"], messages=CHAT, max_tokens=3, temperature=0)
    t = post(server, "/tokenize", {"messages": CHAT}).json()
    assert r.usage.prompt_tokens == t["count"] == len(t["tokens"])
    c = client.completions.create(model=model_info["id"], prompt="Once upon a time", max_tokens=3, temperature=0)
    t = post(server, "/tokenize", {"prompt": "Once upon a time"}).json()
    assert c.usage.prompt_tokens == t["count"]
    d = post(server, "/detokenize", {"tokens": t["tokens"]}).json()
    assert "Once upon a time" in d["content"]


def test_cached_tokens(client, model_info):
    messages = [{"role": "user", "content": "Repeat after me, slowly and with care: " + "the quick brown fox " * 8}]
    kw = dict(model=model_info["id"], messages=messages, max_tokens=2, temperature=0)
    first = client.chat.completions.create(**kw)
    second = client.chat.completions.create(**kw)
    assert second.usage.prompt_tokens == first.usage.prompt_tokens > 32
    assert 0 < second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens
    assert reply(second.choices[0].message) == reply(first.choices[0].message)


def test_max_tokens_and_ignore_eos_give_length(client, model_info):
    r = client.chat.completions.create(model=model_info["id"], messages=CHAT, max_completion_tokens=12,
                                       temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12


def test_chat_stream_matches_whole_reply(client, model_info):
    kw = dict(model=model_info["id"], messages=CHAT, max_tokens=16, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(ch.id == chunks[0].id for ch in chunks)
    assert streamed_replies(chunks) == [reply(whole.choices[0].message)]
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_completion_and_stream(client, model_info):
    kw = dict(model=model_info["id"], prompt="The capital of France is", max_tokens=10, temperature=0,
              extra_body={"ignore_eos": True})
    whole = client.completions.create(**kw)
    assert whole.object == "text_completion"
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 10
    chunks = list(client.completions.create(stream=True, **kw))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    echo = client.completions.create(echo=True, **kw)
    assert echo.choices[0].text == "The capital of France is" + whole.choices[0].text


def test_completion_prompt_shapes(server, client, model_info):
    ids = post(server, "/tokenize", {"prompt": "Hello there"}).json()["tokens"]
    kw = dict(model=model_info["id"], max_tokens=5, temperature=0, extra_body={"ignore_eos": True})
    by_text = client.completions.create(prompt="Hello there", **kw).choices[0].text
    assert client.completions.create(prompt=ids, **kw).choices[0].text == by_text
    many = client.completions.create(prompt=["Hello there", ids], n=2, **kw)
    assert [c.index for c in many.choices] == [0, 1, 2, 3]
    assert all(c.text == by_text for c in many.choices)  # greedy: every choice the same


def test_n2_and_seed_reproducibility(client, model_info):
    kw = dict(model=model_info["id"], messages=CHAT, max_tokens=16, temperature=1.0, seed=1234,
              extra_body={"ignore_eos": True})
    a = client.chat.completions.create(n=2, **kw)
    b = client.chat.completions.create(n=2, **kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [reply(c.message) for c in a.choices] == [reply(c.message) for c in b.choices]
    assert full(a.choices[0].message) != full(a.choices[1].message), "choices use different seeds"
    assert a.usage.completion_tokens == 32
    one = client.chat.completions.create(**{**kw, "seed": 1235})
    assert reply(one.choices[0].message) == reply(a.choices[1].message), "choice i uses seed + i"
    streamed = client.chat.completions.create(n=2, stream=True, **kw)
    assert streamed_replies(streamed, 2) == [reply(c.message) for c in a.choices]


def plain_window(text):
    # A stop string of plain characters from the second half of a greedy reply (a random tiny model may also
    # write bytes that are not UTF-8, which a client cannot send back as a stop string).
    windows = [text[i:i + 3] for i in range(len(text) // 3, len(text) - 3)]
    plain = [w for w in windows if all(c.isascii() and c.isprintable() for c in w)]
    assert plain, f"no plain 3-character window in the reply {text!r}"
    return plain[0]


def test_stop_sequences(client, model_info):
    # Completions: the raw text, so the cut point is exact.
    kw = dict(model=model_info["id"], prompt="Once upon a time", max_tokens=40, temperature=0,
              extra_body={"ignore_eos": True})
    text = client.completions.create(**kw).choices[0].text
    stop = plain_window(text)
    want = text[: text.find(stop)]
    r = client.completions.create(stop=[stop, "\x00never"], **kw)
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == want
    streamed = "".join(c.choices[0].text for c in client.completions.create(stop=stop, stream=True, **kw) if c.choices)
    assert streamed == want
    # Chat: the reply ends at the stop string, which appears in neither reasoning nor content.
    kw = dict(model=model_info["id"], messages=CHAT, max_tokens=40, temperature=0, extra_body={"ignore_eos": True})
    whole = client.chat.completions.create(**kw).choices[0].message
    stop = plain_window(full(whole))
    r = client.chat.completions.create(stop=stop, **kw)
    assert r.choices[0].finish_reason == "stop"
    assert all(stop not in part for part in reply(r.choices[0].message))
    assert r.usage.completion_tokens < 40
    chunks = list(client.chat.completions.create(stop=stop, stream=True, **kw))
    assert streamed_replies(chunks) == [reply(r.choices[0].message)]


def test_min_tokens_holds_off_stops(server, client, model_info):
    # A stop string met early ends the reply only from the min_tokens-th token on; the first tokens are the
    # free reply's (stops never change sampling), and min_tokens > max_tokens is a 400 naming the field.
    kw = dict(model=model_info["id"], prompt="Once upon a time", max_tokens=40, temperature=0,
              extra_body={"ignore_eos": True}, logprobs=0)
    free = client.completions.create(**kw).choices[0]
    stop = plain_window(free.text)
    cut = client.completions.create(stop=stop, **kw)
    assert cut.choices[0].finish_reason == "stop"
    n = cut.usage.completion_tokens + 3
    assert n <= 40
    held = client.completions.create(stop=stop, **{**kw, "extra_body": {"ignore_eos": True, "min_tokens": n}})
    assert held.usage.completion_tokens >= n
    assert held.choices[0].logprobs.tokens[:n] == free.logprobs.tokens[:n]
    body = {"model": model_info["id"], "prompt": "Hi", "max_tokens": 4, "min_tokens": 5}
    assert_error(post(server, "/v1/completions", body), 400, param="min_tokens")
    assert_good_request(client, model_info)


def test_logprobs(client, model_info):
    r = client.chat.completions.create(model=model_info["id"], messages=CHAT, max_tokens=6, temperature=0,
                                       logprobs=True, top_logprobs=3, extra_body={"ignore_eos": True})
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    for t in content:
        assert t.logprob <= 0
        assert len(t.top_logprobs) == 3
        assert t.bytes == list(t.token.encode("utf-8"))
        # Greedy: the chosen token is the most likely one.
        assert t.logprob == pytest.approx(max(x.logprob for x in t.top_logprobs), abs=1e-5)
    c = client.completions.create(model=model_info["id"], prompt="Hello", max_tokens=4, temperature=0, logprobs=2,
                                  extra_body={"ignore_eos": True})
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(len(t) <= 2 for t in lp.top_logprobs)
    assert lp.text_offset[0] == 0


def test_concurrent_burst(server, client, model_info):
    def one(i):
        r = client.chat.completions.create(model=model_info["id"], messages=[{"role": "user", "content": f"#{i}"}],
                                           max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
        return r.usage.completion_tokens

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert list(pool.map(one, range(24))) == [8] * 24
    assert health(server)["generations_active"] == 0
    assert_good_request(client, model_info)


# ------------------------------------------------------------------------------------------ bad input


def test_malformed_json(server, client, model_info):
    assert_error(post(server, "/v1/chat/completions", "{not json", raw=True), 400)
    assert_error(post(server, "/v1/chat/completions", "[1, 2]", raw=True), 400)
    assert_error(post(server, "/v1/completions", b"{\"prompt\": \"\xff\"}", raw=True), 400)
    assert_good_request(client, model_info)


@pytest.mark.parametrize("body,param", [
    ({"messages": "hi"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": CHAT, "temperature": "hot"}, "temperature"),
    ({"messages": CHAT, "max_tokens": "many"}, "max_tokens"),
    ({"messages": CHAT, "n": 0}, "n"),
    ({"messages": CHAT, "stop": [1]}, "stop[0]"),
    ({"messages": CHAT, "stream": "yes"}, "stream"),
    ({"messages": CHAT, "seed": 1.5}, "seed"),
    ({"messages": CHAT, "top_logprobs": 2}, "top_logprobs"),
])
def test_wrong_types_name_the_field(server, client, model_info, body, param):
    assert_error(post(server, "/v1/chat/completions", body), 400, param=param)
    assert_good_request(client, model_info)


def test_completions_bad_prompt(server, client, model_info):
    assert_error(post(server, "/v1/completions", {"prompt": {"a": 1}}), 400, param="prompt")
    assert_error(post(server, "/v1/completions", {"prompt": [1, 10 ** 9]}), 400, param="prompt[1]")
    assert_error(post(server, "/v1/completions", {}), 400, param="prompt")
    assert_good_request(client, model_info)


def test_unknown_fields_are_ignored(server, model_info):
    r = post(server, "/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "frobnicate": [1, {"x": None}],
                                              "response_format": {"type": "text"}})
    assert r.status_code == 200, r.text


def test_unknown_model_404(server, client, model_info):
    assert_error(post(server, "/v1/chat/completions", {"model": "gpt-5", "messages": CHAT}), 404,
                 code="model_not_found")
    assert_error(post(server, "/v1/completions", {"model": "gpt-5", "prompt": "x"}), 404, code="model_not_found")
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="gpt-5", messages=CHAT)
    assert_error(requests.get(server.url + "/v1/nope", headers=auth()), 404)
    assert_good_request(client, model_info)


def test_context_length_exceeded(server, client, model_info):
    ctx = model_info["context_length"]
    err = assert_error(post(server, "/v1/completions", {"prompt": "Hello", "max_tokens": ctx}), 400,
                       code="context_length_exceeded")
    assert str(ctx) in err["message"]
    long_prompt = "hello " * (ctx * 2)
    err = assert_error(post(server, "/v1/chat/completions", {"messages": [{"role": "user", "content": long_prompt}]}),
                       400, code="context_length_exceeded")
    assert str(ctx) in err["message"]
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model_info["id"], prompt="Hello", max_tokens=ctx)
    assert_good_request(client, model_info)


def test_api_key(server, client, model_info):
    assert_error(post(server, "/v1/chat/completions", {"messages": CHAT}, headers={}), 401, code="invalid_api_key")
    assert_error(post(server, "/v1/chat/completions", {"messages": CHAT}, headers=auth("wrong")), 401,
                 code="invalid_api_key")
    assert_error(requests.get(server.url + "/v1/models"), 401)
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert requests.get(server.url + "/health").status_code == 200  # health stays open
    assert_good_request(client, model_info)


def raw_request(server, data, read_timeout=10):
    """Sends bytes on a fresh connection and returns what the server answers before closing or going quiet."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=read_timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out and out.count(b"}") >= 1:
                    break
        except (socket.timeout, ConnectionResetError):
            pass
        return out


def test_body_too_large_413(server, client, model_info):
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {50 << 20}\r\n\r\n").encode()
    out = raw_request(server, head)
    assert out.startswith(b"HTTP/1.1 413"), out[:200]
    assert b'"request_too_large"' in out
    # A body actually sent, just over the limit.
    try:
        r = post(server, "/v1/completions", {"prompt": "x" * (1 << 20)})
        assert_error(r, 413)
    except requests.ConnectionError:
        pass  # the server may close before reading it all; the raw test above checked the answer
    assert_good_request(client, model_info)


def test_slow_loris(server, client, model_info):
    # Ten connections that send half a request and stall: the server must keep serving others, and drop
    # each stalled one after its read timeout.
    socks = []
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT_S * 5)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
        socks.append(s)
    half_body = socket.create_connection(("127.0.0.1", server.port), timeout=READ_TIMEOUT_S * 5)
    half_body.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"pro")
    socks.append(half_body)
    assert_good_request(client, model_info)
    t0 = time.time()
    for s in socks:
        try:
            data = s.recv(4096)  # b"" (closed) or an error response; never a hang
            assert data == b"" or data.startswith(b"HTTP/1.1 4"), data[:100]
        except ConnectionResetError:
            pass
        s.close()
    assert time.time() - t0 < READ_TIMEOUT_S * 4
    assert_good_request(client, model_info)


def test_dropped_stream_stops_generation(server, client, model_info):
    before = health(server)
    ctx = model_info["context_length"]
    body = {"messages": [{"role": "user", "content": "Go"}], "max_tokens": ctx - 64, "stream": True,
            "ignore_eos": True, "n": 16, "seed": 5}
    data = json.dumps(body).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API_KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(head + data)
        got = b""
        while got.count(b"data: {") < 6:  # the role deltas and a few tokens
            chunk = sock.recv(4096)
            assert chunk, got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got[:200]
    # The connection is closed mid-reply here.
    deadline = time.time() + 20
    while time.time() < deadline:
        h = health(server)
        if h["generations_active"] == 0 and h["engine"]["running"] == 0 and h["engine"]["waiting"] == 0:
            break
        time.sleep(0.05)
    assert h["generations_active"] == 0
    assert h["cancelled_by_client"] > before["cancelled_by_client"], h
    assert h["engine"]["requests_cancelled"] > before["engine"]["requests_cancelled"], h
    # The engine stopped: no more tokens are being produced for it.
    a = health(server)["engine"]["generated_tokens"]
    time.sleep(0.3)
    assert health(server)["engine"]["generated_tokens"] == a
    assert a - before["engine"]["generated_tokens"] < 16 * (ctx - 64), "generation ran to the end"
    assert_good_request(client, model_info)


def test_request_log(server):
    lines = [json.loads(l) for l in server.log_text().splitlines() if l.startswith("{")]
    chats = [l for l in lines if l.get("path") == "/v1/chat/completions" and l["status"] == 200]
    assert chats and all("prompt_tokens" in l and "completion_tokens" in l and "id" in l for l in chats)
    assert any(l["status"] == 401 for l in lines)


def test_sigterm_mid_stream_exits_zero():
    s = Server()
    body = {"prompt": "Go", "max_tokens": 400, "stream": True, "ignore_eos": True}
    with requests.post(s.url + "/v1/completions", json=body, headers=auth(), stream=True, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)
        s.proc.send_signal(signal.SIGTERM)
        rest = [l for l in lines if l]
    assert s.proc.wait(timeout=30) == 0, s.log_text()
    assert rest == [] or rest[-1] == b"data: [DONE]"
