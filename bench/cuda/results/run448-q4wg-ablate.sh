set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
cd $D
date -u > $OUT/all.txt
timeout 120 bin/test_quant_cuda --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differs|rows|error" $OUT/test.txt | head -20 >> $OUT/all.txt
for cfg in 1 2; do for a in 0 1 2 3 4; do
 TF_Q4_WG_CFG=$cfg TF_Q4_WG_ABLATE=$a timeout 60 bin/tf_bench_quant --linears-m 16 > $OUT/l-$cfg-$a.txt 2>&1
 echo "cfg=$cfg ablate=$a rc=$? $(grep 'q4_wg off' $OUT/l-$cfg-$a.txt)" >> $OUT/all.txt
done; done
