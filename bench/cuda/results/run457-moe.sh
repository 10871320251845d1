# Session 44's fourth device call (NOT run: no machine lent after run 456; the first call of session 45): MoE (issue 12) on the new 9-16-row defaults (q4_pair mode 2, q4_wg mode 1):
# test_moe_cuda, tf_bench_moe's quick table (b = 1 / 8 / 32: issue 12's status), and the product on a random
# Qwen3-30B-A3B MLX 4-bit checkpoint at 12 streams with the old defaults (TF_Q4_PAIR=1 TF_Q4_WG=3) against the
# new ones (TF_Q4_PAIR=3: its qkv and o, K or width 2048, keep q4_decode_kernel) and q4_pair on every width
# (mode 2: whether mode 3's rule should widen), and one stream. First the GPU tests of the decode loop kernel's review mend (a new test,
# AttentionDecodeLoopEqualsSplit: head dims 64/128, groups 4/8/16, softcap, windows, 1-5 chunks). Build and pack: as run455-wg-pair.sh plus tests/models/test_moe_cuda and
# bench/cuda/tf_bench_moe in BINS. Also the 8B table's new line: q4_ks on the down in each configuration.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
for t in test_moe_cuda test_cuda_backend test_cuda_graphs; do
  timeout 100 $D/bin/$t --gtest_brief=1 > $OUT/t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure|Expected|Which|differ" $OUT/t.txt | head -10 >> $OUT/all.txt
done
timeout 150 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe.txt 2>&1; echo "tf_bench_moe rc=$?" >> $OUT/all.txt
grep -E "decode b=|roofline" $OUT/moe.txt | cut -c1-220 | head -12 >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -o "q4_ks on the down only[^|]*ms " $OUT/8b.txt >> $OUT/all.txt
grep -E "decode b=16 ctx=512 \(graph\):" $OUT/8b.txt >> $OUT/all.txt
M=/dev/shm/moe4
python3 tools/make_random_checkpoint.py --shape qwen3-30b-a3b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for env in "TF_Q4_PAIR=1 TF_Q4_WG=3" "TF_Q4_PAIR=3" "TF_Q4_PAIR=2" "TF_Q4_PAIR=1 TF_Q4_WG=3" "TF_Q4_PAIR=3" "TF_Q4_PAIR=2"; do
  env $env timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 12 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
  echo "e2e moe parallel 12 $env rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
done
timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --drafter none --context 2048 > $OUT/e2e.txt 2>&1
echo "e2e moe 1 stream rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
rm -rf $M $D
