"""Starting and stopping the server under test, shared by the end-to-end tests of this directory.

The server command comes from the environment, as ctest sets it:

  TF_SERVER_CMD="build/tensorfold serve --backend cpu" [TF_SERVER_MODEL=tests/data/tiny/qwen3] pytest ...
  TF_SERVER_CMD=build/tests/server/tf_fake_server pytest ...   (the HTTP layer over a fake engine)

Without TF_SERVER_MODEL, `serve` picks the embedded demo model. Nothing is skipped: a missing binary or
model fails with a message saying what to build.
"""
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time

import openai
import pytest
import requests

API_KEY = "tf-test-key"
READ_TIMEOUT_S = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def auth(key=API_KEY):
    return {"Authorization": f"Bearer {key}"}


def server_command(port, extra=(), api_key=API_KEY, need_model=False, test_limits=True):
    cmd = os.environ.get("TF_SERVER_CMD")
    if not cmd:
        pytest.fail("TF_SERVER_CMD is not set: point it at `build/tensorfold serve --backend cpu` or tf_fake_server")
    argv = shlex.split(cmd)
    if not os.path.exists(argv[0]):
        pytest.fail(f"server binary {argv[0]} does not exist: build it first (cmake --build build)")
    model = os.environ.get("TF_SERVER_MODEL")
    if need_model and not model:
        pytest.fail("TF_SERVER_MODEL must be set for this test (a model directory, e.g. tests/data/tiny/qwen3)")
    if model:
        if not os.path.isdir(model):
            pytest.fail(f"model directory {model} does not exist (tiny checkpoints: tests/data/tiny, made by "
                        "tools/make_tiny_models.py)")
        argv.append(model)
    argv += ["--port", str(port)]
    if api_key:
        argv += ["--api-key", api_key]
    if test_limits:  # short timeouts and a small body limit, so the tests of those limits run fast
        argv += ["--read-timeout", str(READ_TIMEOUT_S), "--max-body-bytes", str(1 << 20), "--log-format", "json"]
    return argv + list(extra)


class Server:
    """The server on a free port, with its log in a temporary file; ready once /health answers."""

    def __init__(self, *extra, api_key=API_KEY, need_model=False, test_limits=True):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log = tempfile.NamedTemporaryFile(prefix="tf-serve-", suffix=".log", delete=False)
        argv = server_command(self.port, extra, api_key, need_model, test_limits)
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode} during startup:\n{self.log_text()}")
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail("server did not answer /health within 120 s:\n" + self.log_text())

    def log_text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def client(self):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key or "unused", max_retries=0, timeout=120)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def serve(*extra, **kwargs):
    """Body of a module-scoped `server` fixture: `yield from serve(...)`. A server that does not exit
    cleanly on SIGTERM fails the module's last test."""
    s = Server(*extra, **kwargs)
    yield s
    code = s.stop()
    assert code == 0, f"server exited with {code} on SIGTERM:\n{s.log_text()[-4000:]}"


def first_model(server):
    r = requests.get(server.url + "/v1/models", headers=auth(server.api_key) if server.api_key else {})
    assert r.status_code == 200, r.text
    return r.json()["data"][0]
