# Session 67, run 572: tf_q4_loop_probe (the step's 4-bit tile loop alone in shared memory, 1-16 warps an SM,
# beside spinning warps, without its dequantisation), then the MoE step's Mlx4 test and the default 4-bit MoE
# timing after variants 13 / 14 were retired.
#   BINS="bench/cuda/tf_bench_moe tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_q4_loop_probe"; packed as
#   .devpack/p572.tar.xz
# Run: ln -sfn p572.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run572.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/tf_q4_loop_probe 200 >> $OUT/all.txt 2>&1; echo "probe rc=$?" >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter="*Mlx4*" > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
TF_MOE_BENCH_WARM_S=2 timeout 150 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe-mlx4.txt 2>&1
echo "mlx4 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel step|step logits|rror|HANG" $OUT/moe-mlx4.txt >> $OUT/all.txt
rm -rf $D
