# Session 64, run 551: ncu of the MoE step's MLX 4-bit instance (run 550: 3.68 ms against the chain's 2.14; no
# tile arithmetic 3.03, no routing wait 3.02) and of the bf16 instance for contrast: warp stall sampling by
# source line. Pack p551 (run 550 + the bf16 ring lent by default). Run: ln -sfn p551.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run551.sh
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16; do
  TF_MOE_BENCH_WARM_S=0 timeout 240 $NCU --clock-control none --kernel-name regex:decode_step_kernel \
    --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section LaunchStats -o $OUT/$f -f $D/bin/tf_bench_moe --format $f --quick \
    > $OUT/ncu-$f.txt 2>&1
  echo "$f ncu rc=$?" >> $OUT/all.txt; grep -E "==PROF==|==ERROR==|==WARNING==" $OUT/ncu-$f.txt | head -5 >> $OUT/all.txt
  $NCU -i $OUT/$f.ncu-rep --page details > $OUT/$f-details.txt 2>&1
  $NCU -i $OUT/$f.ncu-rep --page source --csv --print-source cuda > $OUT/$f-src.csv 2>&1
  echo "$f pages rc=$? $(wc -c < $OUT/$f-src.csv) bytes" >> $OUT/all.txt
  grep -E "Duration|Warp Cycles Per Issued|Issued Warp|DRAM Throughput|Memory Throughput" $OUT/$f-details.txt | head -8 >> $OUT/all.txt
done
TF_MOE_BENCH_STEP_AB=a8,a8 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 (lent by default; a8 = none lent) rc=$?" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror" $OUT/moe-bf16.txt >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_cuda_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG" $OUT/test.txt | head -10 >> $OUT/all.txt
rm -rf $D
