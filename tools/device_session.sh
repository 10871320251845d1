#!/usr/bin/env bash
# One device call that runs several stages on binaries built HERE and carried in packs (the GPU machine
# has no -dev packages). Pack (here): strip the binaries into a staging dir with libcpp-httplib.so.0.11,
# libutf8proc.so.2 and qwen3-tok (as .device/ holds them for tools/device_e2e.sh), then
#   tar -cf - -C <staging> . | xz -T2 -9 > .devpack/a.tar.xz   (xz's window dedups the statically linked
#   kernels across binaries; .tar.gz packs work too; the carry limit is 64 MiB including the source tree)
# and call  run(command="STAGES='tests bench' tools/device_session.sh", carry=[".devpack"]).
# Stages (in the order given):
#   tests   every .device/test_* binary (GPU tests), TESTS="a b" to pick
#   bench   tf_bench_cuda $BENCH_ARGS            probe   tf_wgmma_probe
#   quant   tf_bench_quant $QUANT_ARGS           moe     tf_bench_moe $MOE_ARGS
#   demo    tensorfold bench on the demo model, DRAFTERS x temperature 0/0.7 x parallel 1/8, REPEAT pairs (3)
#   load    tools/device_load.sh (LOAD_* knobs, see there)
#   api     tools/api_check.py on the CUDA backend: structured outputs, guided choice, forced tool calls
#           and echo logprobs (bit-equal to generation's) through a real server on the demo model
# Logs go to $OUT/<stage>.log; a short summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
D=.device
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" $D
for p in .devpack/*.tar.gz; do [[ -f $p ]] && tar -xzf "$p" -C $D; done
# .tar.xz packs: xz -9 shares the binaries' common code across them (9 GPU binaries: ~10 MB, not ~65)
for p in .devpack/*.tar.xz; do [[ -f $p ]] && tar -xJf "$p" -C $D; done
export LD_LIBRARY_PATH=$PWD/$D:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used --format=csv
  for b in $D/*; do [[ -x $b && -f $b ]] && ldd "$b" 2>/dev/null | grep "not found" | sed "s|^|$b: |"; done
  ls -la $D
} 2>&1 | tee "$OUT/env.log"
rc=0
run_stage() {  # name, timeout, command...
  local name=$1 t=$2
  shift 2
  echo "== $name: $*" | tee -a "$OUT/$name.log"
  local t0=$(date +%s)
  timeout "$t" "$@" 2>&1 | tee -a "$OUT/$name.log"
  local r=${PIPESTATUS[0]}
  echo "== $name rc=$r in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/$name.log" "$OUT/summary.log"
  [[ $r == 0 ]] || rc=1
}
for stage in ${STAGES:-tests bench}; do
  case $stage in
    tests)
      for t in ${TESTS:-$(cd $D && ls test_* 2>/dev/null)}; do
        [[ -x $D/$t ]] && run_stage tests 300 $D/$t --gtest_brief=1
      done ;;
    bench) run_stage bench ${BENCH_TIMEOUT:-300} $D/tf_bench_cuda ${BENCH_ARGS:-} ;;
    probe) run_stage probe 120 $D/tf_wgmma_probe ${PROBE_ARGS:-} ;;
    quant) run_stage quant 300 $D/tf_bench_quant ${QUANT_ARGS:-} ;;
    moe) run_stage moe 400 $D/tf_bench_moe ${MOE_ARGS:-} ;;
    demo)
      for drafter in ${DRAFTERS:-auto}; do
        for temp in ${TEMPS:-0 0.7}; do
          for par in ${PARS:-1 8}; do
            run_stage demo 90 $D/tensorfold bench --backend cuda --drafter "$drafter" --temperature "$temp" \
              --parallel "$par" --tokens 256 --repeat "${REPEAT:-3}"
          done
        done
      done ;;
    load) LOAD_BIN_DIR=$D run_stage load 480 tools/device_load.sh ;;
    api) run_stage api 300 python3 tools/api_check.py --bin $D/tensorfold --backend cuda ;;
    *) echo "unknown stage $stage"; rc=1 ;;
  esac
done
echo "== summary rc=$rc"
cat "$OUT/summary.log"
grep -hE "PASSED|FAILED" "$OUT/tests.log" 2>/dev/null
grep -hE "^\| (repetitive|free)|^== demo:" "$OUT/demo.log" 2>/dev/null | head -40
exit $rc
