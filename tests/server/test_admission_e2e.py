"""Shared rounds and admission through the real server on the demo model (issue 8), complementing
test_shared_rounds_e2e.py (tiny Qwen3, overlapping starts):
- streams that join while others are mid-reply (each starts when the previous one has streamed tokens),
  with mixed lengths, seeds, temperatures and drafting flags (the demo model's MTP head drafts), and two
  clients that hang up mid-reply, each remaining stream equal to its solo run;
- queueing as documented: with every slot busy, requests wait (visible in /health and /metrics), one more
  than --max-queue is answered 429 with Retry-After before any streaming, and the waiting ones then finish
  with their solo output;
- a request that can never fit (prompt + max_tokens over --context) is refused at once with HTTP 400 and
  the numbers, also when it asked for a stream;
- cancelled clients free their blocks: KV usage in /metrics returns to its start value.

    TF_SERVER_CMD="build/tensorfold serve --backend cpu" pytest tests/server/test_admission_e2e.py
"""
import json
import signal
import socket
import threading
import time

import pytest
import requests

import serverutil

CONTEXT = 512  # --context of the servers below: small, so "never fits" is cheap to ask for


class Server(serverutil.Server):
    """`tensorfold serve` on the demo model (no MODEL argument) with extra flags, no API key."""

    def __init__(self, *extra, context=CONTEXT):
        super().__init__("--context", str(context), "--prompt-cache-gib", "0", *extra, api_key=None,
                         test_limits=False)

    def engine(self):
        return requests.get(self.url + "/health", timeout=10).json()["engine"]

    def metrics(self):
        out = {}
        for line in requests.get(self.url + "/metrics", timeout=10).text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name.split("{")[0]] = float(value)
        return out

    def wait_idle(self, timeout=30):
        deadline = time.time() + timeout
        while True:
            e = self.engine()
            if (e["running"] == 0 and e["waiting"] == 0 and e["kv_blocks_used"] == 0) or time.time() > deadline:
                return e
            time.sleep(0.05)

    def stop(self):
        assert super().stop() == 0


class Stream:
    """One streamed completion read on a thread: its text and tokens (from logprobs), or a hang-up after
    `hang_up_after` chunks. `started` is set once `signal_after` chunks have arrived."""

    def __init__(self, url, req, hang_up_after=None, signal_after=2):
        self.url, self.req, self.hang_up_after, self.signal_after = url, req, hang_up_after, signal_after
        self.started = threading.Event()
        self.result, self.error = None, None
        self.first_token_at, self.ended_at = None, None

    def run(self, after=None):
        try:
            if after is not None:
                after.wait(timeout=60)
            self.result = self._read()
        except Exception as e:  # reported by the test, not lost on the thread
            self.error = e
        finally:
            self.ended_at = time.monotonic()
            self.started.set()

    def _read(self):
        body = {"prompt": self.req["prompt"], "max_tokens": self.req["max_tokens"], "ignore_eos": True,
                "temperature": self.req["temperature"], "seed": self.req["seed"], "draft": self.req["draft"],
                "logprobs": 0, "stream": True, "stream_options": {"include_usage": True}}
        r = requests.post(self.url + "/v1/completions", json=body, stream=True, timeout=120)
        assert r.status_code == 200, r.text
        text, tokens, finish, usage, chunks = "", [], None, None, 0
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                break
            c = json.loads(line[6:])
            assert "error" not in c, c
            usage = c.get("usage") or usage
            for ch in c["choices"]:
                text += ch["text"]
                tokens += (ch.get("logprobs") or {}).get("tokens", [])
                finish = ch["finish_reason"] or finish
                chunks += 1
                if chunks == 1:
                    self.first_token_at = time.monotonic()
                if chunks == self.signal_after:
                    self.started.set()
                if self.hang_up_after and chunks >= self.hang_up_after:
                    r.close()
                    return "hung up"
        return text, tokens, finish, usage["completion_tokens"]


def solo(url, req):
    s = Stream(url, req)
    s.run()
    if s.error:
        raise s.error
    return s.result


@pytest.fixture(scope="module")
def server():
    # Drafting in every round: the subject is exactness of drafted streams sharing rounds. The draft guard
    # (on by default) may switch drafting off after a few rounds that lose wall time on this CPU, and then
    # the check below that drafts really ran would fail for a reason the test is not about.
    s = Server("--parallel", "4", "--draft-guard", "off")
    yield s
    s.stop()


