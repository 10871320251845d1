# Session 65, run 567: the landed tree (route4's warm-up, the routing stamps; variants 14 / 15 of run 566
# removed): test_cuda_moe_step whole, then both instances' bench rows against the chain with a12.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
# Run: ln -sfn p567.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run567.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 300 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
for f in bf16 mlx4; do
  TF_MOE_BENCH_STEP_AB=a12 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f.txt 2>&1
  echo "$f rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe-$f.txt >> $OUT/all.txt
done
rm -rf $D
