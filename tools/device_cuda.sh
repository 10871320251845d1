#!/usr/bin/env bash
# The one script a device call runs for the CUDA backend: checks the carried build, runs the GPU tests
# (ctest label "gpu" binary), then the bench; logs to $OUT, short table last.
# The device has nvcc but not the project's Debian -dev packages, so build HERE and carry the binaries:
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-cuda --target test_cuda_backend tf_bench_cuda -j2
#   tools/device_cuda.sh --pack      # copies the two binaries into build-cuda-carry/ (ignored, ~3 MB)
# Then one device call:  run(command="tools/device_cuda.sh", carry=["build-cuda-carry"])
# When others' uncommitted work breaks tf_ops in the shared tree, build a clean copy instead:
#   git archive HEAD | tar -x -C /work/snap-cuda, copy your own changed files over it, build there and
#   copy the three binaries into build-cuda-carry/ (test_cuda_model finds tests/data/tiny relatively).
# BENCH_ARGS=--quick (512 context only) or --small (0.6B shape only) shorten the bench. The whole run
# (tests + full bench) took ~22 s of GPU time in runs 5 and 6.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=build-cuda-carry
if [[ "${1:-}" == "--pack" ]]; then
  bench=build-cuda/bench/cuda/tf_bench_cuda
  [[ -x $bench ]] || bench=build-cuda/tf_bench_cuda  # a local build that adds the bench target itself
  mkdir -p $CARRY && cp build-cuda/tests/ops/gpu/test_cuda_backend build-cuda/tests/ops/gpu/test_cuda_model $bench $CARRY/
  ls -la $CARRY
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{
  date -u; git log -1 --format='commit %H %s' 2>/dev/null || true
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
  for b in $CARRY/*; do ldd $b | grep -E "not found" | sed "s|^|$b: |"; done
} 2>&1 | tee "$OUT/env.log"
timeout 240 $CARRY/test_cuda_backend --gtest_brief=1 2>&1 | tee "$OUT/test.log"
test_rc=${PIPESTATUS[0]}
if [[ -x $CARRY/test_cuda_model ]]; then  # the tiny checkpoint end to end (tests/data/tiny travels)
  timeout 120 $CARRY/test_cuda_model --gtest_brief=1 2>&1 | tee -a "$OUT/test.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || test_rc=1
fi
timeout ${BENCH_TIMEOUT:-300} $CARRY/tf_bench_cuda ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
echo "== summary: tests rc=$test_rc bench rc=$bench_rc"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]" "$OUT/test.log" | head -20
grep -E "^ceilings|^\|" "$OUT/bench.log"
