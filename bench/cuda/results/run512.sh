# Session 55, run 512: bf16 experts on wgmma on by default; its test with the copies fixed (256 copies), then
# tf_bench_moe for both formats with the new prefill lines (experts on mma.sync, same call) and prefill
# ablations.
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p512.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_moe_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|did not run" $OUT/test.txt | head -8 >> $OUT/all.txt
for f in bf16 mlx4; do
  timeout 300 $D/bin/tf_bench_moe --format $f > $OUT/bench-$f.txt 2>&1
  echo "bench $f rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/all.txt
  grep -E "^\| (decode b=1 ctx 512 |decode b=8 ctx 512 |decode b=32 ctx 512 |prefill)|^prefill|copy|rror" $OUT/bench-$f.txt | head -20 >> $OUT/all.txt
done
rm -rf $D
