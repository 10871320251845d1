# Session 64, run 555 (NOT RUN: the device time ran out; for the next session): variant 9, the bf16 MoE step's
# expert stages by tensor maps from a tile's sources read once a tile (BfTileSrc, as run 554's Q4TileSrc),
# against the default (a stage's sources derived a stage); and test_cuda_moe_step whole (SameBitsVariants now
# {4, 5, 8, 9}; Mlx4GivesTheChainsBits with run 554's Q4TileSrc and every free slot in flight).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe tensorfold"  (packed from session 64's final tree)
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p555.tar.xz
# Run: ln -sfn p555.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run555.sh; cat $OUT/all.txt
# Prediction (H100): a9 -0.01..-0.05 ms against the default (~2.90; bf16's producer spent ~25% of its time in
# expert_stage, but its stages are 4x the 4-bit's bytes, so the issue rate matters less). If a9 wins and the
# test passes, make it the default (decode_step_kernel.cuh: tm's condition).
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a9,a9 TF_MOE_BENCH_WARM_S=2 timeout 80 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "bf16 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe-bf16.txt >> $OUT/all.txt
TF_STEP_STAMPS=1 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4.txt 2>&1
echo "mlx4 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe4.txt >> $OUT/all.txt
sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe4.txt | head -12 >> $OUT/all.txt  # (layer 10, down stamped now)
timeout 240 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
