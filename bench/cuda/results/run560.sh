# Session 65, run 560: the MLX 4-bit MoE step's producer issuing four stages a warp instruction (lane l stage
# s + l; runs 558-559's TMA probe: one lane's ~600 cycles a stage capped its 4.5 KB stages at ~1.6-1.9 TB/s
# and the down's 2.5 KB ones at ~0.8), against a10 (one at a time, as before) and a11 (eight), one process;
# then the layer timeline (stamps); then test_cuda_moe_step whole (Mlx4GivesTheChainsBits runs a10 and a11).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
# Run: ln -sfn p560.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run560.sh; cat $OUT/all.txt
# Prediction (H100): the step 2.81 -> 2.35-2.55 ms; a10 ~2.8; a11 within 0.03 of the default.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a10,a11,a10 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4.txt 2>&1
echo "mlx4 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe4.txt >> $OUT/all.txt
TF_STEP_STAMPS=1 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4s.txt 2>&1
echo "mlx4 stamps rc=$?" >> $OUT/all.txt; sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe4s.txt | head -12 >> $OUT/all.txt
timeout 300 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
