# Session 68, run 581: whichever card comes. An H100: run580.sh (the prefetch past the ring's tiles, the down's
# cap, the test, the timeline). An H200 (both the prefetch and the caps off there by default; run 579's
# questions, on run 580's pack): Qwen3-8B MLX 4-bit b=1 ctx 512 -- (a) the prefetch at 0/2/4/6 tiles with the
# H200's every-free-slot producer; (b) with 4 tiles, the in-flight caps 0/2/3/4; (c) under a cap of 2 and 3,
# the prefetch's plans (TF_STEP_L2PF_PLAN S*100+T*10+C as run 580) and the gate_up's cap; then the test.
#   Pack: .devpack/p580.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step")
set -u
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
if [[ $card != *H200* ]]; then bash bench/cuda/results/run580.sh; exit; fi
D=$(mktemp -d); xz -dc .devpack/p580.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
B="$D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick"
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF=0,2,4,6 timeout 200 $B > $OUT/a.txt 2>&1
echo "a rc=$?"; grep -E "one kernel|L2|Qwen3-8B \|" $OUT/a.txt
TF_STEP_L2PF_TILES=4 TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT=0,2,3,4 timeout 200 $B > $OUT/b.txt 2>&1
echo "b rc=$?"; grep -E "one kernel|in flight" $OUT/b.txt
for cap in 2 3; do
  TF_STEP_INFLIGHT_STAGES=$cap TF_STEP_INFLIGHT_GU=4 TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF_PLAN=0,40,940,941,960,961 TF_STEP_INFLIGHT_GU_AB=0,4,6 timeout 250 $B > $OUT/c$cap.txt 2>&1
  echo "c$cap rc=$?"; grep -E "one kernel|plan|capped" $OUT/c$cap.txt
done
timeout 250 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
rm -rf $D
