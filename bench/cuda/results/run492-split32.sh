# Session 50, run 492: 17-32-row MLX 4-bit calls as two calls of 16 and the rest (TF_Q4_SPLIT32: the 16-row
# kernels take the first; run 491: the gate_up at M = 32 2.034 ms over 36 calls on q4_decode_kernel's 32-row
# tiles, ~28% of the bandwidth). Predicted: the gate_up ~-8% split (two 16-row q4_wg calls), q / k / o lose;
# the b=32 forward -2..-3% with widths > 8192 split. Plus test_quant_cuda (the split's bits) and the default
# K > 4096 rule of the 32-token q4_ks.
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run492-split32.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 250 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|differs|split|mode" $OUT/test_quant_cuda.txt | head -12 >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_quant --linears-m 32,24 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (32|24) |17-32|16 \+ the rest" $OUT/quant.txt | cut -c1-400 >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "17-32 rows|16 \+ the rest|^\| Qwen3-8B \| decode" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
