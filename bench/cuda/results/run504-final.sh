# Session 52, run 504: the landed tree (the cluster instance with four quads ahead, kWgcAhead) -- the 4-bit
# kernel tests, model and graph tests, and the 8B MLX 4-bit table (b=32: clusters off / on, twice).
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs
#     bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack   (then .devpack/step.tar.xz)
#   run(command="bash bench/cuda/results/run504-final.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_quant_cuda test_cuda_model test_cuda_graphs; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
TF_BENCH_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode|clusters|^target" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
