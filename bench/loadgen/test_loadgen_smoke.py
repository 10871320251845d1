"""Smoke test of tf-loadgen against the real server on the demo model (CPU): the report parses, every request
is counted with exactly max_tokens tokens, the table agrees with the JSON, and the server's own token counter
agrees with what the clients received. Run by ctest (tests/server/CMakeLists.txt):

    TF_SERVER_CMD="build/tensorfold serve --backend cpu" TF_LOADGEN=build/bench/loadgen/tf-loadgen pytest ...
"""
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import requests


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    cmd, loadgen = os.environ.get("TF_SERVER_CMD"), os.environ.get("TF_LOADGEN")
    if not cmd or not loadgen:
        pytest.fail("TF_SERVER_CMD and TF_LOADGEN must be set (see the module docstring)")
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="tf-loadgen-serve-", suffix=".log", delete=False)
    proc = subprocess.Popen(shlex.split(cmd) + ["--port", str(port), "--parallel", "4", "--prompt-cache-gib", "0"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode} during startup; log {log.name}")
        try:
            if requests.get(url + "/health", timeout=1).status_code == 200:
                break
        except requests.RequestException:
            pass
        if time.time() > deadline:
            pytest.fail("server did not start")
        time.sleep(0.1)
    yield url
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def generated(url):
    return requests.get(url + "/health", timeout=10).json()["engine"]["generated_tokens"]


def loadgen(url, *args):
    out = tempfile.NamedTemporaryFile(prefix="tf-loadgen-", suffix=".json", delete=False).name
    p = subprocess.run([os.environ["TF_LOADGEN"], "--url", url, "--json", out, *args], capture_output=True,
                       text=True, timeout=300)
    with open(out) as f:
        text = f.read()
    return p, (json.loads(text) if text else None)


def table_rows(stdout):
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0].isdigit():
            rows[int(cells[0])] = cells
    return rows


def test_counts_match_requests_and_server(server):
    before = generated(server)
    p, rep = loadgen(server, "--clients", "1,4", "--requests", "2", "--prompt-tokens", "24", "--max-tokens", "12",
                     "--temperature", "0.7", "--warmup", "1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert rep["max_tokens"] == 12 and rep["draft"] is False and rep["count"] == "continuous"
    assert [lv["clients"] for lv in rep["levels"]] == [1, 4]
    received = 0
    for lv in rep["levels"]:
        n = 2 * lv["clients"]
        assert lv["requests"] == n and lv["errors"] == 0 and lv["short_requests"] == 0
        assert lv["output_tokens"] == 12 * n
        assert len(lv["per_request"]) == n
        for r in lv["per_request"]:
            assert r["ok"] and r["tokens"] == 12 and r["finish_reason"] == "length", r
            assert r["prompt_tokens"] == 24  # token-id prompts have exactly --prompt-tokens
            assert 1 <= r["chunks"] <= 12 and 0 < r["ttft_ms"] <= 1e3 * (r["end_s"] - r["start_s"])
            # Counted by the running usage counts: one gap per token after the first chunk's (a chunk that
            # carries k tokens, e.g. text held back at an incomplete UTF-8 character, spreads its gap over k).
            # Two chunks read by one recv() share a timestamp: a gap may be 0.
            assert 12 - 4 <= len(r["itl_ms"]) <= 12 - 1 and all(g >= 0 for g in r["itl_ms"]), r
        assert lv["output_tokens_per_s"] == pytest.approx(lv["output_tokens"] / lv["wall_s"], rel=1e-6)
        assert 0 < lv["ttft_p50_ms"] <= lv["ttft_p99_ms"] and 0 < lv["itl_p50_ms"] <= lv["itl_p99_ms"]
        received += lv["output_tokens"]
    assert rep["levels"][0]["throughput_vs_single"] == pytest.approx(1.0)
    # The server generated what the clients counted, plus the one warm-up request.
    assert generated(server) - before == received + 12
    rows = table_rows(p.stdout)
    assert sorted(rows) == [1, 4]
    for lv in rep["levels"]:
        cells = rows[lv["clients"]]
        assert int(cells[1]) == lv["requests"] and int(cells[2]) == 0 and int(cells[3]) == lv["output_tokens"]
        assert float(cells[5]) == pytest.approx(lv["output_tokens_per_s"], abs=0.06)


def test_count_modes_agree(server):
    # The same requests counted per text chunk (usage) and by the running counts (continuous): same tokens.
    for mode in ("usage", "continuous"):
        p, rep = loadgen(server, "--clients", "2", "--requests", "1", "--prompt-tokens", "16", "--max-tokens", "20",
                         "--count", mode, "--warmup", "0")
        assert p.returncode == 0, p.stdout + p.stderr
        assert rep["count"] == mode and rep["levels"][0]["output_tokens"] == 40
        assert all(r["tokens"] == 20 for r in rep["levels"][0]["per_request"])


def test_drafting_chunks_counted_by_logprobs(server):
    before = generated(server)
    p, rep = loadgen(server, "--clients", "2", "--requests", "1", "--prompt", "repeat", "--prompt-tokens", "40",
                     "--max-tokens", "30", "--draft", "--count", "logprobs", "--warmup", "0")
    assert p.returncode == 0, p.stdout + p.stderr
    lv = rep["levels"][0]
    assert lv["errors"] == 0 and lv["output_tokens"] == 60
    assert all(r["tokens"] == 30 and 1 <= r["chunks"] <= 30 for r in lv["per_request"])
    assert generated(server) - before == 60


def test_refused_requests_are_reported(server):
    # 3000 prompt tokens exceed the demo model's 2048-token context: HTTP 400 before streaming.
    p, rep = loadgen(server, "--clients", "1", "--requests", "2", "--prompt-tokens", "3000", "--max-tokens", "4",
                     "--warmup", "0")
    assert p.returncode == 1
    lv = rep["levels"][0]
    assert lv["requests"] == 2 and lv["errors"] == 2 and lv["output_tokens"] == 0
    assert "HTTP 400" in lv["error_samples"][0] and "context_length_exceeded" in lv["error_samples"][0]


def test_chat_endpoint(server):
    before = generated(server)
    p, rep = loadgen(server, "--endpoint", "chat", "--clients", "2", "--requests", "1", "--prompt-tokens", "30",
                     "--max-tokens", "10", "--warmup", "0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert rep["endpoint"] == "chat" and "/v1/chat/completions" in p.stdout
    lv = rep["levels"][0]
    assert lv["errors"] == 0 and lv["output_tokens"] == 20
    # The prompt's text plus the chat template: more tokens than the ids it was decoded from, give or take
    # the re-encoding of word pieces.
    assert all(r["tokens"] == 10 and r["prompt_tokens"] > 20 for r in lv["per_request"])
    assert generated(server) - before == 20
