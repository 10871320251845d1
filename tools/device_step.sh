#!/usr/bin/env bash
# The one-kernel decode step (src/ops/cuda/decode_step.h) on the GPU: its bit-for-bit test against the op
# chain, the CUDA-graph tests (the decoder's graph key changed with it), and its time against the chain's in
# the same run (tf_bench_cuda --decode: the "decode step b=1" lines). Build and pack HERE (the device has no
# Debian -dev packages), then one device call:
#   export PATH=/usr/local/cuda/bin:$PATH
#   ninja -C build-cuda test_cuda_decode_step test_cuda_graphs tf_bench_cuda
#   tools/device_step.sh --pack        # stripped binaries, xz'd into .devpack/step.tar.xz (ignored)
#   run(command="tools/device_step.sh; cat $OUT/all.txt", carry=[".devpack"])
# STEP_QUICK=1: no graph tests; STEP_ONLY_TEST=1: the step's test alone.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.devpack/step.tar.xz
BINS="tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda"
if [[ "${1:-}" == "--pack" ]]; then
  tmp=$(mktemp -d)
  mkdir -p "$tmp/bin" .devpack
  for b in $BINS; do
    [[ -x build-cuda/$b ]] || { echo "build-cuda/$b is missing" >&2; exit 1; }
    strip -o "$tmp/bin/$(basename $b)" "build-cuda/$b"
  done
  mkdir -p "$tmp/lib" && cp -L /lib/x86_64-linux-gnu/libutf8proc.so.2 "$tmp/lib/"  # the device lacks it
  tar -cf - -C "$tmp" . | xz -T2 --lzma2=preset=6,dict=256MiB >"$PACK"
  rm -rf "$tmp"
  ls -la "$PACK"
  exit 0
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
D=$(mktemp -d)
xz -dc "$PACK" | tar -xf - -C "$D" || { echo "no $PACK: run tools/device_step.sh --pack first" >"$OUT/all.txt"; exit 1; }
export LD_LIBRARY_PATH=$D/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  for b in "$D"/bin/*; do ldd "$b" | grep "not found" | sed "s|^|$b: |"; done
} >"$OUT/all.txt" 2>&1
run() {  # name, timeout, command...: full log to $OUT/name.txt, the lines that matter to all.txt
  local n=$1 t=$2
  shift 2
  echo "=== $n: $*" >>"$OUT/all.txt"
  timeout "$t" "$@" >"$OUT/$n.txt" 2>&1
  echo "rc=$?" >>"$OUT/all.txt"
  grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|HANG|rror|^decode step|^decode b=1 ctx|one-kernel|Expected|Which is|round [0-9]|logits differ" \
    "$OUT/$n.txt" | head -40 >>"$OUT/all.txt"
}
run step-test 400 "$D/bin/test_cuda_decode_step" --gtest_brief=1
[[ "${STEP_ONLY_TEST:-0}" == 1 ]] || run bench 300 "$D/bin/tf_bench_cuda" --shape qwen3-8b --format bf16 --decode
[[ "${STEP_QUICK:-0}" == 1 ]] || run graphs-test 300 "$D/bin/test_cuda_graphs" --gtest_brief=1
rm -rf "$D"
