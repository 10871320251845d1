#!/usr/bin/env python3
"""End-to-end checks of the API features that sample on the host, against a real `tensorfold serve` on any
backend (the GPU stage of tools/device_session.sh runs it with --backend cuda; the standard library only,
as the device machine has no SDKs):

  - structured outputs: a json_schema reply parses and has the schema's keys, and is the same with drafts on
    and off (constrained verify rows are sampled under the mask of the accepted tokens);
  - guided_choice picks one of the choices; a forced tool call is a valid call;
  - prompt logprobs: echo + logprobs scores the prompt with the numbers generation reported for the same
    tokens, bit for bit (prefill rows vs decode rows: row invariance on this backend).

  tools/api_check.py --bin build/tensorfold [--backend cpu|cuda] [--model DIR]
Prints one line per check and exits 1 if any failed."""
import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                            "lines": {"type": "integer"}, "tested": {"type": "boolean"}},
          "required": ["name", "lines", "tested"]}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]


def post(url, path, body):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--model", default=None)
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [a.bin, "serve"] + ([a.model] if a.model else []) + ["--backend", a.backend, "--port", str(port)]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    failed = 0

    def check(name, ok, detail=""):
        nonlocal failed
        failed += not ok
        print(("PASS " if ok else "FAIL ") + name + ("" if ok else ": " + detail), flush=True)

    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/health", timeout=1)
                break
            except Exception:
                if server.poll() is not None:
                    print("FAIL server exited: " + server.stderr.read()[-2000:])
                    return 1
                time.sleep(0.2)
        ask = [{"role": "user", "content": "Describe json.loads as JSON."}]
        fmt = {"type": "json_schema", "json_schema": {"name": "card", "schema": PERSON}}
        for t, seed in [(0, 1), (0.8, 2)]:
            body = {"messages": ask, "max_tokens": 160, "temperature": t, "seed": seed, "response_format": fmt}
            on = post(url, "/v1/chat/completions", body)["choices"][0]
            off = post(url, "/v1/chat/completions", dict(body, draft=False))["choices"][0]
            check(f"json_schema T={t}: drafts on == off", on["message"] == off["message"], f"{on} vs {off}")
            if on["finish_reason"] == "stop":
                doc = json.loads(on["message"]["content"])
                check(f"json_schema T={t}: valid", list(doc) == list(PERSON["properties"]), on["message"]["content"])
        choice = post(url, "/v1/chat/completions", {"messages": ask, "max_tokens": 160, "temperature": 1, "seed": 3,
                                                    "guided_choice": ["yes", "no"]})["choices"][0]
        check("guided_choice", choice["message"]["content"] in ("yes", "no"), str(choice))
        call = post(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "add 2 and 3"}],
                                                  "max_tokens": 60, "tools": TOOLS, "tool_choice": "required"})
        c = call["choices"][0]
        ok = c["finish_reason"] == "tool_calls" and set(json.loads(c["message"]["tool_calls"][0]["function"]["arguments"])) == {"a", "b"}
        check("forced tool call", ok, str(c))
        ctx = "def fibonacci(n):\n    "
        gen = post(url, "/v1/completions", {"prompt": ctx, "max_tokens": 12, "temperature": 0, "logprobs": 2})
        g = gen["choices"][0]
        sc = post(url, "/v1/completions", {"prompt": ctx + g["text"], "max_tokens": 1, "temperature": 0,
                                           "logprobs": 2, "echo": True})["choices"][0]["logprobs"]
        n = len(g["logprobs"]["tokens"])
        same_tokens = sc["tokens"][-1 - n:-1] == g["logprobs"]["tokens"]
        check("echo logprobs: prompt tokens", same_tokens, f'{sc["tokens"][-1 - n:-1]} vs {g["logprobs"]["tokens"]}')
        if same_tokens:
            check("echo logprobs == generation logprobs (bitwise)",
                  sc["token_logprobs"][-1 - n:-1] == g["logprobs"]["token_logprobs"] and
                  sc["top_logprobs"][-1 - n:-1] == g["logprobs"]["top_logprobs"],
                  f'{sc["token_logprobs"][-1 - n:-1]} vs {g["logprobs"]["token_logprobs"]}')
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"api_check: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
