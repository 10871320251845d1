# Session 68, run 580 (H100): the L2 prefetch past the tiles each CTA's ring already holds. The prefetch of a
# CTA's first 4 gate_up tiles (the default) partly repeats the ring's contents during the attention (11 slots
# lent / 7 short, less o's 4 stages: 3 / 1 gate_up tiles held) -- TF_STEP_L2PF_PLAN S*100+T*10+C: T tiles past
# the first S (9: those the ring holds, l2pf_skip_of), C 1: the gate_up's cap from the tiles past S.
# Also the down's tiles past each CTA's first at more stages in flight (TF_STEP_INFLIGHT_DN_AB N*10+F).
# Then test_cuda_decode_step (its new prefetch-plan cases among them).
#   BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step"; packed as .devpack/p580.tar.xz
D=$(mktemp -d); xz -dc .devpack/p580.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name --format=csv,noheader
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF_PLAN=40,940,941,920,921,960,961,980,981,141,241 TF_STEP_INFLIGHT_DN_AB=41,40,31,61 timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|plan|down|Qwen3-8B \||target" $OUT/8b.txt
timeout 250 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
# The probe's layer timeline with the prefetch past the ring's tiles and the gate_up's cap from there.
TF_STEP_L2PF_SKIP=-1 TF_STEP_GU_CAP_SKIP=1 TF_STEP_STAMPS=1 TF_BENCH_STEP_ONLY=2 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/stamps.txt 2>&1
echo "stamps rc=$?"; grep -E "one kernel|o: x-made|last tiles|qkv done|waits" $OUT/stamps.txt
# Session 69: warp 0's tile log on the current kernels (default plan): a gate_up tile's cycles by part -- the
# stage wait, the arithmetic, the team barrier, the sum + store (run 338's was the last dense one).
TF_STEP_TILE_LOG=1 TF_STEP_STAMPS=1 TF_BENCH_STEP_ONLY=2 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/tilelog.txt 2>&1
echo "tilelog rc=$?"; grep -E "one kernel|x-made|last tiles|waits|tile [0-9]|cycles a tile" $OUT/tilelog.txt
