# Session 62, run 547: the MoE step's side buffer (decode_step_kernel.cuh's side_tile): a CTA with no
# attention work loads the first tile of the op after each layer's down (the next qkv, or the lm_head) into
# its idle attention staging region while its producer waits for the layer's routing (the ring drains then).
# test_cuda_moe_step (8 cases; SameBitsVariants runs a4 and a5 = no side buffer against the chain too);
# tf_bench_moe bf16 with a5 (no side: the A/B), a4, a1, a3, twice; then the product on a random 8-layer
# 30B-A3B checkpoint: `tensorfold generate` step off / on / on without the side buffer, T 0 and 0.7 (texts
# must be identical).
# Prediction (H100): the step 2.95 -> 2.85-2.91 ms (64 KB a CTA on ~112 of 132 CTAs into ~5 us a layer of
# idle HBM; the attention CTAs, without it, may set the qkv's pace, so the lower gain is likelier).
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe tensorfold"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p547.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test_moe_step.txt 2>&1
rc=$?
echo "test_moe_step rc=$rc $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map" $OUT/test_moe_step.txt | head -20 >> $OUT/all.txt
for i in 1 2; do
  TF_MOE_BENCH_STEP_AB=a5,a4,a1,a3 TF_MOE_BENCH_WARM_S=2 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-$i.txt 2>&1
  echo "moe bf16 ($i) rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe-bf16-$i.txt >> $OUT/all.txt
done
if [[ $rc == 0 ]]; then
M=/dev/shm/moe8; s0=$(date +%s)
python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --layers 8 --out $M --tokenizer $D/tok 2>&1 | tail -1 >> $OUT/all.txt
echo "checkpoint rc=$? in $(( $(date +%s) - s0 )) s $(el)" >> $OUT/all.txt
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for temp in 0 0.7; do
  for v in "0 1" "1 1" "1 0"; do set -- $v
    TF_DECODE_STEP_MOE=$1 TF_STEP_MOE_SIDE=$2 timeout 100 $D/bin/tensorfold generate $M --backend cuda -p "$P" -n 200 \
      --ignore-eos --temperature $temp --seed 7 --context 4096 > $OUT/text-t$temp-s$1$2.txt 2> $OUT/gen-t$temp-s$1$2.txt
    echo "generate T=$temp step=$1 side=$2 rc=$? $(grep -E 'tok/s' $OUT/gen-t$temp-s$1$2.txt | tail -1) $(el)" >> $OUT/all.txt
    grep -E "rror|tensor map|HANG|one-kernel" $OUT/gen-t$temp-s$1$2.txt | head -5 >> $OUT/all.txt
  done
  a=$(md5sum < $OUT/text-t$temp-s01.txt); b=$(md5sum < $OUT/text-t$temp-s11.txt); c=$(md5sum < $OUT/text-t$temp-s10.txt)
  [[ $a == "$b" && $a == "$c" ]] && echo "T=$temp: texts identical" >> $OUT/all.txt || echo "T=$temp: TEXTS DIFFER" >> $OUT/all.txt
done
rm -rf $M
fi
rm -rf $D
