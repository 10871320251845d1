# Session 65, run 565: where the routing gap goes -- the producers' arrival at their routing (route-in), their
# poll of the logits done (polled) and routed, after the router's last tile (runs 563-564: routed 2.5 / 3.8 us
# after it, bf16 / MLX 4-bit); the routing warm-up of run 563 as landed (re-applied), test_cuda_moe_step.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
# Run: ln -sfn p565.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run565.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16; do
  TF_STEP_STAMPS=1 TF_STEP_TILE_LOG=1 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f-tl.txt 2>&1
  echo "$f stamps rc=$?" >> $OUT/all.txt; sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe-$f-tl.txt | grep -E "o:|last tiles|qkv done|waits|gate_up tile 0|router" >> $OUT/all.txt
  grep -E "one-kernel step \(" $OUT/moe-$f-tl.txt >> $OUT/all.txt
done
timeout 300 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
