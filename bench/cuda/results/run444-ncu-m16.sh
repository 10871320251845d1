set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
cd $D
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $OUT/all.txt
timeout 60 bin/tf_mma_probe >> $OUT/all.txt 2>&1
for M in 1 16; do
 timeout 200 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section SchedulerStats --section InstructionStats --section MemoryWorkloadAnalysis -k regex:q4_ --launch-count 6 bin/tf_bench_quant --linears-m $M > $OUT/ncu-m$M.txt 2>&1
 echo "ncu M=$M rc=$?" >> $OUT/all.txt
done
