# Session 44's third device call: the new defaults (q4_pair mode 2, q4_wg mode 1, from run 455's same-call
# lines) and the graph key's decode loop term. The GPU tests on them (test_cuda_graphs also with the decode
# loop in mode 1), the 4-bit 8B table with the decode loop's same-call line under the new modes, and the
# product at 9, 12 and 16 streams (and at b = 8 q4_wg / q4_ks at every row count, a new same-call line) with the new defaults against the old ones (TF_Q4_PAIR=1 TF_Q4_WG=3).
# Build and pack: as run455-wg-pair.sh.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
for t in test_quant_cuda test_cuda_graphs test_cuda_model test_cuda_backend; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure|differ|Expected|Which|actual" $OUT/t.txt | head -12 >> $OUT/all.txt
done
TF_ATTN_DECODE_LOOP=1 timeout 150 $D/bin/test_cuda_graphs --gtest_brief=1 > $OUT/t.txt 2>&1; echo "test_cuda_graphs decode loop 1 rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure" $OUT/t.txt | head -8 >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "decode b=[0-9]+ ctx=512 \(graph\):|decode b=1 ctx=512 \(one|decode loop" $OUT/8b.txt | grep -v "ours" | cut -c1-200 >> $OUT/all.txt
grep -o "q4_pair/q4_wg modes[^|]* ms" $OUT/8b.txt >> $OUT/all.txt
grep -o "q4_wg/q4_ks modes.*" $OUT/8b.txt >> $OUT/all.txt
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for par in 16 12 9; do
  for env in "TF_Q4_PAIR=1 TF_Q4_WG=3" "TF_Q4_PAIR=2" "TF_Q4_PAIR=1 TF_Q4_WG=3" "TF_Q4_PAIR=2"; do
    env $env timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel $par --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
    echo "e2e parallel $par $env rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
  done
done
TF_ATTN_DECODE_LOOP=1 timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 16 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
echo "e2e parallel 16 decode loop 1 rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
rm -rf $M $D
