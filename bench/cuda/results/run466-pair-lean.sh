# Session 47: the 16-row MLX 4-bit kernels with fewer instructions a quad, the same loads and bits (SASS, a
# thread's main loop): q4_pair_kernel (qkv and o at 9-16 rows) 713 -> 562 (-21%: x of a ring's chunks from one
# pointer a token row with immediate offsets instead of 64-bit sums a chunk; the scale words' load path fixed
# at compile time, SP); q4_wg_kernel (the gate_up) 2267 -> 1884 a tile's three slots (-17%: the warpgroup index
# through a shuffle, so the wgmma descriptors are formed in the uniform datapath; wgmma_desc_plus; SP); q4_ks_kernel
# configuration 1 (the down) 4131 -> 4051 (-2%: wgmma_desc_plus, SP). One pack, .devpack2 (the working tree
# leaves ~19 MB of carry; xz's large dictionary stores the near-identical binaries once): bin/ the new
# test_quant_cuda tf_bench_quant tf_bench_cuda (the commit after 3fa7c21) and the libraries, old/ tf_bench_quant tf_bench_cuda
# of b594475 (.devpack's).
# Prediction: if the 16-row kernels are issue-bound on the H200 (session 46: ~73% issue needed at its
# bandwidth), q and k alone -8..-15%, gate_up -5..-10%, the b=16 forward -3..-5%; if latency-bound only, ties.
#   run(command="bash bench/cuda/results/run466-pair-lean.sh; cat $OUT/all.txt", carry=[".devpack2"])
set -u
P0=$(mktemp -d); xz -dc .devpack2/step.tar.xz | tar -xf - -C $P0
D1=$P0/old; D2=$P0/bin; cp $D2/*.so* $D1/
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
LD_LIBRARY_PATH=$D2 timeout 120 $D2/test_quant_cuda --gtest_brief=1 > $OUT/quant-test.txt 2>&1
echo "test_quant_cuda (new) rc=$?" >> $OUT/all.txt; grep -E "PASSED|FAILED|Failure" $OUT/quant-test.txt | head -8 >> $OUT/all.txt
export TF_BENCH_KS_RING=0
for r in 1 2; do for P in $D1 $D2; do
  LD_LIBRARY_PATH=$P timeout 90 $P/tf_bench_quant --linears-m 16 > $OUT/lin.txt 2>&1; rc=$?
  echo "linears $([ $P = $D1 ] && echo old || echo new) rc=$rc: $(grep -E '^\| 16 ' $OUT/lin.txt)" >> $OUT/all.txt
  grep -E 'q4_pair off|q4_wg off' $OUT/lin.txt | cut -c1-330 >> $OUT/all.txt
done; done
for r in 1 2; do for P in $D1 $D2; do
  LD_LIBRARY_PATH=$P timeout 150 $P/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; rc=$?
  echo "8b $([ $P = $D1 ] && echo old || echo new) rc=$rc" >> $OUT/all.txt
  grep -E "^\| Qwen3-8B \| decode b=(8|16)" $OUT/8b.txt | grep mlx >> $OUT/all.txt
done; done
rm -rf $P0
