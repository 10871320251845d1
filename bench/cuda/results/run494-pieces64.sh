# Session 50, run 494: 33-64-row MLX 4-bit calls in pieces (TF_Q4_SPLIT32 3: widths > 8192 by 16 rows off the
# front; 4: and K > 4096 by 32), against run 492's rule (none past 32 rows: q4_decode_kernel's 32-row tiles,
# each weight tile's token tiles together). tf_bench_quant --linears-m 48,64 (36 calls a linear kind), and
# test_quant_cuda (40 rows in pieces: the same bits).
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run494-pieces64.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 250 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|differs|split|mode" $OUT/test_quant_cuda.txt | head -12 >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_quant --linears-m 64,48,32 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (64|48|32) |pieces|16 \+ the rest" $OUT/quant.txt | cut -c1-420 >> $OUT/all.txt
rm -rf $D
