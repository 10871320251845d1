# Session 47, run 468 (prepared, not run: no device time left): (1) q4_ks without the ring configurations
# (437106e; the kernels' SASS unchanged, the host's launch table and residency cache rewritten) and (2) the new
# configuration 7 (two slices a CTA, each warpgroup both of a tile: SASS 139 instructions a thread for 64
# weights against configuration 1's 150, one fence/commit/wait a chunk for four wgmmas): test_quant_cuda (its
# ks test covers 0-4 and 7), the 16-row linears (the q4_ks line: configurations 0 1 2 3 4 7) and the 8B
# forward's "q4_ks on the down only in configurations 0 1 2 3 4 7" line (same call).
# Prediction: configuration 7's down alone -3..-8% against 1 (H200 run 466: 0.508 ms), the forward -0.5..-1%.
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run468-ks-trim.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 90 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/quant-test.txt 2>&1; echo "test_quant_cuda rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure" $OUT/quant-test.txt | head -8 >> $OUT/all.txt
timeout 60 $D/bin/tf_bench_quant --linears-m 16 > $OUT/lin.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
grep -E "^\| 16|q4_ks" $OUT/lin.txt | cut -c1-400 >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode" $OUT/8b.txt >> $OUT/all.txt
grep -oE "q4_ks on the down only[^:]*:( [0-9.]+ ms)*" $OUT/8b.txt >> $OUT/all.txt
# (and whether q4_pair's mode 3 -- qkv and o on q4_pair -- still wins the forward after the lean kernels)
grep -oE "q4_pair off / where its tiles fill the grid / always:( [0-9.]+ ms)*" $OUT/8b.txt >> $OUT/all.txt
rm -rf $D
