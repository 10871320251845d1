# Session 69, run 583: run 580's questions (the L2 prefetch past the tiles each CTA's ring holds; the down's cap)
# and the next layer's qkv / o tiles prefetched into L2 once a layer's gate_up is done (TF_STEP_L2PF_NEXT_AB
# Q*10+O, new), Qwen3-8B MLX 4-bit b=1 ctx 512 in one process; then test_cuda_decode_step's 4-bit case and warp
# 0's tile log. An H200: the same under a 2-stage cap (its default is every free slot) plus its own prefetch
# counts. Pack: .devpack/p583.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step").
D=$(mktemp -d); xz -dc .devpack/p583.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
B="$D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick"
if [[ $card == *H200* ]]; then
  TF_BENCH_STEP_ONLY=2 TF_STEP_L2PF=0,4 TF_STEP_INFLIGHT=2,3 TF_STEP_L2PF_NEXT_AB=30,32 timeout 150 $B > $OUT/h200-a.txt 2>&1
  echo "a rc=$?"; grep -E "one kernel|L2|in flight|next layer" $OUT/h200-a.txt
  export TF_STEP_INFLIGHT_STAGES=2 TF_STEP_INFLIGHT_GU=4 TF_STEP_L2PF_TILES=4
fi
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF_PLAN=40,941,961,141 TF_STEP_INFLIGHT_DN_AB=41 TF_STEP_L2PF_NEXT_AB=30,32,20,2 timeout 200 $B > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|plan|down|next layer|Qwen3-8B \||target" $OUT/8b.txt
unset TF_STEP_INFLIGHT_STAGES TF_STEP_INFLIGHT_GU TF_STEP_L2PF_TILES
timeout 150 $D/bin/test_cuda_decode_step --gtest_brief=1 --gtest_filter="*Mlx4Linears*" > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
TF_STEP_TILE_LOG=1 TF_STEP_STAMPS=1 TF_BENCH_STEP_ONLY=2 timeout 100 $B > $OUT/tilelog.txt 2>&1
echo "tilelog rc=$?"; grep -E "one kernel|x-made|last tiles|qkv done|waits|tile [0-9]|cycles a tile" $OUT/tilelog.txt
rm -rf $D
