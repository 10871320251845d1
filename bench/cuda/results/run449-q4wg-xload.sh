set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
cd $D
date -u > $OUT/all.txt
timeout 120 bin/test_quant_cuda --gtest_brief=1 > $OUT/test.txt 2>&1; echo "test rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differs|rows|error" $OUT/test.txt | head -20 >> $OUT/all.txt
for a in 0 1 3; do
 TF_Q4_WG_ABLATE=$a timeout 60 bin/tf_bench_quant --linears-m 16 > $OUT/l-$a.txt 2>&1
 echo "ablate=$a rc=$? $(grep 'q4_wg off' $OUT/l-$a.txt)" >> $OUT/all.txt
done
timeout 100 bin/tf_bench_quant --linears-m 1,8,9,16 > $OUT/linears.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt; cat $OUT/linears.txt >> $OUT/all.txt
