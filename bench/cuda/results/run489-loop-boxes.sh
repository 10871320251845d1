# Session 50, run 489: the decode loop's K/V by tensor-map boxes of whole pool blocks (16 rows, padded by the
# map's zero fill) instead of a 256-byte bulk copy a row (run 488's ncu: the warps' serial issue loops of
# those copies held ~a third of the kernel's stall samples). Predicted: the 16-row attention alone at 512
# positions 14.9 -> ~11-12 us a layer (the issue loops of K and V for chunk c + 2 sit between a team's
# scores and its P V), 2048 48.8 -> ~40; the 8B b=16 forward -2..-4% (4-bit) / -1..-2% (bf16). Same bits.
#   BINS="tests/ops/gpu/test_cuda_backend tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_model bench/cuda/tf_attention_once bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run489-loop-boxes.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in "test_cuda_backend --gtest_filter=*Attention*" test_cuda_graphs test_cuda_model; do
  n=${t%% *}
  timeout 250 $D/bin/$t --gtest_brief=1 > $OUT/$n.txt 2>&1
  echo "$n rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$n.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|Expected|Which is|boxes" $OUT/$n.txt | head -12 >> $OUT/all.txt
done
for ctx in 512 2048 512 2048; do
  timeout 60 $D/bin/tf_attention_once decode $ctx 16 > $OUT/once.txt 2>&1
  grep -E "us a layer|boxes" $OUT/once.txt | sed "s/^/ctx $ctx: /" >> $OUT/all.txt
done
timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "boxes|^\| Qwen3-8B \| decode" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
