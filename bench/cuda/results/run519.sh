# Session 55, run 519: the MoE wgmma grid / items with feature tiles fastest (a grouping tile's x read through
# L2 once instead of from DRAM for each feature tile: run 518's ncu). test_moe_cuda, then tf_bench_moe both
# formats (prefill 4096 and its ablations; run 516 before: bf16 126.2 ms, MLX 4-bit 116.9).
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p519.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe_cuda.txt 2>&1
echo "test_moe_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_cuda.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe_cuda.txt | head -6 >> $OUT/all.txt
for f in mlx4 bf16; do
  timeout 200 $D/bin/tf_bench_moe --format $f > $OUT/moe-$f.txt 2>&1
  echo "moe $f rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| (decode b=1 ctx 512 |prefill)|^prefill" $OUT/moe-$f.txt >> $OUT/all.txt
done
rm -rf $D
