# Session 65, run 557: the TMA probe (bench/cuda/tma_probe.cu: stage and box shapes, the stream alone), then
# the bf16 MoE step with BfTileSrc as its default (variant 9 retired) -- its bench row against the chain, and
# test_cuda_moe_step whole (SameBitsVariants {4, 5, 8}).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe bench/cuda/tf_tma_probe"
# Run: ln -sfn p557.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run557.sh; cat $OUT/all.txt
# Prediction: the probe's 4.5 KB four-box stages well below the one-copy 4.5 KB stages (< 1.5 TB/s against
# ~3), the scale boxes (32-byte rows) the slowest per byte; the bf16 step ~2.92 ms as a9 in run 555.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 120 $D/bin/tf_tma_probe > $OUT/tma.txt 2>&1; echo "tma probe rc=$?" >> $OUT/all.txt; cat $OUT/tma.txt >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a8 TF_MOE_BENCH_WARM_S=2 timeout 80 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "bf16 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe-bf16.txt >> $OUT/all.txt
timeout 240 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
