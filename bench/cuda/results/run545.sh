# Session 60, run 545 (NOT RUN: the session's device time ran out; for the next session): the MoE step's
# expert stages by tensor maps (TF_STEP_MOE_TMA=1) (two boxes of 8 rows in the 128-byte
# swizzle, rows g and g + 1 in different bank halves) instead of 16 row copies (run 544: a contiguous copy
# instead of the 16 made the step 3.82 -> 2.85 ms). test_cuda_moe_step (both paths, bits against the chain);
# tf_bench_moe bf16's step row with ablations a1 (no tile arithmetic), a3 (no routing wait) and in-flight
# caps; then the row-copy path (the default) in a second process.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p545.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test_moe_step.txt 2>&1
echo "test_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned" $OUT/test_moe_step.txt | head -20 >> $OUT/all.txt
TF_STEP_MOE_TMA=1 TF_MOE_BENCH_STEP_AB=a1,a3,i0,i2,i6 TF_MOE_BENCH_WARM_S=2 timeout 200 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned" $OUT/moe-bf16.txt >> $OUT/all.txt
TF_MOE_BENCH_WARM_S=2 timeout 200 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-rows.txt 2>&1
echo "moe bf16 row copies rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-bf16-rows.txt >> $OUT/all.txt
rm -rf $D
