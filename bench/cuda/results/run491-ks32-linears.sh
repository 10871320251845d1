# Session 50, run 491: run 490's 32-token q4_ks lost in the b=32 forward (+6.4%); which linears does it lose
# on? tf_bench_quant --linears-m 32,24: each 8B linear kind over 36 layers at M rows, q4_ks's 32-token
# instance off / on / for K > 4096 only (the down); then the forward's A/B with the three modes.
#   BINS="bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run491-ks32-linears.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_quant --linears-m 32,24 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (32|24) |17-32" $OUT/quant.txt | cut -c1-400 >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "17-32 rows|^\| Qwen3-8B \| decode b=(16|32)" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
