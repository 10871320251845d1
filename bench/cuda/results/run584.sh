# Session 69, run 584: the weight stream under an L2 evict-first policy (Params::stream_ef, new) with the L2
# prefetches -- run 583 found every prefetch of bytes the ring does not already hold losing ~1.7% a tile of 132
# CTAs (the next layer's qkv / o after the gate_up, the gate_up's tiles past the ring's), as if the prefetched
# lines were evicted by the stream before use. TF_STEP_EF_PLAN E*1000+T*100+Q*10+O (E 1: evict-first; T gate_up
# tiles; Q / O the next layer's qkv / o tiles), Qwen3-8B b=1 ctx 512, one process; then the 4-bit test case.
# Pack: .devpack/p584.tar.xz (BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step").
D=$(mktemp -d); xz -dc .devpack/p584.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
card=$(nvidia-smi --query-gpu=name --format=csv,noheader); echo "$card"
B="$D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick"
[[ $card == *H200* ]] && export TF_STEP_INFLIGHT_STAGES=2 TF_STEP_INFLIGHT_GU=4
TF_BENCH_STEP_ONLY=1 TF_STEP_EF_PLAN=400,1400,0,1000,1430,1432,1600,1800,1630,430 timeout 240 $B > $OUT/8b.txt 2>&1
echo rc=$?; grep -E "one kernel|E\*1000|Qwen3-8B \||target" $OUT/8b.txt
unset TF_STEP_INFLIGHT_STAGES TF_STEP_INFLIGHT_GU
timeout 150 $D/bin/test_cuda_decode_step --gtest_brief=1 --gtest_filter="*Mlx4Linears*" > $OUT/step-test.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/step-test.txt | tr '\n' ' ')"
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/step-test.txt | head -6
rm -rf $D
