# Session 49, run 482: every GPU test on the final tree (same script as run 470), then the MoE and 8B tables.
# Pack (11 binaries, ~55 MB each, the same fatbin: one xz stream with a 1 GiB dictionary dedups them):
#   BINS="tests/models/test_moe_cuda tests/models/test_quant_cuda tests/ops/gpu/test_cuda_backend
#     tests/ops/gpu/test_cuda_graphs tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_fusion
#     tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_linear tests/ops/gpu/test_cuda_wgmma
#     bench/cuda/tf_bench_moe bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run482-all-gpu.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_moe_cuda test_cuda_backend test_cuda_graphs test_cuda_decode_step test_quant_cuda test_cuda_fusion \
         test_cuda_model test_cuda_linear test_cuda_wgmma; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|HANG" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
timeout 120 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe.txt 2>&1; echo "tf_bench_moe rc=$?" >> $OUT/all.txt
grep -E "decode b=|roofline" $OUT/moe.txt | cut -c1-220 | head -14 >> $OUT/all.txt
timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode|^target" $OUT/8b.txt >> $OUT/all.txt
rm -rf $D
