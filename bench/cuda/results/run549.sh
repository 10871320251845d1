# Session 63, run 549: run 548's bf16 A/Bs (session 62's three same-bits variants of the MoE step's down, and
# the layer-10 timeline) plus the first run of the MoE step's MLX 4-bit instance (session 63; off by default,
# DecodeStep::set_moe_mlx4 / TF_DECODE_STEP_MOE_MLX4=1):
#   bf16: a5 two ranks a down stage, a6 the combine's one barrier a tile, a7 the down's x by rank (run548.sh
#         says what each is); predictions (H100) a5 -0.02..-0.07 ms, a6 -0.01..-0.03, a7 -0.02..-0.08 against
#         ~2.955;
#   mlx4: test_cuda_moe_step's Mlx4GivesTheChainsBits (an mlx-lm-style 2-layer checkpoint: 8-bit router, stacked
#         4-bit experts in groups of 64, and of 128 / 32 in layer 1) and tf_bench_moe --format mlx4 (its step
#         row: logits against the chain's, then the time). Prediction (H100, 30B-A3B MLX 4-bit b=1 ctx 512):
#         the step 1.2-1.5 ms against the chain's ~2.0 (roofline ~0.59 ms: ~40-48%).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe tensorfold"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p549.tar.xz
# Run: ln -sfn p549.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run549.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
# the MLX 4-bit case first (new code: a hang shows here), then the rest
timeout 150 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter='*Mlx4*' > $OUT/test4.txt 2>&1
rc4=$?
echo "test_moe_step mlx4 rc=$rc4 $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test4.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map|step:|rror" $OUT/test4.txt | head -20 >> $OUT/all.txt
TF_MOE_BENCH_WARM_S=2 timeout 120 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4.txt 2>&1
echo "moe mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe4.txt >> $OUT/all.txt
TF_STEP_STAMPS=1 TF_MOE_BENCH_STEP_AB=a5,a6,a7,a4,a1,a3 TF_MOE_BENCH_WARM_S=2 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-1.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe-1.txt >> $OUT/all.txt
sed -n '/^stamps ctx/,$p' $OUT/moe-1.txt | head -40 >> $OUT/all.txt
timeout 150 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter='*SameBitsVariants*:*PreparedForTheShape*' > $OUT/test.txt 2>&1
rc=$?
echo "test_moe_step bf16 rc=$rc $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map" $OUT/test.txt | head -20 >> $OUT/all.txt
[[ -n ${FULL:-} ]] || { rm -rf $D; exit 0; }
TF_MOE_BENCH_STEP_AB=a5,a6,a7 TF_MOE_BENCH_WARM_S=2 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-2.txt 2>&1
echo "moe bf16 (2) rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-2.txt >> $OUT/all.txt
rm -rf $D
