#!/usr/bin/env bash
# One device call for the prompt-cache and drafting-ceiling benchmarks at the Qwen3-8B shape (random bf16
# weights written to /dev/shm on the device; issues #9 and #7b):
#   1. `bench --cache-check`: an 8,000-token prompt's time to first token uncached / memory hit / spill
#      read-back (evicted to disk, read back), outputs token-identical (MATCH);
#   2. `bench --chat-turns 10`: turn 10 of a chat whose history grows to ~8,200 tokens, cached vs uncached;
#   3. `bench --drafter replay --sweep`: the ceiling of drafting (a replay of the serial run, every draft
#      accepted), k = 1..8, at 1 and 8 streams: tokens/s over serial and mean accepted length.
# Build here (CUDA on) and carry the binary with the libraries the device lacks, as for device_e2e.sh:
#   cmake --build build --target tensorfold && cp build/tensorfold .device/   (.device/ also holds
#   libcpp-httplib.so.0.11, libutf8proc.so.2 and qwen3-tok/, see device_e2e.sh)
#   run(command="tools/device_cache_bench.sh", carry=[".device"], timeout_s=600)
# PARTS="cache chat replay" selects parts; REPLAY_PARALLEL="1 8" the stream counts of part 3.
# Expected: ~1 min to write the checkpoint, ~15 s per engine start (4 starts), ~3-5 min in all.
set -uo pipefail
cd "$(dirname "$0")/.."
D=.device
OUT=${OUT:-/tmp/out}
CKPT=${CKPT:-/dev/shm/q8b}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$D:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
TF=$D/tensorfold
{
  date -u; git log -1 --format='commit %H' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
  ldd $TF | grep "not found" | sed "s|^|$TF: |"
  df -h /tmp /dev/shm | tail -2
} 2>&1 | tee "$OUT/env.log"
if [[ ! -f $CKPT/config.json ]]; then
  t0=$(date +%s)
  python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $CKPT --tokenizer $D/qwen3-tok 2>&1 | tail -3
  echo "checkpoint written in $(( $(date +%s) - t0 )) s"
fi
rc=0
step() {  # name, timeout, args...
  local name=$1 limit=$2
  shift 2
  echo "== $name: tensorfold bench $CKPT $*"
  local t0=$(date +%s)
  timeout $limit $TF bench $CKPT --backend cuda "$@" || { echo "== $name FAILED (rc=$?)"; rc=1; }
  echo "== $name took $(( $(date +%s) - t0 )) s"
}
{
  for part in ${PARTS:-cache chat replay}; do
    case $part in
      cache) step cache-check 240 --cache-check --prompt-tokens 8000 --context 9000 --tokens 16 ;;
      chat) step chat-turn-10 240 --chat-turns 10 --prompt-tokens 8192 --context 9000 --tokens 64 ;;
      replay)
        for par in ${REPLAY_PARALLEL:-1 8}; do
          step "replay-ceiling-parallel-$par" 240 --drafter replay --sweep --max-draft 8 --workload random \
            --prompt-tokens 128 --tokens 128 --parallel $par --context 4096
        done ;;
    esac
  done
} > "$OUT/cache_bench.log" 2>&1  # not a pipe: `rc` must survive the group
cat "$OUT/cache_bench.log"
echo "== summary rc=$rc"
grep -E "^==|^  |MATCH|^\| random|^model|tokens of history|^prompt" "$OUT/cache_bench.log" | grep -v "^== .*: tensorfold"
exit $rc
