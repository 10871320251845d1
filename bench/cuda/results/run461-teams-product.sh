# Session 46, run 461: the product on the two-team decode loop's default rule (mode 3: blocks >= 3/4 of the SMs,
# any context). A random Qwen3-8B MLX 4-bit checkpoint, `tensorfold bench --parallel 16 / 32`, the decode loop
# off (TF_ATTN_DECODE_LOOP=0) against the default, alternating; texts checked identical to the drafted runs by
# the bench. First test_cuda_graphs and test_cuda_backend on the default.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_cuda_graphs test_cuda_backend; do  # (test_cuda_backend's tests keep the default mode now)
  timeout 60 $D/bin/$t --gtest_brief=1 > $OUT/t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure" $OUT/t.txt | head -6 >> $OUT/all.txt
done
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for par in 16 32; do
  for dl in 0 3 $([ $par = 16 ] && echo 0 3); do
    TF_ATTN_DECODE_LOOP=$dl timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel $par --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
    echo "e2e parallel $par decode loop $dl rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
  done
done
rm -rf $M
# Then, if the call's time allows, ncu's stall reasons of q4_ks at M = 16 in configurations 1 (registers, the
# down's default) and 8 (the same depth in shared memory): where the consumer waits (run 458 a: the ring lost).
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
MET='gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum'
for cfg in 1 8; do
  [ -z "$NCU" ] && break
  TF_Q4_KS_CFG=$cfg timeout 60 $NCU --clock-control none --print-kernel-base function -k regex:q4_ks --metrics $MET \
    --csv $D/bin/tf_bench_quant --profile-m 16 > $OUT/ncu-ks$cfg.csv 2>&1; echo "ncu q4_ks cfg $cfg rc=$?" >> $OUT/all.txt
  grep '^"' $OUT/ncu-ks$cfg.csv | awk -F'","' 'NF>=15 && $5 ~ /q4_ks/ {print $(NF-2)" = "$NF}' | cut -c1-160 | head -64 >> $OUT/all.txt
done
rm -rf $D
