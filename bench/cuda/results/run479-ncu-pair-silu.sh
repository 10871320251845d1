# Session 49, run 479: why q4_pair's SILU instance (the gate_up storing silu_mul; removed, patch
# run475-lost-pair-silu.patch applied for this run only) is +8.5% over the plain gate_up at M = 16 (runs
# 476-477: not the rows' distance). ncu on tf_bench_quant --profile-m 16, every q4_pair launch (the last two:
# the gate_up plain, then SILU), stall reasons and issue statistics side by side.
#   BINS="bench/cuda/tf_bench_quant" tools/device_step.sh --pack   (built with the patch applied)
#   run(command="bash bench/cuda/results/run479-ncu-pair-silu.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 300 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section InstructionStats --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
  -k regex:q4_pair --launch-count 8 $D/bin/tf_bench_quant --profile-m 16 > $OUT/ncu.txt 2>&1
echo "ncu rc=$?" >> $OUT/all.txt
grep -E "q4_pair_kernel|Duration|Stall|Warp Cycles Per Issued|Issued Ipc|Executed Instructions  |Registers Per|Achieved Occupancy|DRAM Throughput|Memory Throughput|Block Limit|One or More Eligible|No Eligible|Active Warps Per" $OUT/ncu.txt | sed 's/  */ /g' | cut -c1-160 | tail -60 >> $OUT/all.txt
rm -rf $D
