# Session 47, run 468: q4_ks without the ring configurations (437106e; the kernels' SASS unchanged, the host's
# launch table and residency cache rewritten): test_quant_cuda, and the 16-row linears once (the q4_ks line).
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run468-ks-trim.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 90 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/quant-test.txt 2>&1; echo "test_quant_cuda rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure" $OUT/quant-test.txt | head -8 >> $OUT/all.txt
timeout 60 $D/bin/tf_bench_quant --linears-m 16 > $OUT/lin.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
grep -E "^\| 16|q4_ks" $OUT/lin.txt | cut -c1-400 >> $OUT/all.txt
rm -rf $D
