# Session 63, run 550: the MoE step's MLX 4-bit instance again (run 549: illegal instructions -- the down's
# scale-word boxes started at word 3 / 6 / 9 of a row; now from a 16-byte-aligned word) and the bf16 default
# after run 549 (two ranks a down stage, the former variant 5; variant 5 is now one rank, the old default).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p550.tar.xz
# Run: ln -sfn p550.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run550.sh; cat $OUT/all.txt
# Prediction (H100): mlx4 step 1.2-1.5 ms against the chain's ~2.15 (roofline 0.586); bf16 default ~2.97 and
# a5 (one rank) ~3.17 as in run 549.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4.txt 2>&1
echo "moe mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe4.txt >> $OUT/all.txt
timeout 100 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter='*Mlx4*' > $OUT/test4.txt 2>&1
rc4=$?
echo "test_moe_step mlx4 rc=$rc4 $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test4.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map|step:|rror" $OUT/test4.txt | head -20 >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a5,a5 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-1.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-1.txt >> $OUT/all.txt
rm -rf $D
