# Session 60, run 543: run 542's MoE step test and bench again after the fix of its hang (a CTA holding no
# tile of a layer's o op -- 128 tiles for 132 CTAs -- now computes its attention units all the same):
# test_cuda_moe_step, and tf_bench_moe bf16's step row (logits == chain, ms against the chain) at the card's
# default in-flight cap (the H200: every free slot) and at 3 stages (the H100's default; MoE: in bytes, 48 KB).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p543.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
gt() {  # name timeout binary [env...]
  local n=$1 to=$2 bin=$3; shift 3
  env "$@" timeout $to $D/bin/$bin --gtest_brief=1 > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$n.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|differ|HANG|error" $OUT/$n.txt | head -20 >> $OUT/all.txt
}
gt test_moe_step 240 test_cuda_moe_step
TF_MOE_BENCH_WARM_S=2 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512|one-kernel|step logits|HANG" $OUT/moe-bf16.txt >> $OUT/all.txt
TF_STEP_INFLIGHT_STAGES=3 TF_MOE_BENCH_WARM_S=2 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-if3.txt 2>&1
echo "moe bf16 inflight 3 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512|one-kernel|step logits|HANG" $OUT/moe-bf16-if3.txt >> $OUT/all.txt
rm -rf $D
