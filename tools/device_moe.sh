#!/usr/bin/env bash
# Issue 12's device cycle as one call (sessions 37-38's .devpack scripts, kept): the GPU tests, tf_bench_moe's
# quick table (its same-call "without" lines are the A/Bs to trust: the step has ~3% process states), and the
# product -- a random Qwen3-30B-A3B MLX 4-bit checkpoint made on the device (~115 s), `tensorfold generate`
# texts with a switch on / off (must be identical) and `tensorfold bench` one stream with it on / off / on / off.
# Build and pack HERE (the device has no Debian -dev packages):
#   export PATH=/usr/local/cuda/bin:$PATH
#   ninja -C build-cuda test_moe_cuda test_cuda_graphs test_cuda_model tf_bench_moe tensorfold
#   BINS="tests/models/test_moe_cuda tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_model \
#         bench/cuda/tf_bench_moe tensorfold" tools/device_step.sh --pack
#   run(command="STEPS='test quick e2e' SWITCH=TF_MOE_O_FOLD tools/device_moe.sh; cat $OUT/all.txt",
#       carry=[".devpack"])
# STEPS: any of test (the packed test_* binaries), quick (tf_bench_moe --quick --format mlx4, twice), stamps (the
# same with TF_MOE_DECODE_STAMPS=1), e2e (needs tensorfold and SWITCH, a TF_* variable read as 0 / 1).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
D=$(mktemp -d)
xz -dc .devpack/step.tar.xz | tar -xf - -C "$D" || { echo "no .devpack/step.tar.xz: pack first" >"$OUT/all.txt"; exit 1; }
export LD_LIBRARY_PATH=$D/bin:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
A=$OUT/all.txt
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv
  for b in "$D"/bin/*; do [[ $b == *.so* ]] || ldd "$b" | grep "not found" | sed "s|^|$b: |"; done
} >"$A" 2>&1
r() {  # name, timeout, command...: full log to $OUT/name.txt, the lines that matter to all.txt
  local n=$1 t=$2 s
  shift 2
  echo "=== $n: $*" >>"$A"
  s=$(date +%s)
  timeout "$t" "$@" >"$OUT/$n.txt" 2>&1
  echo "rc=$? ($(($(date +%s) - s)) s)" >>"$A"
  grep -E "PASSED|FAILED|Failure|rror|^\| decode|ablations|stamps|tok/s|serial decode|\| random" "$OUT/$n.txt" |
    head -40 >>"$A"
}
STEPS=${STEPS:-test quick}
if [[ " $STEPS " == *" test "* ]]; then
  for t in "$D"/bin/test_*; do r "$(basename "$t")" 300 "$t" --gtest_brief=1; done
fi
if [[ " $STEPS " == *" quick "* ]]; then
  for i in 1 2; do r "moe-quick-$i" 200 "$D/bin/tf_bench_moe" --quick --format mlx4; done
fi
[[ " $STEPS " == *" stamps "* ]] && TF_MOE_DECODE_STAMPS=1 r moe-stamps 200 "$D/bin/tf_bench_moe" --quick --format mlx4
if [[ " $STEPS " == *" e2e "* && -n "${SWITCH:-}" ]]; then
  M=/dev/shm/moe4
  s=$(date +%s)
  python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --out $M --tokenizer "$D/tok" --mlx-bits 4 2>&1 |
    tail -1 >>"$A"
  echo "checkpoint in $(($(date +%s) - s)) s" >>"$A"
  P="Write a short story about a lighthouse keeper who finds a message in a bottle."
  for v in 1 0; do
    env "$SWITCH=$v" timeout 200 "$D/bin/tensorfold" generate $M --backend cuda -p "$P" -n 200 --ignore-eos \
      --temperature 0.7 --seed 7 --context 4096 >"$OUT/text-$v.txt" 2>"$OUT/gen-$v.txt"
    echo "generate $SWITCH=$v: rc=$? $(grep "tok/s" "$OUT/gen-$v.txt")" >>"$A"
  done
  [[ $(md5sum <"$OUT/text-1.txt") == $(md5sum <"$OUT/text-0.txt") ]] && echo "texts identical" >>"$A" ||
    echo "TEXTS DIFFER" >>"$A"
  i=0
  for v in 1 0 1 0; do
    export "$SWITCH=$v"  # (r is a shell function: env cannot run it)
    r "bench1-$((++i))-$SWITCH-$v" 200 "$D/bin/tensorfold" bench $M --backend cuda --workload random \
      --drafter none --context 2048 --pad-drafts off --tokens 256
  done
  unset "$SWITCH"
fi
