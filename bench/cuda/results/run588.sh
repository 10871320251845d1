# (4c4d156's tree: TF_STEP_DX_AB and set_dx were retired in 140c613.)
# Session 71, run 588: the mended parts (down_in_parts) -- test_cuda_decode_step whole (the 4-bit case runs the
# parts at dlate 1/0/2/3, 5 slots, 40 CTAs, without and with pairs), then the bench's "in parts" A/B: -1 the
# default step, -2 it on the kDx instance (set_dx(100)), plans 0-3, 10, 11 on the TF_STEP_DPERM step.
# Pack: .devpack/p588.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step").
nvidia-smi --query-gpu=name --format=csv,noheader
D=$(mktemp -d); xz -dc .devpack/p588.tar.xz | tar -xf - -C $D
export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
timeout 300 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/t.txt 2>&1
echo "t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/t.txt | tr '\n' ' ')"
grep -E "Failure|DIFFER|differ|HANG|late|pairs" $OUT/t.txt | head -12
TF_BENCH_STEP_ONLY=2 TF_STEP_DX_AB=0,1,2,3,10,11 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/new.txt 2>&1
echo "new rc=$?"; grep -E "one kernel|in parts" $OUT/new.txt | cut -c1-600
