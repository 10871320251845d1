# Session 57, run 534 (asked of an H200): the step's stages in flight on this card (run 532-533's cap is off on
# parts of 100 GiB or more until measured): bf16 and MLX 4-bit (the card's SW) at b=1 ctx 512, caps
# alternating with every free slot, twice; the card's other 4-bit stage shape (SW 2 or 4) too; then the tables (8B both formats
# b=1..32, 30B-A3B both formats; none on an H200 since run 497).
#   BINS="tests/ops/gpu/test_cuda_decode_step bench/cuda/tf_bench_cuda bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p534.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT=0,2,3,4,5 timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-caps.txt 2>&1
echo "8b caps rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|stages in flight" $OUT/8b-caps.txt | cut -c1-700 >> $OUT/all.txt
SW=4; nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && SW=2  # the card's other stage shape
TF_STEP_Q4_SW=$SW TF_BENCH_STEP_ONLY=2 TF_STEP_INFLIGHT=0,2,3,4,5 timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-sw$SW-caps.txt 2>&1
echo "8b sw$SW caps rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|stages in flight" $OUT/8b-sw$SW-caps.txt | cut -c1-700 >> $OUT/all.txt
timeout 100 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/test_step.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-table.txt 2>&1
echo "8b table rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode|^target" $OUT/8b-table.txt | cut -c1-300 >> $OUT/all.txt
for f in bf16 mlx4; do
  timeout 100 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f.txt 2>&1
  echo "moe $f rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| decode b=(1|8|32) ctx 512 \|" $OUT/moe-$f.txt >> $OUT/all.txt
done
rm -rf $D
