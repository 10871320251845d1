# Session 50, run 487: where the 16-row decode attention's time goes (the two-team decode loop, 8 KV heads,
# 512 positions: ~15 us a layer on both the H100 and the H200 although the H200 has 1.4x the bandwidth; issue
# 11's b=16 on the H200). Alone (tf_attention_once: 36 layers' KV in turn), then ncu of a few launches: DRAM
# throughput, stall reasons -- long scoreboard / mbarrier waits (the K/V loads: a third stage would help) or
# barriers and MMA/ALU dependencies (the chunk arithmetic: it would not).
#   BINS="bench/cuda/tf_attention_once" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run487-ncu-decode-loop.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for mode in 3 0; do
  TF_ATTN_DECODE_LOOP=$mode timeout 60 $D/bin/tf_attention_once decode 512 16 > $OUT/once-$mode.txt 2>&1
  echo "mode $mode rc=$? $(grep -E 'us a layer' $OUT/once-$mode.txt)" >> $OUT/all.txt
done
timeout 60 $D/bin/tf_attention_once decode 2048 16 | grep -E 'us a layer' >> $OUT/all.txt
timeout 300 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
  --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio \
  -k regex:attention_decode_loop --launch-skip 36 --launch-count 3 $D/bin/tf_attention_once decode 512 16 > $OUT/ncu.txt 2>&1
echo "ncu rc=$?" >> $OUT/all.txt
grep -E "attention_decode_loop|Duration|Stall|stalled|Warp Cycles Per Issued|Issued Ipc|Registers Per|Achieved Occupancy|DRAM Throughput|Memory Throughput|L2 Hit|One or More Eligible|No Eligible|Active Warps Per|Dynamic Shared" $OUT/ncu.txt | sed 's/  */ /g' | cut -c1-160 | tail -45 >> $OUT/all.txt
rm -rf $D
