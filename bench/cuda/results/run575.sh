# Session 67, run 575: the L2 prefetch's default (l2pf_of: 4 tiles for the dense 4-bit step on parts under
# 100 GiB) checked, and the in-flight cap for the prefetched tiles (set_inflight_l2: 0 = the step's, 3, 4, 6) -- test_cuda_decode_step (its 4-bit case: 0 and 4 tiles, 4 on 40 CTAs), the Qwen3-8B MLX 4-bit
# and bf16 steps with the prefetch off, at the default and at 2, 4, 6 tiles in one process (the H200: its count), then the product: a random MLX 4-bit Qwen3-8B
# checkpoint, `tensorfold generate` with the step on and off (texts compared) and `tensorfold bench`.
#   BINS="tests/ops/gpu/test_cuda_decode_step bench/cuda/tf_bench_cuda tensorfold"; packed as .devpack/p575.tar.xz
# Run: ln -sfn p575.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run575.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/head.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/head.txt
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF=0,-1,2,4,6 TF_STEP_INFLIGHT_L2=3,4,6 timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/head.txt; grep -E "one kernel|L2|vs bf16|target|Qwen3-8B \|" $OUT/8b.txt >> $OUT/head.txt
timeout 300 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')" >> $OUT/head.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6 >> $OUT/head.txt
rm -rf $D
STEPS=e2e4 OUT=$OUT timeout 400 tools/device_step.sh
cat $OUT/head.txt $OUT/all.txt > $OUT/summary.txt
