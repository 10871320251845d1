set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
cd $D
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $OUT/all.txt
timeout 120 bin/test_quant_cuda --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differs|rows|error" $OUT/test.txt | head -40 >> $OUT/all.txt
timeout 200 bin/tf_bench_quant --linears-m 1,8,16 > $OUT/linears.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
cat $OUT/linears.txt >> $OUT/all.txt
for v in 0 1 2; do TF_Q4_WG_CFG=$v timeout 100 bin/tf_bench_cuda --shape qwen3-8b --format bf16,mlx4 --decode --quick > $OUT/8b-cfg$v.txt 2>&1; echo "8b wg=$v rc=$?" >> $OUT/all.txt; grep -E "decode b=|Qwen3-8B" $OUT/8b-cfg$v.txt | head -20 >> $OUT/all.txt; done
