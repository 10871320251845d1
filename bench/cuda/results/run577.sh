# Session 67, run 577: the in-flight cap for the dense gate_up's tiles past the prefetched ones (set_inflight_gu,
# TF_STEP_INFLIGHT_GU: 0 = the step's 2, then 3, 4, 6; same bits), Qwen3-8B MLX 4-bit b=1 ctx 512, with the L2
# prefetch's 0 / 4 tiles beside; then test_cuda_decode_step (its 4-bit case runs the gate_up's cap at 3).
#   BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step"; packed as .devpack/p577.tar.xz
# (In this binary TF_STEP_INFLIGHT_GU was also read at make -- env_int of "3,4,6" -- so the lines other than the
# cap A/B ran at some cap; each A/B value was set explicitly. The A/B list is TF_STEP_INFLIGHT_GU_AB since.)
D=$(mktemp -d); xz -dc .devpack/p577.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT_GU=3,4,6 TF_STEP_L2PF=0,4 timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|L2|capped|Qwen3-8B \|" $OUT/8b.txt
timeout 200 $D/bin/test_cuda_decode_step --gtest_brief=1 --gtest_filter="*Mlx4Linears*" > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
