# Session 69, run 585 (run 584's questions on a later pack, plus the turning storer): Qwen3-8B b=1 ctx 512, one
# process -- (a) TF_STEP_EF_PLAN E*1000+T*100+Q*10+O: the weight stream under an L2 evict-first policy (E 1) with
# the L2 prefetches (T gate_up tiles during the attention; Q / O the next layer's qkv / o after the gate_up); (b)
# TF_STEP_ROT_AB: the 4-bit teams' slice sums to a storer warp that turns with the tiles, over mbarriers (1),
# against the team barrier and warp 0 (0); then the 4-bit test case (both, every stage shape, 40 CTAs).
# Pack: .devpack/p585.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step").
D=$(mktemp -d); xz -dc .devpack/p585.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
B="$D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick"
[[ $card == *H200* ]] && export TF_STEP_INFLIGHT_STAGES=2 TF_STEP_INFLIGHT_GU=4
TF_BENCH_STEP_ONLY=1 TF_STEP_ROT_AB=1 TF_STEP_EF_PLAN=400,1400,0,1000,1430,1432,1600,1800,1630,430 timeout 240 $B > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|E\*1000|storer|Qwen3-8B \||target" $OUT/8b.txt
unset TF_STEP_INFLIGHT_STAGES TF_STEP_INFLIGHT_GU
timeout 150 $D/bin/test_cuda_decode_step --gtest_brief=1 --gtest_filter="*Mlx4Linears*" > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
TF_STEP_ROT_STORE=1 TF_STEP_STAMPS=1 TF_BENCH_STEP_ONLY=2 timeout 100 $B > $OUT/rot-stamps.txt 2>&1
echo "rot stamps rc=$?"; grep -E "one kernel|x-made|last tiles|qkv done|waits" $OUT/rot-stamps.txt
rm -rf $D
