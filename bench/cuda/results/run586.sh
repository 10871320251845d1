# Session 69, run 586: the tree after retiring every losing knob of sessions 68-69 (the kernels' sources are
# 260b715's again, run 578's) -- the Qwen3-8B bf16 / MLX 4-bit table and both step tests in full.
# Pack: .devpack/p586.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step
# tests/ops/gpu/test_cuda_moe_step").
D=$(mktemp -d); xz -dc .devpack/p586.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
TF_BENCH_STEP_ONLY=1 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|Qwen3-8B \||target" $OUT/8b.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then  # (its defaults: no cap, no prefetch)
  TF_BENCH_STEP_ONLY=2 TF_STEP_L2PF=0,2,4 TF_STEP_INFLIGHT=0,2,3 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/h200.txt 2>&1
  echo "h200 rc=$?"; grep -E "one kernel|L2|in flight" $OUT/h200.txt
fi
for t in test_cuda_decode_step test_cuda_moe_step; do
  timeout 250 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')"
  grep -E "FAILED  \]|Failure|differ|HANG" $OUT/$t.txt | head -6
done
rm -rf $D
