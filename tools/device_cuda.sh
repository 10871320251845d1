#!/usr/bin/env bash
# The one script a device call runs for the CUDA backend: checks the carried build, runs the GPU tests
# (ctest label "gpu" binary), then the bench; logs to $OUT, short table last.
# Build here first (nvcc, -j2):  tools/device_cuda.sh --pack   (copies binaries into build-cuda-carry/)
# Then on the device:            run(command="tools/device_cuda.sh", carry=["build-cuda-carry"])
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=build-cuda-carry
if [[ "${1:-}" == "--pack" ]]; then
  mkdir -p $CARRY && cp build-cuda/tests/ops/gpu/test_cuda_backend build-cuda/tf_bench_cuda $CARRY/ && ls -la $CARRY
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{
  date -u; git log -1 --format='commit %H %s' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
  ldd $CARRY/test_cuda_backend | grep -E "not found|cudart" ; ldd $CARRY/tf_bench_cuda | grep -E "not found|cublas"
} 2>&1 | tee "$OUT/env.log"
timeout 240 $CARRY/test_cuda_backend --gtest_brief=1 2>&1 | tee "$OUT/test.log"
test_rc=${PIPESTATUS[0]}
timeout ${BENCH_TIMEOUT:-300} $CARRY/tf_bench_cuda ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "== summary: tests rc=$test_rc bench rc=$bench_rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/test.log" | head -20
grep -E "^ceilings|^\|" "$OUT/bench.log"
