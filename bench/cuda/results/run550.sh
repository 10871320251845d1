# Session 63, run 550 (NOT RUN: the session's device time ran out; for the next session): the MoE step's MLX
# 4-bit instance again (run 549: illegal instructions -- the down's scale-word boxes started at word 3 / 6 / 9
# of a row, and a tiled TMA box must start 16-byte aligned; now from the word rounded down to a multiple of
# 4), and bf16 variant 8 (session 63: CTAs without attention work lend the ring their attention staging
# region, 12 slots of 17 KB instead of 8, as the 4-bit rings do) against the default (two ranks a down stage
# since run 549) and variant 5 (one rank, the old default).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe tensorfold"  (packed from 598f104)
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p550.tar.xz
# Run: ln -sfn p550.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run550.sh; cat $OUT/all.txt
# (~150 s of device time; the tests write their random checkpoints on the device.)
# Predictions (H100): the mlx4 step 1.2-1.5 ms against the chain's ~2.15 (roofline 0.586: 40-48%); a8 -0.02..-0.08
# ms against the default (~112 of 132 CTAs hold 144 KB of their down tile across the gate_up -> down hop,
# not 96; the ~20 attention CTAs keep 8 slots and may then set the down's pace); a5 +0.2 (run 549).
# If the mlx4 step is right (test passes, "step logits == chain: yes") and faster than its chain, turn it on
# by default (decode_step.cu's g_moe_mlx4). FULL=1 adds the product check (~90 s more): a random 8-layer
# 30B-A3B MLX 4-bit checkpoint (tools/make_random_checkpoint.py --mlx-bits 4: stacked experts, its router
# bf16), `tensorfold generate` with the 4-bit instance off / on (TF_DECODE_STEP_MOE_MLX4=0 / 1) at T 0 and
# 0.7: the texts must be identical.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_MOE_BENCH_WARM_S=2 timeout 80 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4.txt 2>&1
echo "moe mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe4.txt >> $OUT/all.txt
timeout 80 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter='*Mlx4*' > $OUT/test4.txt 2>&1
rc4=$?
echo "test_moe_step mlx4 rc=$rc4 $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test4.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map|step:|rror" $OUT/test4.txt | head -20 >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a8,a5,a8 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-1.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-1.txt >> $OUT/all.txt
timeout 100 $D/bin/test_cuda_moe_step --gtest_brief=1 --gtest_filter='*SameBitsVariants*' > $OUT/test.txt 2>&1
echo "test_moe_step variants rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|variant" $OUT/test.txt | head -10 >> $OUT/all.txt
[[ -n ${FULL:-} ]] || { rm -rf $D; exit 0; }
M=/dev/shm/moe8q; s0=$(date +%s)
python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --layers 8 --mlx-bits 4 --out $M --tokenizer $D/tok 2>&1 | tail -1 >> $OUT/all.txt
echo "checkpoint rc=$? in $(( $(date +%s) - s0 )) s $(el)" >> $OUT/all.txt
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for temp in 0 0.7; do
  for v in 0 1; do
    TF_DECODE_STEP_MOE_MLX4=$v timeout 100 $D/bin/tensorfold generate $M --backend cuda -p "$P" -n 200 \
      --ignore-eos --temperature $temp --seed 7 --context 4096 > $D/text-$temp-$v.txt 2> $D/gen.txt
    echo "generate T=$temp mlx4 step=$v rc=$? $(grep -E 'tok/s' $D/gen.txt | tail -1) $(el)" >> $OUT/all.txt
    grep -E "rror|tensor map|HANG|one-kernel" $D/gen.txt | head -5 >> $OUT/all.txt
  done
  cmp -s $D/text-$temp-0.txt $D/text-$temp-1.txt && echo "T=$temp: texts identical" >> $OUT/all.txt || echo "T=$temp: TEXTS DIFFER" >> $OUT/all.txt
done
rm -rf $M $D
