# Session 50, run 490: MLX 4-bit linears at 17-32 rows on q4_ks_kernel's new 32-token instance (m64n32k16:
# each dequantized weight feeds 32 tokens where q4_decode_kernel's 32-row tiles run mma.sync chains). The 8B
# b=32 forward was 5.9 ms, 1.29x bf16 (37% of its roofline); the 16-row linears are dequantisation-bound, so
# twice the tokens a weight should cost little: predicted b=32 5.9 -> ~4.2-4.6 ms (-20..-30%). Same bits.
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_fusion bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run490-ks32.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_quant_cuda test_cuda_graphs test_cuda_model test_cuda_fusion; do
  timeout 250 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|Expected|Which is|differs|take" $OUT/$t.txt | head -12 >> $OUT/all.txt
done
timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "17-32 rows|^\| Qwen3-8B \| decode" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
