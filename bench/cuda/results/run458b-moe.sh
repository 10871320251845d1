# Session 45's device call, part b (run 457's MoE plan, prepared in session 44 and never run): issue 12's status
# on the 9-16-row defaults of runs 455-456 (q4_pair mode 3, q4_wg mode 1). tf_bench_moe's quick table (b = 1 /
# 8 / 32), then the product on a random Qwen3-30B-A3B MLX 4-bit checkpoint at 12 streams with the old defaults
# (TF_Q4_PAIR=1 TF_Q4_WG=3), the new (TF_Q4_PAIR=3: its qkv and o, K or width 2048, keep q4_decode_kernel) and
# q4_pair on every width (TF_Q4_PAIR=2: whether mode 3's rule should widen), the old again, and one stream.
# Pack: as run458-ring.sh (tf_attention_once is not needed here). run(command="bash bench/cuda/results/run458b-moe.sh; cut -c1-700 $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
timeout 150 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe.txt 2>&1; echo "tf_bench_moe rc=$?" >> $OUT/all.txt
grep -E "decode b=|roofline" $OUT/moe.txt | cut -c1-220 | head -12 >> $OUT/all.txt
M=/dev/shm/moe4
python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
# (timeouts within the call's 600 s: the bench 150, the checkpoint ~110 s, five products of 45)
for env in "TF_Q4_PAIR=1 TF_Q4_WG=3" "TF_Q4_PAIR=3" "TF_Q4_PAIR=2" "TF_Q4_PAIR=1 TF_Q4_WG=3"; do
  env $env timeout 45 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 12 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
  echo "e2e moe parallel 12 $env rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
done
timeout 45 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --drafter none --context 2048 > $OUT/e2e.txt 2>&1
echo "e2e moe 1 stream rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
rm -rf $M $D
