# Session 62, run 548 (NOT RUN: the session's device time ran out in failed starts; for the next session): two
# same-bits variants of the MoE step's down, built, not yet run on a GPU, so not the defaults:
#   a5 -- two ranks a down stage (Op::dranks: 12 KB, not 6 KB, in 17 KB slots, so the ring holds 96 KB of the
#         down's 192 KB tile across the wait for its x, not 48);
#   a6 -- the combine's one barrier a tile (every rank's slice sums in dred, then warp 0's folds; the default
#         is a barrier and a fold a rank);
#   a7 -- the down's x by rank: each warp polls its own slice of rank r's act words right before rank r's
#         arithmetic, instead of make_x of all 6144 words first (the low ranks' gate_up tiles come first in
#         every CTA, so the down's first ranks overlap the last gate_up tiles).
# test_cuda_moe_step (8 cases; SameBitsVariants runs a4-a7 against the chain); tf_bench_moe bf16 with
# a5, a6, a7 (the A/Bs), a4, a1, a3, twice, the second with the probe's timeline of layer 10 (TF_STEP_STAMPS,
# after the timing; first use of the MoE stamps: kOpsPerLayer 5); with FULL=1 also a third process with the
# tile log (TF_STEP_TILE_LOG) and the product: random 8-layer 30B-A3B, `tensorfold generate` step off / on at
# T 0 and 0.7 (texts must be identical).
# Prediction (H100): a5 -0.02..-0.07 ms against 2.955 (48 KB more of each CTA's down prefetched, where the
# gate_up -> down hop lasts long enough to load it: ~2 us a layer at most); a6 -0.01..-0.03 (7 barriers and
# warp 0's interleaved folds, ~0.5 us a layer, off the down's critical path); a7 -0.02..-0.08 (the
# gate_up -> down hop, ~1-2 us a layer, overlapped). A winner becomes the default:
# down_ranks / one_bar's conditions in decode_step_kernel.cuh inverted (then a5 + a6 together: one ablate
# value at a time, so make one the default first).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe tensorfold"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p548.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
rc=$?
echo "test_moe_step rc=$rc $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map" $OUT/test.txt | head -20 >> $OUT/all.txt
for i in 1 2; do
  ST=""; [[ $i == 2 ]] && ST=1
  TF_STEP_STAMPS=$ST TF_MOE_BENCH_STEP_AB=a5,a6,a7,a4,a1,a3 TF_MOE_BENCH_WARM_S=2 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-$i.txt 2>&1
  echo "moe bf16 ($i) rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe-$i.txt >> $OUT/all.txt
done
sed -n '/^stamps ctx/,$p' $OUT/moe-2.txt | head -40 >> $OUT/all.txt
[[ -n ${FULL:-} ]] || { rm -rf $D; exit 0; }  # (run as: the tests and the two benches only; FULL=1: all)
TF_STEP_STAMPS=1 TF_STEP_TILE_LOG=1 TF_MOE_BENCH_WARM_S=1 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-3.txt 2>&1
echo "moe bf16 tile log rc=$? $(el)" >> $OUT/all.txt
sed -n '/^stamps ctx/,$p' $OUT/moe-3.txt | head -40 >> $OUT/all.txt
if [[ $rc == 0 ]]; then
M=/dev/shm/moe8; s0=$(date +%s)
python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --layers 8 --out $M --tokenizer $D/tok 2>&1 | tail -1 >> $OUT/all.txt
echo "checkpoint rc=$? in $(( $(date +%s) - s0 )) s $(el)" >> $OUT/all.txt
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for temp in 0 0.7; do
  for v in 0 1; do
    TF_DECODE_STEP_MOE=$v timeout 100 $D/bin/tensorfold generate $M --backend cuda -p "$P" -n 200 \
      --ignore-eos --temperature $temp --seed 7 --context 4096 > $D/text-$temp-$v.txt 2> $D/gen.txt
    echo "generate T=$temp step=$v rc=$? $(grep -E 'tok/s' $D/gen.txt | tail -1) $(el)" >> $OUT/all.txt
    grep -E "rror|tensor map|HANG" $D/gen.txt | head -5 >> $OUT/all.txt
  done
  cmp -s $D/text-$temp-0.txt $D/text-$temp-1.txt && echo "T=$temp: texts identical" >> $OUT/all.txt || echo "T=$temp: TEXTS DIFFER" >> $OUT/all.txt
done
rm -rf $M
fi
rm -rf $D
