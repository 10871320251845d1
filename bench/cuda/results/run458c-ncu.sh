# Session 45's device call, part c (after a and b, if device time is left): ncu's view of what run 458 a timed.
# (1) q4_ks at M = 16 in configurations 1 and 4 (registers) against 7, 8 and 9 (the ring in shared memory): time,
# DRAM throughput, achieved occupancy and the warps' stall reasons of each call kind (tf_bench_quant
# --profile-m 16 runs each kind once with q4_ks off, then on). If the ring streams more bytes at once the DRAM
# share rises and the long-scoreboard stalls fall; if the consumer binds, neither moves. (2) The decode loop
# kernel at 16 rows and 512 positions with one team and two (time, DRAM throughput, warps active).
# Pack: as run458-ring.sh. run(command="bash bench/cuda/results/run458c-ncu.sh; cut -c1-300 $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
[ -z "$NCU" ] && { echo "no ncu" >> $OUT/all.txt; exit 0; }
M='gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active'
for cfg in 1 4 7 8 9; do
  TF_Q4_KS_CFG=$cfg timeout 80 $NCU --clock-control none --print-kernel-base function -k regex:q4_ks --metrics $M \
    --csv $D/bin/tf_bench_quant --profile-m 16 > $OUT/ncu-ks$cfg.csv 2>&1; echo "ncu q4_ks cfg $cfg rc=$?" >> $OUT/all.txt
  grep '^"' $OUT/ncu-ks$cfg.csv | awk -F'","' 'NF>=15 && $5 ~ /q4_ks/ {print $(NF-2)" = "$NF}' | cut -c1-160 | head -40 >> $OUT/all.txt
done
for dl in 2 4; do
  TF_ATTN_DECODE_LOOP=$dl timeout 60 $NCU --clock-control none --print-kernel-base function -k regex:attention_decode_loop --launch-skip 40 --launch-count 1 \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread \
    --csv $D/bin/tf_attention_once decode 512 16 > $OUT/ncu-dl$dl.csv 2>&1; echo "ncu decode loop $dl rc=$?" >> $OUT/all.txt
  grep '^"' $OUT/ncu-dl$dl.csv | awk -F'","' 'NF>=15 && $5 ~ /attention/ {print $(NF-2)" = "$NF}' | cut -c1-160 | head -12 >> $OUT/all.txt
done
rm -rf $D
