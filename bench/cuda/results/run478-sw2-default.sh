# Session 49, run 478: the new default (two-slice 4-bit stages on cards under 100 GiB) on the card that comes:
# test_cuda_decode_step (the default shape, then 2 / 4 / 8 by TF_STEP_Q4_SW), test_cuda_graphs, the 8B table,
# and with two-slice stages the step's early-chunk bias sweep (TF_STEP_EARLY_AB: retuned since session 29 on
# four-slice stages) and the probe's ablations (TF_STEP_ABLATE: the skeleton's share of the floor now).
#   BINS="tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run478-sw2-default.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_cuda_decode_step test_cuda_graphs; do
  timeout 250 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|HANG|differ" $OUT/$t.txt | head -8 >> $OUT/all.txt
done
TF_STEP_EARLY_AB=1 TF_STEP_ABLATE=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "^decode step b=1|early-chunk bias|step ablations|^\| Qwen3-8B \| decode" $OUT/8b.txt | cut -c1-400 >> $OUT/all.txt
rm -rf $D
