# Session 60, run 544: where the MoE step's time goes (run 543, H100: the step 3.76 ms against the chain's
# 3.44, bits equal). tf_bench_moe bf16's step row with timing ablations in one process
# (TF_MOE_BENCH_STEP_AB; wrong bits): a1 no tile arithmetic, a2 an expert stage as one contiguous copy
# instead of 16 row copies, a3 no routing wait in the producer; in-flight caps i0 (every free slot), i2, i6.
# Then test_cuda_moe_step again (the ablation code in the product instance; bits with none).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p544.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a1,a2,a3,i0,i2,i6 TF_MOE_BENCH_WARM_S=2 timeout 200 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-bf16.txt >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test_moe_step.txt 2>&1
echo "test_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test_moe_step.txt | head -20 >> $OUT/all.txt
rm -rf $D
