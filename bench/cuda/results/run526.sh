# Session 56, run 526: the routed gate_up's routing code warmed before its wait (grouped_persistent_kernel's
# `warm`: warp 0 routes zeros once, as moe_decode's route_once; TF_MOE_ROUTED_WARM). The 30B-A3B bf16 b=1
# chain routes in this kernel; predicted ~-1.2 us a layer (moe_decode's routing went 5200 -> 2900 cycles in
# run 381): 3.41 -> ~3.35 ms. The bench twice (the A/B row in each), then test_moe_cuda.
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p526.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for i in 1 2; do
  timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-$i.txt 2>&1
  echo "bench $i rc=$? $(el)" >> $OUT/all.txt
  grep -E '^\| decode b=1 ctx 512|^b=1 abl' $OUT/moe-bf16-$i.txt >> $OUT/all.txt
done
timeout 200 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test_moe_cuda.txt 2>&1
echo "test_moe_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_cuda.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe_cuda.txt | head -6 >> $OUT/all.txt
rm -rf $D
