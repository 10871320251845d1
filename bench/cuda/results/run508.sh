# Session 54, run 508: the landed defaults (TF_Q4_PREFILL on up to 4096 rows with the 128 x 192 tile,
# TF_MOE_WGMMA on, TF_Q4_KS_XCP on, TF_Q4_WG_XCP off): the GPU tests that cover them, then the 8B table
# (--quick: decode b=1/8/16/32 at 512, prefill 512; bf16 and MLX 4-bit) and the 30B-A3B MLX 4-bit table.
#   BINS="tests/models/test_quant_cuda tests/models/test_moe_cuda tests/ops/gpu/test_cuda_model
#     tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_backend bench/cuda/tf_bench_cuda
#     bench/cuda/tf_bench_moe" TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p508.tar.xz
#   run(command="ln -sfn p508.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run508.sh; cat $OUT/all.txt",
#       carry=[".devpack/p508.tar.xz"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
T0=$(date +%s)
for t in test_quant_cuda test_moe_cuda test_cuda_model test_cuda_graphs test_cuda_backend; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|Expected|Which is|differs|did not run" $OUT/$t.txt | head -10 >> $OUT/all.txt
done
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --quick > $OUT/8b.txt 2>&1
echo "8b rc=$? t=$(($(date +%s)-T0))" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| (decode|prefill)|^target" $OUT/8b.txt | cut -c1-200 >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_moe --format mlx4 > $OUT/moe.txt 2>&1
echo "moe rc=$? t=$(($(date +%s)-T0))" >> $OUT/all.txt
grep -E "prefill 4096|^\| decode b=(1|8|32) ctx 512 \|" $OUT/moe.txt | cut -c1-200 >> $OUT/all.txt
rm -rf $D
