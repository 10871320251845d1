#!/usr/bin/env bash
# One device call for the whole engine on the GPU: the CUDA kernel and model tests, the demo model through
# `tensorfold` on the CUDA backend (drafted vs serial outputs must be identical), and the verify-cost sweep
# at the Qwen3-8B shape. Build here, strip into .device/ with the two libraries the GPU machine lacks:
#   cmake --build build --target tensorfold test_cuda_backend test_cuda_model test_quant_cuda tf_bench_cuda
#   (see docs/benchmarks.md for the exact packing commands), then run(command="tools/device_e2e.sh", carry=[".device"])
set -uo pipefail
cd "$(dirname "$0")/.."
D=.device
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$D:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{
  date -u; git log -1 --format='commit %H' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
  for b in $D/tensorfold $D/test_*; do ldd $b | grep "not found" | sed "s|^|$b: |"; done
} 2>&1 | tee "$OUT/env.log"
rc=0
for t in test_cuda_backend test_cuda_model test_quant_cuda; do
  [[ -x $D/$t ]] || continue
  timeout 180 $D/$t --gtest_brief=1 2>&1 | tail -25 | tee -a "$OUT/tests.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || rc=1
done
TF=$D/tensorfold
{
  echo "== generate, demo model, greedy: cuda then cpu"
  timeout 60 $TF generate --backend cuda --chat "Write a Python function that reverses a string." -n 64 --temperature 0
  timeout 60 $TF generate --backend cpu --chat "Write a Python function that reverses a string." -n 64 --temperature 0
  for drafter in ${DRAFTERS:-auto models/demo/draft none}; do
    for temp in 0 0.7; do
      for par in 1 8; do
        echo "== bench cuda drafter=$drafter temperature=$temp parallel=$par"
        timeout 90 $TF bench --backend cuda --drafter $drafter --temperature $temp --parallel $par --tokens 256 || rc=1
      done
    done
  done
} 2>&1 | tee "$OUT/engine.log"
[[ ${SKIP_VERIFY:-0} == 1 ]] || timeout 120 $D/tf_bench_cuda --verify 2>&1 | tee "$OUT/verify.log"
# The engine end to end at the Qwen3-8B shape: random bf16 weights written to /dev/shm on this machine.
if [[ ${E2E_8B:-0} == 1 ]]; then
  {
    t0=$(date +%s)
    python3 tools/make_random_checkpoint.py --shape qwen3-8b --out /dev/shm/q8b --tokenizer $D/qwen3-tok
    echo "checkpoint written in $(( $(date +%s) - t0 )) s"
    for par in 1 8 32; do
      echo "== engine bench qwen3-8b parallel=$par"
      timeout 120 $TF bench /dev/shm/q8b --backend cuda --workload random --drafter none --parallel $par --tokens 64 \
        --context 4096 || rc=1
    done
    echo "== prompt cache, qwen3-8b, 8000-token prompt"
    timeout 120 $TF bench /dev/shm/q8b --backend cuda --cache-check --prompt-tokens 8000 --context 9000 --tokens 16 || rc=1
  } 2>&1 | tee "$OUT/engine8b.log"
fi
echo "== summary rc=$rc"
grep -E "PASSED|FAILED" "$OUT/tests.log"
grep -E "^== bench|^\| (repetitive|free)|decode" "$OUT/engine.log" | head -60
grep -E "^\||^==" "$OUT/verify.log" 2>/dev/null
grep -E "^==|^\| random|prompt .* tokens|written|model " "$OUT/engine8b.log" 2>/dev/null
exit $rc
