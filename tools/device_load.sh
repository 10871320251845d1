#!/usr/bin/env bash
# Issue 8's HTTP load benchmark on the GPU: a random-weight Qwen3-8B checkpoint made on the device,
# `tensorfold serve --parallel 64 --no-drafts` on it, and tf-loadgen at 1, 8, 32 and 64 concurrent
# streaming clients (512-token random prompts, 256 output tokens each, "ignore_eos"). Logs and the JSON
# report go to $OUT; the markdown table is printed last.
#
# PACK FIRST, HERE (the GPU machine has no -dev packages; .device/ already holds libcpp-httplib.so.0.11,
# libutf8proc.so.2 and the Qwen3 tokenizer in .device/qwen3-tok, as for tools/device_e2e.sh E2E_8B=1):
#   cmake --build build --target tensorfold tf-loadgen -j2        # the CUDA build (TF_CUDA on)
#   strip -o .device/tensorfold build/tensorfold
#   strip -o .device/tf-loadgen build/bench/loadgen/tf-loadgen     # client only: no CUDA, same libraries
# Then one device call:  run(command="tools/device_load.sh", carry=[".device"], timeout_s=420)
# Expected: ~1 min for the checkpoint and server start, ~1-2 min of load; every level is capped by
# LOAD_DURATION (no new request after it) and the whole load by a 300 s timeout.
#
# Knobs (environment): LOAD_CLIENTS=1,8,32,64 LOAD_PROMPT=512 LOAD_TOKENS=256 LOAD_REQUESTS=2 (per client
# and level) LOAD_DURATION=40 (s per level) LOAD_CONTEXT=2048 LOAD_MODEL=/dev/shm/q8b (kept if present)
# LOAD_SERVE_ARGS (extra serve flags, e.g. "--decode-share 0.5"). A CPU dry run of the script itself:
#   LOAD_BIN_DIR=<dir with tensorfold, tf-loadgen> LOAD_BACKEND=cpu LOAD_MODEL=models/demo LOAD_CLIENTS=1,4 \
#   LOAD_PROMPT=64 LOAD_TOKENS=16 OUT=/tmp/load tools/device_load.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
D=${LOAD_BIN_DIR:-.device}
OUT=${OUT:-/tmp/out}
MODEL=${LOAD_MODEL:-/dev/shm/q8b}
PORT=18090
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$D:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t_start=$(date +%s)
{
  date -u; git log -1 --format='commit %H' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
  for b in $D/tensorfold $D/tf-loadgen; do
    [[ -x $b ]] || echo "MISSING $b: pack it first (see the header of $0)"
    ldd "$b" 2>/dev/null | grep "not found" | sed "s|^|$b: |"
  done
} 2>&1 | tee "$OUT/env.log"
[[ -x $D/tensorfold && -x $D/tf-loadgen ]] || exit 2

if [[ ! -f $MODEL/config.json ]]; then
  t0=$(date +%s)
  python3 tools/make_random_checkpoint.py --shape qwen3-8b --out "$MODEL" --tokenizer "$D/qwen3-tok" 2>&1 |
    tail -5 | tee "$OUT/checkpoint.log"
  echo "checkpoint written in $(($(date +%s) - t0)) s" | tee -a "$OUT/checkpoint.log"
fi

t0=$(date +%s)
# shellcheck disable=SC2086
$D/tensorfold serve "$MODEL" --backend "${LOAD_BACKEND:-cuda}" --parallel 64 --no-drafts --context "${LOAD_CONTEXT:-2048}" \
  --prompt-cache-gib 0 --max-queue 256 --port $PORT ${LOAD_SERVE_ARGS:-} > "$OUT/serve.log" 2>&1 &
pid=$!
stop_server() {  # not in a pipeline: `wait` needs the server to be this shell's child
  kill -TERM $pid 2>/dev/null
  wait $pid
  echo "serve exit code $?" >> "$OUT/load.log"
}
ready=0
for _ in $(seq 1 900); do
  if ! kill -0 $pid 2>/dev/null; then break; fi
  if curl -sf localhost:$PORT/health > /dev/null; then ready=1; break; fi
  sleep 0.2
done
if [[ $ready != 1 ]]; then
  echo "serve did not become ready (log tail below)"
  tail -30 "$OUT/serve.log"
  stop_server
  tail -1 "$OUT/load.log"
  exit 1
fi
echo "serve ready in $(($(date +%s) - t0)) s" | tee "$OUT/load.log"
curl -s localhost:$PORT/health | tee -a "$OUT/load.log"; echo

timeout 300 "$D/tf-loadgen" --url http://127.0.0.1:$PORT --clients "${LOAD_CLIENTS:-1,8,32,64}" \
  --prompt-tokens "${LOAD_PROMPT:-512}" --max-tokens "${LOAD_TOKENS:-256}" --requests "${LOAD_REQUESTS:-2}" \
  --duration "${LOAD_DURATION:-40}" --json "$OUT/load.json" > "$OUT/load.md" 2>> "$OUT/load.log"
rc=$?
curl -s localhost:$PORT/metrics > "$OUT/metrics.txt"
{ curl -s localhost:$PORT/health; echo; } >> "$OUT/load.log"
stop_server

echo "== serve log (tail)"; tail -8 "$OUT/serve.log"
echo "== loadgen progress"; cat "$OUT/load.log"
echo "== metrics"; grep -E "^(tensorfold_(generation_tokens_total|requests_finished|preemptions)|vllm:(time_to_first_token|inter_token_latency)_seconds_(sum|count))" "$OUT/metrics.txt"
echo "== table (tf-loadgen rc=$rc, $(($(date +%s) - t_start)) s in all)"
cat "$OUT/load.md"
exit $rc
