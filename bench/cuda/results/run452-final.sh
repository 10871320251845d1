set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
for t in test_quant_cuda test_cuda_graphs test_cuda_model test_moe_cuda; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure|differs" $OUT/$t.txt | head -10 >> $OUT/all.txt
done
timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16,mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt; grep -E "decode b=|q4_wg off|\| Qwen3-8B" $OUT/8b.txt | cut -c1-400 >> $OUT/all.txt
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
timeout 200 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 16 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
echo "e2e bench parallel 16 rc=$?" >> $OUT/all.txt; grep -E "tok/s|differ|rror|random" $OUT/e2e.txt | head -8 >> $OUT/all.txt
rm -rf $M $D
