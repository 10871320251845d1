# Session 65, run 561: the MLX 4-bit MoE step's down in stages of half a rank (Op::dsplit 2: 16 stages a tile
# of 3.5 KB, each read by the rank's warp) against stages of an owner's two slices (TF_STEP_MOE_Q4_DOWN_STAGES=4,
# read at make: 32 of 2.5 KB, as run 560) -- three processes, default / owners / default; the timeline;
# test_cuda_moe_step whole (Mlx4GivesTheChainsBits makes the owners' stages too).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
# Run: ln -sfn p561.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run561.sh; cat $OUT/all.txt
# Prediction (H100): halves 2.27 -> 2.12-2.20 ms (the down's ~8.5 us a layer -> ~6, and the ring holds the
# down tile in 16 slots, leaving 12 for the next layer's qkv).
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for v in 2 4 2; do
  TF_STEP_MOE_Q4_DOWN_STAGES=$v TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4-$v.txt 2>&1
  echo "mlx4 down stages $v rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe4-$v.txt >> $OUT/all.txt
done
TF_STEP_STAMPS=1 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4s.txt 2>&1
echo "mlx4 stamps rc=$?" >> $OUT/all.txt; sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe4s.txt | head -12 >> $OUT/all.txt
timeout 300 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
