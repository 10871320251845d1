# Session 61, run 545 (H100; scripted in session 60, run in 61): the MoE step's
# expert stages by tensor maps (TF_STEP_MOE_TMA=1) (two boxes of 8 rows in the 128-byte
# swizzle, rows g and g + 1 in different bank halves) instead of 16 row copies (run 544: a contiguous copy
# instead of the 16 made the step 3.82 -> 2.85 ms). test_cuda_moe_step (both paths, bits against the chain);
# tf_bench_moe bf16's step row with ablations a1 (no tile arithmetic), a3 (no routing wait) and in-flight
# caps; then the row-copy path (the default) in a second process; then the product: a random bf16 30B-A3B
# checkpoint of 8 layers (~11 GB in /dev/shm), `tensorfold generate` with the step off, on (row copies) and on
# (tensor maps) at T 0 and 0.7 (texts must be identical), and `tensorfold bench` one stream for each.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe tensorfold"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p545.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test_moe_step.txt 2>&1
echo "test_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map" $OUT/test_moe_step.txt | head -20 >> $OUT/all.txt
TF_STEP_MOE_TMA=1 TF_MOE_BENCH_STEP_AB=a1,a3,i0,i2,i6 TF_MOE_BENCH_WARM_S=2 timeout 200 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe-bf16.txt >> $OUT/all.txt
TF_MOE_BENCH_WARM_S=2 timeout 200 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-rows.txt 2>&1
echo "moe bf16 row copies rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-bf16-rows.txt >> $OUT/all.txt
M=/dev/shm/moe8; s0=$(date +%s)
python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --layers 8 --out $M --tokenizer $D/tok 2>&1 | tail -1 >> $OUT/all.txt
echo "checkpoint rc=$? in $(( $(date +%s) - s0 )) s $(el)" >> $OUT/all.txt
P="Write a short story about a lighthouse keeper who finds a message in a bottle."
for temp in 0 0.7; do
  for v in "0 0" "1 0" "1 1"; do set -- $v
    TF_DECODE_STEP_MOE=$1 TF_STEP_MOE_TMA=$2 timeout 100 $D/bin/tensorfold generate $M --backend cuda -p "$P" -n 200 \
      --ignore-eos --temperature $temp --seed 7 --context 4096 > $OUT/text-t$temp-s$1$2.txt 2> $OUT/gen-t$temp-s$1$2.txt
    echo "generate T=$temp step=$1 tma=$2 rc=$? $(grep -E 'tok/s' $OUT/gen-t$temp-s$1$2.txt | tail -1) $(el)" >> $OUT/all.txt
    grep -E "rror|tensor map|HANG|one-kernel" $OUT/gen-t$temp-s$1$2.txt | head -5 >> $OUT/all.txt
  done
  a=$(md5sum < $OUT/text-t$temp-s00.txt); b=$(md5sum < $OUT/text-t$temp-s10.txt); c=$(md5sum < $OUT/text-t$temp-s11.txt)
  [[ $a == "$b" && $a == "$c" ]] && echo "T=$temp: texts identical" >> $OUT/all.txt || echo "T=$temp: TEXTS DIFFER" >> $OUT/all.txt
done
for v in "0 0" "1 0" "1 1"; do set -- $v
  TF_DECODE_STEP_MOE=$1 TF_STEP_MOE_TMA=$2 timeout 100 $D/bin/tensorfold bench $M --backend cuda --drafter none \
    --workload random --tokens 256 --parallel 1 --prompt-tokens 512 --context 2048 > $OUT/tfbench-s$1$2.txt 2>&1
  echo "tensorfold bench step=$1 tma=$2 rc=$? $(el)" >> $OUT/all.txt
  grep -E "tok/s|rror" $OUT/tfbench-s$1$2.txt | head -4 >> $OUT/all.txt
done
rm -rf $M $D
