# Session 68, run 582 (lean: ~7 minutes of device time were left after six failed starts): run 580's questions
# without bf16 (TF_BENCH_STEP_ONLY=2) -- Qwen3-8B MLX 4-bit b=1 ctx 512, the prefetch's plans (S*100+T*10+C,
# run580.sh) and the down's cap; then test_cuda_decode_step's 4-bit case (the plan's cases in it). On an H200 the
# same under a cap of 2 (the H200's default is every free slot, where the gate_up's cap does nothing).
#   Pack: .devpack/p580.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step")
D=$(mktemp -d); xz -dc .devpack/p580.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
[[ $card == *H200* ]] && export TF_STEP_INFLIGHT_STAGES=2 TF_STEP_INFLIGHT_GU=4
TF_BENCH_STEP_ONLY=2 TF_STEP_L2PF_PLAN=40,940,941,960,961,141 TF_STEP_INFLIGHT_DN_AB=41 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|plan|down" $OUT/8b.txt
unset TF_STEP_INFLIGHT_STAGES TF_STEP_INFLIGHT_GU
timeout 120 $D/bin/test_cuda_decode_step --gtest_brief=1 --gtest_filter="*Mlx4Linears*" > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
