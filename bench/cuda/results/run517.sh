# Session 55, run 517: the MoE wgmma consumers with two accumulators (consume_dual, TF_MOE_WGMMA_DUAL, off by
# default) -- test_moe_cuda (the wgmma bit checks now also run it), then tf_bench_moe for both formats (prefill
# 4096 with it on, same call). The bf16 BN = 128 instance spills ~184-216 bytes with it compiled in.
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p517.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe_cuda.txt 2>&1
echo "test_moe_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_cuda.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|two accumulators" $OUT/test_moe_cuda.txt | head -8 >> $OUT/all.txt
for f in mlx4 bf16; do
  timeout 300 $D/bin/tf_bench_moe --format $f > $OUT/moe-$f.txt 2>&1
  echo "moe $f rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| (decode b=1 ctx 512 |prefill)|^prefill" $OUT/moe-$f.txt >> $OUT/all.txt
done
rm -rf $D
