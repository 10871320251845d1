# Session 60, run 542: the one-kernel decode step of the MoE shape (decode_step_moe.cu, first run): its
# bit-for-bit test against the op chain (test_cuda_moe_step), the dense step's test after the host split
# (test_cuda_decode_step), the chain's MoE test after moe_route.cuh's route_vals split (test_moe_cuda), and
# tf_bench_moe bf16's step row (logits == chain, ms against the chain) at the default in-flight cap (3
# stages on the H100) and with every free slot in flight.
#   BINS="tests/ops/gpu/test_cuda_moe_step tests/ops/gpu/test_cuda_decode_step tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p542.tar.xz
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
TF_STEP_INFLIGHT_STAGES=0 TF_MOE_BENCH_WARM_S=2 timeout 150 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-if0.txt 2>&1
echo "moe bf16 inflight 0 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=(1|8) ctx 512|one-kernel|step logits|HANG" $OUT/moe-bf16-if0.txt >> $OUT/all.txt
gt test_moe_chain 150 test_moe_cuda
gt test_dense_step 200 test_cuda_decode_step
rm -rf $D
