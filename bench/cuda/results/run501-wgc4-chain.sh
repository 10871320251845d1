# Ran in session 52 (H100, logs run501/): bits equal, lost everywhere (the down 0.729 -> 1.286 ms); not landed.
# Session 51, run 501 (prepared, not run: no device was lent after run 497): q4_wg on clusters of FOUR CTAs at
# 17-32 rows (x's quarter of K a CTA: K up to 12288 at 32 rows, so the down too; the fold a chain, rank r adding
# its two slices to rank r - 1's running sum and pushing it on, point to point on mbarriers with remote arrives;
# TF_Q4_WGC4 0 off / 1 K > 4096 / 2 every K, the 32-token q4_ks off with it). Written blind, compile-checked
# only (106 registers, 224 KB of dynamic shared memory at K = 12288: two warpgroups a CTA).
# Why: the down at 32 rows stays on the 32-token q4_ks (H200 0.700 ms / 36 calls at M = 32, against 0.539 at 16);
# and with ~66 pairs resident the product's fused qkv (96 tiles) runs 1.45 rounds on the pairs, where quarter
# tiles on ~33 quads run 3 rounds of a quarter (~0.75 of the time). Predicted: the down -10..-25%, the b=32
# forward -2..-5%; if the chain's hops show (rank 3 three pushes behind rank 0), less.
#   git apply bench/cuda/results/run501-wgc4-chain.patch   (then build; `git apply -R` after)
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run501-wgc4-chain.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 120 $D/bin/test_quant_cuda --gtest_brief=1 --gtest_filter='*Cluster*' > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda (clusters) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differs|rows|N [0-9]" $OUT/test_quant_cuda.txt | head -12 >> $OUT/all.txt
TF_BENCH_QUANT_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_quant --linears-m 32,24 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (32|24) |clusters" $OUT/quant.txt | cut -c1-420 >> $OUT/all.txt
TF_BENCH_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode b=(16|32)|clusters" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
