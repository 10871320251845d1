# Session 55, run 515: the bf16 experts' wgmma kernel in persistent CTAs (one an SM, tiles in turn, the ring
# going on from tile to tile; TF_MOE_WGMMA_PERSIST) -- test_moe_cuda, test_cuda_wgmma and test_quant_cuda
# (consume gained a chunk base and tail releases), then tf_bench_moe bf16 (prefill persistent vs one a tile).
#   BINS="tests/models/test_moe_cuda tests/ops/gpu/test_cuda_wgmma tests/models/test_quant_cuda
#     bench/cuda/tf_bench_moe" TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p515.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_moe_cuda test_cuda_wgmma test_quant_cuda; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|did not run" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
timeout 300 $D/bin/tf_bench_moe --format bf16 > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| (decode b=1 ctx 512 |decode b=8 ctx 512 |decode b=32 ctx 512 |prefill)|^prefill" $OUT/moe-bf16.txt >> $OUT/all.txt
rm -rf $D
