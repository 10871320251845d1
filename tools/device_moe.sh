#!/usr/bin/env bash
# The device call for the MoE work (docs/moe.md): GPU tests of Backend::moe's fused CUDA path, the tiny
# qwen3_moe checkpoint end to end on the GPU, then tf_bench_moe (random Qwen3-30B-A3B shape, ~61 GB).
# Build HERE (the device has no -dev packages) and carry the binaries:
#   cmake -S . -B build-h4 -G Ninja -DCMAKE_BUILD_TYPE=Release -DTF_CUDA=ON
#   cmake --build build-h4 --target test_moe_cuda test_cuda_model tf_bench_moe -j2
#   tools/device_moe.sh --pack        # copies the three binaries into build-moe-carry/ (ignored, ~40 MB)
# Then one device call:  run(command="tools/device_moe.sh", carry=["build-moe-carry"])
# BENCH_ARGS=--quick skips batch 32 and prefill 4k.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=build-moe-carry
BUILD=${BUILD:-build-h4}
if [[ "${1:-}" == "--pack" ]]; then
  mkdir -p $CARRY && cp $BUILD/tests/models/test_moe_cuda $BUILD/tests/ops/gpu/test_cuda_model \
    $BUILD/bench/cuda/tf_bench_moe $CARRY/
  strip $CARRY/* 2>/dev/null || true
  ls -la $CARRY
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{
  date -u; git log -1 --format='commit %H %s' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
} 2>&1 | tee "$OUT/env.log"
timeout 120 $CARRY/test_moe_cuda --gtest_brief=1 2>&1 | tee "$OUT/test.log"
test_rc=${PIPESTATUS[0]}
timeout 120 $CARRY/test_cuda_model --gtest_brief=1 2>&1 | tee -a "$OUT/test.log"
[[ ${PIPESTATUS[0]} == 0 ]] || test_rc=1
timeout ${BENCH_TIMEOUT:-300} $CARRY/tf_bench_moe ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_moe.log"
bench_rc=${PIPESTATUS[0]}
echo "== summary: tests rc=$test_rc bench rc=$bench_rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/test.log" | head -20
grep -E "^copy|^\||^fused" "$OUT/bench_moe.log"
