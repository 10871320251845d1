# Session 51, run 497: q4_wg_kernel's cluster instances (a 64-feature tile's 8 K slices over two CTAs, x's
# half of K each: 16 or 32 token rows; rank 0's slice sum pushed into rank 1: TF_Q4_WGC, TF_Q4_WGC_CFG), with
# run 496's checks (the narrowed pieces rule: test_cuda_model, test_cuda_graphs).
# Predicted (H100): the gate_up at 32 rows 1.75 ms (two 16-row q4_wg calls, 36 layers) -> ~1.0-1.2 ms (each
# weight dequantized once); the q/o at 16 rows (q4_pair, 64 tiles) -10..-20% on 128 CTAs; the b=32 forward
# -10..-14%, b=16 -2..-4%.
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs
#     bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run497-wg-clusters.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|differs|rows|configuration|N [0-9]" $OUT/test_quant_cuda.txt | head -16 >> $OUT/all.txt
TF_BENCH_QUANT_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_quant --linears-m 16,32,64 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (16|32|64) |clusters" $OUT/quant.txt | cut -c1-420 >> $OUT/all.txt
TF_BENCH_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode|clusters" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
for t in test_cuda_model test_cuda_graphs; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
rm -rf $D
