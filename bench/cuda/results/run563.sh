# Session 65, run 563: the routing's code warmed while the logits are not there (poll_route calls route4 on
# zeros once; route4 is one not-inlined function for the producer and consumer warp 0) against variant 12 (no
# warm-up), bf16 and MLX 4-bit, one process each (a12, a12 between the defaults); the timelines (stamps, with
# the router's last tile and the producers' routing: run 562 had them 2.6 / 3.8 us apart); test_cuda_moe_step.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
# Run: ln -sfn p563.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run563.sh; cat $OUT/all.txt
# Prediction (H100): the default -0.05..-0.13 ms against a12 at 4 bits, -0.03..-0.08 bf16; routed ~1 us after
# the router's last tile.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16; do
  TF_MOE_BENCH_STEP_AB=a12,a12 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f.txt 2>&1
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
