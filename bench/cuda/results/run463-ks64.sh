# Session 46's prepared call (no device time left when it was built): q4_ks's ring held to 64 registers for
# twice the warps an SM (TF_Q4_KS_CFG=10: NW 4 RING 2, 11: NW 2 RING 4; run 461's ncu: latency-bound at the
# registers' residency of 16 warps an SM). (1) The ring test, now over configurations 7-11 (the bench lines
# are skipped if it fails). (2) The 16-, 9- and 1-row linears alone (tf_bench_quant --linears-m: the ring line
# has 7 8 9 10 11). (3) The 8B b=16 forward's same-call line "q4_ks on the down only in configurations 0 1 2 3 4
# 7 8 9 10 11" (and the table on the session's defaults: the two-team decode loop). (4) ncu of configurations
# 1 and 10 at M = 16 (warps active, issue active, stalls) if time is left.
# Prediction: if residency binds, configuration 10 (32 warps an SM, the same 72 KB in flight as configuration
# 1) takes the down alone below configuration 1's 0.590 ms (H100) / 0.521 (H200), toward 0.45-0.50; if the
# spills or the shallower ring a warpgroup (2 quads) cost more, it loses like 7 and 9 did.
# Build and pack (one pack for runs 463 and 464; session 46 packed it at HEAD):
#   export PATH=/usr/local/cuda/bin:$PATH; ninja -C build-cuda test_quant_cuda tf_bench_quant tf_bench_cuda \
#     tf_attention_once tensorfold
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda \
#     bench/cuda/tf_attention_once tensorfold" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run463-ks64.sh; cut -c1-900 $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/all.txt
timeout 90 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/quant-test.txt 2>&1
rc=$?; echo "test_quant_cuda rc=$rc" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differs|did not|configuration" $OUT/quant-test.txt | head -16 >> $OUT/all.txt
[ $rc -ne 0 ] && export TF_BENCH_KS_RING=0
timeout 120 $D/bin/tf_bench_quant --linears-m 16,9,1 > $OUT/linears.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
grep -E "^\||q4_ks" $OUT/linears.txt | cut -c1-600 >> $OUT/all.txt
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode" $OUT/8b.txt >> $OUT/all.txt
grep -oE "q4_ks on (the down only|every linear)[^:]*:( [0-9.]+ ms)*" $OUT/8b.txt >> $OUT/all.txt
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
MET='gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers'
for cfg in 1 10; do
  [ -z "$NCU" ] && break
  TF_Q4_KS_CFG=$cfg timeout 60 $NCU --clock-control none --print-kernel-base function -k regex:q4_ks --metrics $MET \
    --csv $D/bin/tf_bench_quant --profile-m 16 > $OUT/ncu-ks$cfg.csv 2>&1; echo "ncu q4_ks cfg $cfg rc=$?" >> $OUT/all.txt
  grep '^"' $OUT/ncu-ks$cfg.csv | awk -F'","' 'NF>=15 && $5 ~ /q4_ks/ {print $(NF-2)" = "$NF}' | cut -c1-160 | head -40 >> $OUT/all.txt
done
rm -rf $D
