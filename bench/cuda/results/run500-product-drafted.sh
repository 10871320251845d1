# Ran in session 52 (H100, logs run500/): random weights drafted nothing; run 503 (run503/summary.txt) measured the verify rounds with --drafter replay instead.
# Session 51, run 500 (prepared, not run: no device was lent after run 497): the product's drafted rounds at 8
# and 16 streams of a random MLX 4-bit/g64 Qwen3-8B checkpoint (session 50's Next 1b): `tensorfold bench
# --workload repetitive --drafter auto` (context copies; the bench checks that drafted and serial outputs are
# identical token for token), with q4_wg's cluster instance off and on (TF_Q4_WGC=0 / 1: verify rounds of
# 8-16 streams x 1 + k tokens run 17-64-row linears). Predicted: the drafted rate +3..+8% with the clusters
# at 8 streams (verify rounds of ~24-40 rows), less at 16 (rows past 64 run the 64-row tiles).
#   BINS="tensorfold" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run500-product-drafted.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
M=/dev/shm/q8b-4bit
t0=$(date +%s)
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
echo "checkpoint in $(($(date +%s) - t0)) s" >> $OUT/all.txt
for p in 8 16; do
  for wgc in 1 0; do  # (session 52: once each, for device time; was 1 0 1 0)
    n=bench-p$p-wgc$wgc-$RANDOM
    TF_Q4_WGC=$wgc timeout 240 $D/bin/tensorfold bench $M --backend cuda --workload repetitive --drafter auto \
      --parallel $p --tokens 192 --context 2048 > $OUT/$n.txt 2>&1
    echo "=== $p streams, TF_Q4_WGC=$wgc rc=$?" >> $OUT/all.txt
    grep -E "^\| |differ|mismatch|rror" $OUT/$n.txt | head -6 >> $OUT/all.txt
  done
done
rm -rf $M $D
