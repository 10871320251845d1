# Session 57, run 533: the step's new default (at most 2 bf16 / 3 MLX 4-bit ring stages in flight on parts
# under 100 GiB, run 532) -- the step's GPU tests, then the bf16 step at ctx 512 / 2048 / 8192 and the 4-bit
# step at 512 against every free slot and other caps (alternating, twice).
#   BINS="tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p533.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_cuda_decode_step test_cuda_graphs; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
TF_BENCH_STEP_CTX=512,2048,8192 TF_STEP_INFLIGHT=0,2,3,4 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --decode > $OUT/8b-bf16-ctx.txt 2>&1
echo "8b bf16 ctx rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|stages in flight" $OUT/8b-bf16-ctx.txt | cut -c1-700 >> $OUT/all.txt
TF_BENCH_STEP_ONLY=2 TF_STEP_INFLIGHT=0,2,3,4 timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-mlx4.txt 2>&1
echo "8b mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|stages in flight" $OUT/8b-mlx4.txt | cut -c1-700 >> $OUT/all.txt
rm -rf $D
