# Session 50, run 495: q4_ks's 64-token instance (m64n64k16, one CTA an SM, 200 registers) for 33-64-row MLX
# 4-bit calls of widths <= 12288 (qkv, o, down) against run 494's pieces (the down by 32 rows on the 32-token
# instance; qkv / o on q4_decode_kernel's 32-row tiles, whose cost grows with the rows). Predicted at 64 rows:
# q 0.72 -> ~0.5 ms, down 1.42 -> ~1.1 (36 calls each); the linears 8.0 -> ~7.3. test_quant_cuda first (40
# rows on it: the same bits).
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run495-ks64.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 250 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|differs|split|mode|64-token" $OUT/test_quant_cuda.txt | head -12 >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_quant --linears-m 64,48 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (64|48) |pieces|64-token" $OUT/quant.txt | cut -c1-420 >> $OUT/all.txt
rm -rf $D
