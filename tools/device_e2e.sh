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
  for drafter in auto models/demo/draft none; do
    for temp in 0 0.7; do
      for par in 1 8; do
        echo "== bench cuda drafter=$drafter temperature=$temp parallel=$par"
        timeout 90 $TF bench --backend cuda --drafter $drafter --temperature $temp --parallel $par --tokens 256 || rc=1
      done
    done
  done
} 2>&1 | tee "$OUT/engine.log"
timeout 120 $D/tf_bench_cuda --verify 2>&1 | tee "$OUT/verify.log"
echo "== summary rc=$rc"
grep -E "PASSED|FAILED" "$OUT/tests.log"
grep -E "^== bench|^\| (repetitive|free)|decode" "$OUT/engine.log" | head -60
grep -E "^\||^==" "$OUT/verify.log"
exit $rc
