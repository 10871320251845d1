# Session 67, run 578: the final tree's defaults (the L2 prefetch of 4 gate_up tiles, the gate_up's other tiles at
# 4 stages in flight; H100 MLX 4-bit SW 4 only) -- the Qwen3-8B bf16 / MLX 4-bit table with the cap's A/B
# (-1 the default, 0 the step's own 2), then test_cuda_decode_step's 4-bit case.
#   BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_moe_step"; packed
#   as .devpack/p578.tar.xz (session 68: rebuilt at 260b715, whose dense kernels' SASS changed; both step tests in full)
D=$(mktemp -d); xz -dc .devpack/p578.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT_GU_AB=0 timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|capped|Qwen3-8B \||target" $OUT/8b.txt
timeout 250 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
timeout 250 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/moe-test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/moe-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/moe-test.txt | head -6
