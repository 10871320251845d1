# Session 65, run 564: the router's logits stored 8 times, each CTA polling copy b % 8 (run 563: the producers
# still routed 2.6 (bf16) / 3.8 us (4-bit) after the router's last tile, with the routing's code warm -- 264
# warps spinning on one 1 KB) against variant 13 (every CTA polls copy 0), bf16 and 4-bit, one process each;
# the timelines; test_cuda_moe_step (SameBitsVariants runs 13).
# Prediction (H100): routed ~1-1.5 us after the router; the default -0.03..-0.10 ms against a13.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
# Run: ln -sfn p564.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run564.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16; do
  TF_MOE_BENCH_STEP_AB=a13,a13 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f.txt 2>&1
  echo "$f rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe-$f.txt >> $OUT/all.txt
done
for f in mlx4 bf16; do
  TF_STEP_STAMPS=1 TF_STEP_TILE_LOG=1 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f-tl.txt 2>&1
  echo "$f stamps rc=$?" >> $OUT/all.txt; sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe-$f-tl.txt | grep -E "last tiles|qkv done|waits|gate_up tile 0" >> $OUT/all.txt
done
timeout 300 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