STREAMS = [
    dict(prompt="Well, Prince, so Genoa", max_tokens=40, temperature=0.0, seed=1, draft=True),
    dict(prompt="def main(argv):", max_tokens=64, temperature=0.8, seed=2, draft=True),
    dict(prompt="the the the the the", max_tokens=25, temperature=0.0, seed=3, draft=False),
    dict(prompt="Anna Pavlovna", max_tokens=48, temperature=1.2, seed=4, draft=True),
    dict(prompt="for i in range(10):", max_tokens=18, temperature=0.7, seed=5, draft=False),
    dict(prompt="He spoke", max_tokens=70, temperature=0.5, seed=6, draft=True),
    dict(prompt="family estates", max_tokens=9, temperature=0.0, seed=7, draft=True),
    dict(prompt="Lucca are now just", max_tokens=33, temperature=1.0, seed=8, draft=False),
    dict(prompt="so Genoa and Lucca", max_tokens=21, temperature=0.9, seed=9, draft=True),
]
HANG_UP = dict(prompt="Write a long story about", max_tokens=400, temperature=0.7, seed=10, draft=True)


def test_streams_joining_midway_equal_their_solo_runs(server):
    expected = [solo(server.url, r) for r in STREAMS]
    for (text, tokens, finish, n), r in zip(expected, STREAMS):
        assert finish == "length" and n == r["max_tokens"] == len(tokens) and "".join(tokens) == text
    start = server.metrics()
    # Chain: streams 0 and 1 start together; every later one starts once the one before it streams
    # tokens, so it joins rounds in which others are mid-reply (and waits for a slot when all 4 are busy).
    # Two clients hang up after three chunks while the others run.
    streams = [Stream(server.url, r) for r in STREAMS]
    hang_ups = [Stream(server.url, HANG_UP, hang_up_after=3), Stream(server.url, HANG_UP, hang_up_after=3)]
    threads = [threading.Thread(target=streams[0].run), threading.Thread(target=streams[1].run)]
    threads += [threading.Thread(target=s.run, args=(streams[i].started,)) for i, s in enumerate(streams[2:], 1)]
    threads += [threading.Thread(target=hang_ups[0].run, args=(streams[2].started,)),
                threading.Thread(target=hang_ups[1].run, args=(streams[5].started,))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    for i, (s, want) in enumerate(zip(streams, expected)):
        assert s.error is None, f"stream {i}: {s.error!r}"
        assert s.result == want, f"stream {i} differs when sharing rounds: {s.result} != {want}"
    assert all(h.error is None and h.result == "hung up" for h in hang_ups)
    # The chain really overlapped: most streams got tokens while the one before them was still replying.
    overlapped = sum(b.first_token_at < a.ended_at for a, b in zip(streams, streams[1:]))
    assert overlapped >= len(streams) // 2, f"only {overlapped} streams joined a running one"
    end = server.metrics()
    assert end["tensorfold_spec_decode_draft_tokens_total"] > start["tensorfold_spec_decode_draft_tokens_total"]
    # The hung-up clients' streams are cancelled and every block returns to the pool.
    e = server.wait_idle()
    assert e["running"] == 0 and e["kv_blocks_used"] == 0, e
    end = server.metrics()
    assert end["tensorfold_requests_cancelled_total"] - start["tensorfold_requests_cancelled_total"] == 2
    assert end["tensorfold_kv_blocks_used"] == start["tensorfold_kv_blocks_used"] == 0
    assert end["vllm:gpu_cache_usage_perc"] == start["vllm:gpu_cache_usage_perc"]


def test_request_that_can_never_fit_is_refused_before_streaming(server):
    ids = requests.post(server.url + "/tokenize", json={"prompt": "Well, Prince, so Genoa"}, timeout=10).json()
    n = ids["count"]
    for body in ({"prompt": "Well, Prince, so Genoa", "max_tokens": CONTEXT, "stream": True},
                 {"prompt": "Well, Prince, so Genoa", "max_tokens": CONTEXT - n + 1},
                 {"prompt": [11] * (CONTEXT + 5), "max_tokens": 1, "stream": True}):
        r = requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=30)
        assert r.status_code == 400 and r.headers["Content-Type"].startswith("application/json"), r.text
        err = r.json()["error"]
        assert err["code"] == "context_length_exceeded" and str(CONTEXT) in err["message"], err
        prompt_len = len(body["prompt"]) if isinstance(body["prompt"], list) else n
        assert str(prompt_len) in err["message"], err
    # Exactly at the limit is accepted and generates every token.
    r = requests.post(server.url + "/v1/completions", timeout=120,
                      json={"prompt": "Well, Prince, so Genoa", "max_tokens": CONTEXT - n, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == CONTEXT - n
    assert server.wait_idle()["kv_blocks_used"] == 0


def test_full_queue_refuses_with_429_and_the_waiting_requests_finish():
    # The full demo context, so that the stream holding the only slot runs for seconds (~2,000 tokens)
    # while the queue is inspected; it is then cancelled.
    s = Server("--parallel", "1", "--max-queue", "2", context=2048)
    try:
        busy = Stream(s.url, HANG_UP | {"max_tokens": 2000}, hang_up_after=10**9)
        waiting = [Stream(s.url, r) for r in (STREAMS[1], STREAMS[7])]
        threads = [threading.Thread(target=busy.run)]
        threads[0].start()
        assert busy.started.wait(60) and busy.error is None
        threads += [threading.Thread(target=w.run) for w in waiting]
        for t in threads[1:]:
            t.start()
        deadline = time.time() + 30
        while s.engine()["waiting"] < 2 and time.time() < deadline:
            time.sleep(0.02)
        e, m = s.engine(), s.metrics()
        assert e["running"] == 1 and e["waiting"] == 2, e
        assert m["vllm:num_requests_running"] == 1 and m["vllm:num_requests_waiting"] == 2
        for stream in (False, True):
            r = requests.post(s.url + "/v1/completions", json={"prompt": "Well", "max_tokens": 4, "stream": stream},
                              timeout=30)
            assert r.status_code == 429, r.text
            assert int(r.headers["Retry-After"]) >= 1
            assert r.headers["Content-Type"].startswith("application/json")
            assert r.json()["error"]["type"] == "rate_limit_error"
        assert s.engine()["waiting"] == 2  # the refusals took no queue place
        # Free the slot: the hung-up stream is cancelled and the two waiting requests run to the end.
        busy.hang_up_after = 1
        threads[0].join(timeout=120)
        for t in threads[1:]:
            t.join(timeout=120)
        for w in waiting:
            assert w.error is None, repr(w.error)
            assert w.result == solo(s.url, w.req)
            assert w.result[2] == "length" and w.result[3] == w.req["max_tokens"]
        e = s.wait_idle()
        assert e["kv_blocks_used"] == 0 and e["requests_cancelled"] == 1, e
    finally:
        s.stop()


class StillWaiting(AssertionError):
    pass


def test_client_hanging_up_while_waiting_frees_its_queue_place():
    # The server writes a comment line to waiting streams every 0.5 s (the second write after a hang-up
    # fails) and the engine drops cancelled waiting requests even while every slot is busy.
    s = Server("--parallel", "1", "--max-queue", "1", context=2048)
    try:
        busy = Stream(s.url, HANG_UP | {"max_tokens": 2000}, hang_up_after=10**9)
        t = threading.Thread(target=busy.run)
        t.start()
        assert busy.started.wait(60) and busy.error is None
        r = requests.post(s.url + "/v1/completions", json={"prompt": "Well", "max_tokens": 8, "stream": True},
                          stream=True, timeout=30)
        assert r.status_code == 200 and s.engine()["waiting"] == 1
        r.close()
        deadline = time.time() + 3
        while s.engine()["waiting"] == 1 and time.time() < deadline:
            time.sleep(0.05)
        waiting = s.engine()["waiting"]
        busy.hang_up_after = 1
        t.join(timeout=60)
        if waiting != 0:
            raise StillWaiting("the hung-up waiting request still holds the only queue place")
    finally:
        s.stop()


def test_listen_backlog_holds_a_burst_of_64_connections():
    # While the server is stopped nothing is accepted: every connection the kernel completes waits in
    # the listen backlog. httplib 0.11 listens with a backlog of 5; serve raises it (http_server.cpp),
    # so a burst of 64 clients all connect.
    s = Server("--parallel", "1")
    socks = []
    try:
        port = int(s.url.rsplit(":", 1)[1])
        s.proc.send_signal(signal.SIGSTOP)
        connected = 0
        for _ in range(64):
            c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            c.settimeout(0.3)
            try:
                c.connect(("127.0.0.1", port))
                connected += 1
            except OSError:
                pass
            socks.append(c)
        s.proc.send_signal(signal.SIGCONT)
        assert connected == 64, f"only {connected} of 64 connections completed while the server was paused"
    finally:
        for c in socks:
            c.close()
        s.proc.send_signal(signal.SIGCONT)
        s.stop()
