# Session 54, run 506: (a) MLX 4-bit prefill on linear_wgmma_mlx4 (the weight dequantized in the CTA by the
# producer warpgroup, no bf16 copy of it) against the dequantize-to-bf16 path (TF_Q4_PREFILL 1 / 0): the
# kernel tests, then the 8B prefill 512 / 4k, alternating processes; (b) the grouped 4-bit experts on the
# same pipeline (moe_grouped_wgmma, TF_MOE_WGMMA): test_moe_cuda, the 30B-A3B table on and off; (c) run
# 505's stage_x_own A/B (TF_Q4_WG_XCP / TF_Q4_KS_XCP), unchanged. test_cuda_wgmma: the bf16 wgmma kernels
# after the pipeline's move into wgmma_pipeline.cuh.
# Predicted (b): the 30B-A3B 4-bit prefill 4k 396 -> ~150-200 ms (its grouped GEMMs, ~15 TFLOP at ~50 TFLOP/s
# on mma.sync, at wgmma's ~250-300).
# Predicted (a): the 8B 4-bit prefill 512 29.8 -> ~23.5 ms (the ~6.4 ms of per-call dequantization gone; the
# GEMMs at about TmaX's bf16 speed: the producer's shared-memory traffic is below TmaX's, its issue ~50
# instructions a chunk a warp against ~256 MMA clocks), prefill 4k ~-4% (the same 6.4 ms of ~170).
#   BINS="tests/models/test_quant_cuda tests/models/test_moe_cuda tests/ops/gpu/test_cuda_wgmma
#     tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_quant
#     bench/cuda/tf_bench_cuda bench/cuda/tf_bench_moe" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   mv .devpack/step.tar.xz .devpack/p506.tar.xz
#   run(command="ln -sfn p506.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run506.sh; cat $OUT/all.txt",
#       carry=[".devpack/p506.tar.xz"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
T0=$(date +%s)
for t in test_quant_cuda test_moe_cuda test_cuda_wgmma; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|Expected|Which is|differs|did not run" $OUT/$t.txt | head -10 >> $OUT/all.txt
done
for P in 1 0 1 0; do
  TF_Q4_PREFILL=$P timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --prefill > $OUT/pf-$P.txt 2>&1
  echo "prefill mlx4 TF_Q4_PREFILL=$P rc=$? $(grep -E '^\| Qwen3-8B \| prefill' $OUT/pf-$P.txt | cut -d'|' -f3,5,6,8 | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
done
timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16 --prefill > $OUT/pf-bf16.txt 2>&1
echo "prefill bf16 rc=$? $(grep -E '^\| Qwen3-8B \| prefill' $OUT/pf-bf16.txt | cut -d'|' -f3,5,6,8 | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
for P in 1 0; do
  TF_MOE_WGMMA=$P TF_Q4_PREFILL=$P timeout 150 $D/bin/tf_bench_moe --format mlx4 > $OUT/moe-$P.txt 2>&1
  echo "moe mlx4 TF_MOE_WGMMA=TF_Q4_PREFILL=$P rc=$? t=$(($(date +%s)-T0))" >> $OUT/all.txt
  grep -E "prefill 4096|^\| decode b=(1|8|32) ctx 512 \|" $OUT/moe-$P.txt | cut -c1-200 >> $OUT/all.txt
done
TF_Q4_WG_XCP=1 TF_Q4_KS_XCP=1 timeout 200 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda-xcp1.txt 2>&1
echo "test_quant_cuda XCP=1 rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda-xcp1.txt | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differs" $OUT/test_quant_cuda-xcp1.txt | head -6 >> $OUT/all.txt
for t in test_cuda_model test_cuda_graphs; do
  TF_Q4_WG_XCP=1 TF_Q4_KS_XCP=1 timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t (XCP 1) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
for X in 00 11 10 00 11 10; do  # (wg, ks)
  TF_Q4_WG_XCP=${X:0:1} TF_Q4_KS_XCP=${X:1:1} TF_BENCH_QUANT_ONLY_WGC=1 timeout 90 $D/bin/tf_bench_quant --linears-m 32,16 > $OUT/q-$X.txt 2>&1
  echo "quant XCP wg/ks=$X rc=$? t=$(($(date +%s)-T0))" >> $OUT/all.txt
  grep -E "^\| (32|16) |clusters" $OUT/q-$X.txt | cut -c1-330 >> $OUT/all.txt
done
for X in 0 1 0 1; do
  TF_Q4_WG_XCP=$X TF_Q4_KS_XCP=$X TF_BENCH_ONLY_WGC=1 timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$X.txt 2>&1
  echo "8b XCP=$X rc=$? $(grep -E '^\| Qwen3-8B \| decode b=(1|16|32) ' $OUT/8b-$X.txt | cut -d'|' -f3,4,5,9 | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
done
rm -rf $D
