# Session 66, run 571 (scripted; no device could be started after run 568/569): variants 13 / 14 (the MLX
# 4-bit MoE router's tiles / the router's and o's on both teams, warp w its slice w; same bits) -- test_cuda_
# moe_step's Mlx4 case (Mlx4GivesTheChainsBits runs both, 14 also on 40 CTAs) and their times against the
# default in one process --,
# with the 4-bit step's skeleton (a1: no tile arithmetic; a3: no routing wait, experts 0 .. top_k - 1; timing
# only), the step's layer-10 stamps and the chain's one-kernel MoE stamps on the same card.
#   BINS="bench/cuda/tf_bench_moe tests/ops/gpu/test_cuda_moe_step"; packed as .devpack/p571.tar.xz
# Run: ln -sfn p571.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run571.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter="*Mlx4*" > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a13,a14,a1,a3,a13,a14 TF_STEP_STAMPS=1 TF_MOE_DECODE_STAMPS=1 TF_MOE_BENCH_WARM_S=2 timeout 150 \
  $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe-mlx4.txt 2>&1
echo "mlx4 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel step|step logits|rror|HANG" $OUT/moe-mlx4.txt >> $OUT/all.txt
rm -rf $D
