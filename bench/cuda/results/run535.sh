# Session 57, run 535: the new default on parts under 100 GiB -- MLX 4-bit SW 4 stages with 2 in flight (run
# 534: 1.917 ms against SW 2 at 3 stages' 1.956) -- the step's GPU tests, then the 8B table (b=1..32 both
# formats), the default against every free slot and the neighbouring caps, twice, and the probe's ablations.
#   BINS="tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p535.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_cuda_decode_step test_cuda_graphs; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
TF_STEP_ABLATE=1 TF_STEP_INFLIGHT=0,1,3 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-table.txt 2>&1
echo "8b table rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|stages in flight|step ablations|^\| Qwen3-8B \| decode|^target" $OUT/8b-table.txt | cut -c1-600 >> $OUT/all.txt
rm -rf $D
