#!/usr/bin/env bash
# One short device call: `tensorfold serve --parallel auto` on the GPU with the demo model, answering
# /health, a chat completion (streamed and not), /metrics, and shutting down cleanly.
set -uo pipefail
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.device:${LD_LIBRARY_PATH:-}
.device/tensorfold serve --backend cuda --parallel auto --port 18080 > /tmp/serve.log 2>&1 &
pid=$!
for i in $(seq 1 100); do curl -sf localhost:18080/health > /dev/null && break; sleep 0.2; done
curl -s localhost:18080/health; echo
curl -s localhost:18080/v1/chat/completions -H 'content-type: application/json' \
  -d '{"messages":[{"role":"user","content":"What does `os.path.join` do?"}],"max_tokens":80,"temperature":0}'; echo
curl -sN localhost:18080/v1/completions -d '{"prompt":"def add(a, b):","max_tokens":24,"stream":true,"temperature":0}' | tail -3
curl -s localhost:18080/metrics | grep -E "^vllm:(num_requests_running|generation_tokens_total|gpu_cache_usage_perc)" | head
kill -TERM $pid; wait $pid; echo "serve exit code $?"
cat /tmp/serve.log
