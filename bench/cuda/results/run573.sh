# Session 67, run 573: the dense step's L2 prefetch (Params::l2pf: each CTA's first n gate_up tiles of a layer
# bulk-prefetched into L2 by an attention warp's lane once the layer's qkv is done; same bits) -- the tests
# (test_cuda_decode_step, whose 4-bit case now runs n = 4 on 132 and 40 CTAs; test_cuda_moe_step: Params grew),
# then the dense Qwen3-8B MLX 4-bit step at n = 0 (off), 2, 4, 6, 12 in one process (issue 11), bf16 beside.
#   BINS="bench/cuda/tf_bench_cuda tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_moe_step";
#   packed as .devpack/p573.tar.xz
# Run: ln -sfn p573.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run573.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF=0,2,4,6,12 timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-mlx4.txt 2>&1
echo "8b mlx4 rc=$?" >> $OUT/all.txt; grep -E "one-kernel|step logits|L2|decode step|rror|HANG|target" $OUT/8b-mlx4.txt | head -30 >> $OUT/all.txt
for t in test_cuda_decode_step test_cuda_moe_step; do
  timeout 240 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|differ|HANG" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
rm -rf $D
