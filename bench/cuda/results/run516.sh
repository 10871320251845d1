# Session 55, run 516: the final tree's MoE and attention tests, and tf_bench_moe for both formats with the
# experts' grouping tile forced to 64 and 128 (same call; the rule takes 128 at 4096 tokens).
#   BINS="tests/models/test_moe_cuda tests/ops/gpu/test_cuda_backend bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p516.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe_cuda.txt 2>&1
echo "test_moe_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_cuda.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe_cuda.txt | head -6 >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_backend --gtest_brief=1 > $OUT/test_cuda_backend.txt 2>&1
echo "test_cuda_backend rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_cuda_backend.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]" $OUT/test_cuda_backend.txt | head -6 >> $OUT/all.txt
for f in bf16 mlx4; do
  timeout 300 $D/bin/tf_bench_moe --format $f > $OUT/moe-$f.txt 2>&1
  echo "moe $f rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| (decode b=1 ctx 512 |prefill)|^prefill" $OUT/moe-$f.txt >> $OUT/all.txt
done
rm -rf $D
