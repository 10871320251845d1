"""Shared rounds through the real server (issue 8): many concurrent streams with mixed lengths, seeds,
temperatures and drafting flags, started at staggered times, each equal to its solo output; a full wait
queue answers 429 with Retry-After; a cancelled client frees its KV blocks.

    TF_SERVER_CMD="build/tensorfold serve --backend cpu" TF_SERVER_MODEL=tests/data/tiny/qwen3 pytest ...
"""
import concurrent.futures
import time

import pytest
import requests

import serverutil


def Server(*extra):
    """The tiny model's server without API keys (these tests talk to it with plain requests)."""
    return serverutil.Server(*extra, api_key=None, need_model=True, test_limits=False)


@pytest.fixture(scope="module")
def server():
    s = Server("--parallel", "4", "--prompt-cache-gib", "0")
    yield s
    s.stop()


REQUESTS = [
    dict(prompt="Well, Prince, so Genoa", max_tokens=12, temperature=0.0, seed=None, draft=True),
    dict(prompt="def main(argv):", max_tokens=40, temperature=0.8, seed=1, draft=True),
    dict(prompt="the the the the the", max_tokens=25, temperature=0.0, seed=None, draft=False),
    dict(prompt="Anna Pavlovna", max_tokens=33, temperature=1.2, seed=7, draft=True),
    dict(prompt="for i in range(10):", max_tokens=18, temperature=0.7, seed=3, draft=False),
    dict(prompt="He spoke", max_tokens=50, temperature=0.5, seed=11, draft=True),
    dict(prompt="family estates", max_tokens=8, temperature=0.0, seed=None, draft=True),
    dict(prompt="Lucca are now just", max_tokens=29, temperature=1.0, seed=5, draft=False),
    dict(prompt="so Genoa and Lucca", max_tokens=21, temperature=0.9, seed=2, draft=True),
]


def complete(client, r, delay=0.0):
    time.sleep(delay)
    extra = {"draft": r["draft"], "ignore_eos": True}
    model = client.models.list().data[0].id
    out = client.completions.create(model=model, prompt=r["prompt"], max_tokens=r["max_tokens"],
                                    temperature=r["temperature"], seed=r["seed"], logprobs=1, extra_body=extra)
    c = out.choices[0]
    return c.text, c.logprobs.tokens, c.finish_reason


def test_concurrent_streams_equal_their_solo_runs(server):
    client = server.client()
    solo = [complete(client, r) for r in REQUESTS]
    with concurrent.futures.ThreadPoolExecutor(len(REQUESTS)) as pool:
        futures = [pool.submit(complete, client, r, 0.02 * (i % 3)) for i, r in enumerate(REQUESTS)]
        shared = [f.result() for f in futures]
    for i, (a, b) in enumerate(zip(solo, shared)):
        assert a == b, f"stream {i} differs when sharing rounds"
    assert all(s[2] == "length" for s in shared)
    # A stream's last event reaches its client just before the engine thread takes it off its running
    # list (the same round, under the engine's lock): give the gauges a moment (CI saw running == 1 once).
    deadline = time.time() + 5
    while True:
        health = requests.get(server.url + "/health").json()["engine"]
        if health["running"] == 0 or time.time() > deadline:
            break
        time.sleep(0.02)
    assert health["kv_blocks_used"] == 0 and health["running"] == 0


def test_full_queue_answers_429_and_others_finish():
    s = Server("--parallel", "1", "--max-queue", "1", "--prompt-cache-gib", "0")
    try:
        def stream(i):
            r = requests.post(s.url + "/v1/completions", json={"prompt": "Well", "max_tokens": 300, "ignore_eos": True,
                                                             "temperature": 0.5, "seed": i, "stream": True},
                              stream=True, timeout=120)
            if r.status_code != 200:
                return r.status_code, r.headers.get("Retry-After"), r.json()
            lines = [line for line in r.iter_lines() if line.startswith(b"data: ")]
            return 200, None, lines[-1]
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            results = list(pool.map(stream, range(5)))
        refused = [r for r in results if r[0] == 429]
        served = [r for r in results if r[0] == 200]
        assert refused, f"no request was refused: {results}"
        for status, retry_after, body in refused:
            assert retry_after is not None
            assert body["error"]["type"] == "rate_limit_error"
        assert len(served) >= 2 and all(r[2] == b"data: [DONE]" for r in served)
        # The server keeps serving.
        ok = requests.post(s.url + "/v1/completions", json={"prompt": "Well", "max_tokens": 3}, timeout=60)
        assert ok.status_code == 200
    finally:
        s.stop()


def long_request(path, model):
    """A streamed request to `path` that runs long enough to hold the only running slot or queue place."""
    user = [{"role": "user", "content": "Well"}]
    return {
        "/v1/completions": {"prompt": "Well", "max_tokens": 300, "ignore_eos": True, "stream": True},
        "/v1/chat/completions": {"messages": user, "max_tokens": 300, "ignore_eos": True, "stream": True},
        "/v1/responses": {"input": "Well", "max_output_tokens": 300, "stream": True},
        "/v1/messages": {"model": model, "messages": user, "max_tokens": 300, "stream": True},
    }[path]


def test_every_endpoint_answers_429_with_retry_after():
    """A full queue refuses every generating endpoint with 429, Retry-After and its own API's error shape."""
    s = Server("--parallel", "1", "--max-queue", "1", "--prompt-cache-gib", "0")
    try:
        model = requests.get(s.url + "/v1/models", timeout=10).json()["data"][0]["id"]
        paths = ["/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages"]

        def call(path):
            r = requests.post(s.url + path, json=long_request(path, model), stream=True, timeout=120)
            if r.status_code != 200:
                return path, r.status_code, r.headers.get("Retry-After"), r.json()
            for _ in r.iter_lines():
                pass
            return path, 200, None, None
        refused = set()
        for _ in range(8):  # which requests find the queue full depends on timing: rounds until each did
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                results = list(pool.map(call, ["/v1/completions"] * 2 + paths * 2))
            for path, status, retry_after, body in results:
                assert status in (200, 429), (path, status, body)
                if status != 429:
                    continue
                assert retry_after is not None and int(retry_after) >= 1, path
                if path == "/v1/messages":
                    assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error", body
                else:
                    assert body["error"]["type"] == "rate_limit_error", body
                refused.add(path)
            if refused == set(paths):
                break
        assert refused == set(paths)
    finally:
        s.stop()


def test_cancelled_stream_frees_its_blocks(server):
    r = requests.post(server.url + "/v1/completions", json={"prompt": "Well", "max_tokens": 400, "ignore_eos": True,
                                                           "stream": True}, stream=True, timeout=60)
    lines = r.iter_lines()
    for _ in range(3):
        next(lines)
    r.close()
    deadline = time.time() + 30
    while time.time() < deadline:
        e = requests.get(server.url + "/health").json()["engine"]
        if e["running"] == 0 and e["kv_blocks_used"] == 0:
            break
        time.sleep(0.1)
    assert e["running"] == 0 and e["kv_blocks_used"] == 0 and e["requests_cancelled"] >= 1
