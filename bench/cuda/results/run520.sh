# Session 56, run 520: bf16 experts through one kernel (moe_decode_bf16.cu: the ring of bulk-copied pieces,
# the down tile streaming under the last gate_up items; TF_MOE_DECODE_BF16=1). The new test first, then every
# MoE GPU test, then tf_bench_moe bf16 --quick (b=1 headline the one kernel, the chain as the A/B row; run
# 519 before: 3.394 ms, 59.6%). Predicted: b=1 3.39 -> ~3.0 ms (-11%).
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p520.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/test_moe_cuda --gtest_filter='*Bf16EqualsTheRoutedChain*' > $OUT/test_new.txt 2>&1
echo "new test rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_new.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|row" $OUT/test_new.txt | head -12 >> $OUT/all.txt
export TF_MOE_DECODE_BF16=1
timeout 120 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 |^b=1 abl" $OUT/moe-bf16.txt >> $OUT/all.txt
timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe_cuda.txt 2>&1
echo "test_moe_cuda (bf16 on) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_cuda.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe_cuda.txt | head -6 >> $OUT/all.txt
rm -rf $D
