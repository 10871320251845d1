# Session 55, run 518: where the prefill's new kernels spend their time (ncu, no code change): the bf16 and
# MLX 4-bit MoE expert GEMMs on wgmma at 30B-A3B prefill 4096 (a layer's gate_up and down), and the wgmma
# prefill attention at 4096 positions (tf_attention_once). SpeedOfLight, warp states, scheduler.
#   BINS="bench/cuda/tf_bench_moe bench/cuda/tf_attention_once"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p518.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
M=smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis"
pick() { grep -E "moe_wgmma|attention_wgmma|Duration|stalled|Warp Cycles Per Issued|Issued Ipc|Registers Per|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|One or More Eligible|No Eligible|Compute \(SM\) Throughput|gmma|pipe_uniform" $1 | sed 's/  */ /g' | cut -c1-150; }
timeout 200 ncu --clock-control none $S --metrics $M -k regex:attention_wgmma --launch-skip 2 --launch-count 1 $D/bin/tf_attention_once 4096 4 > $OUT/ncu-attn.txt 2>&1
echo "=== attention ncu rc=$? $(el)" >> $OUT/all.txt; pick $OUT/ncu-attn.txt | tail -40 >> $OUT/all.txt
for f in bf16 mlx4; do
  K=$([ $f = bf16 ] && echo moe_wgmma_bf16 || echo "moe_wgmma_kernel")
  timeout 220 ncu --clock-control none $S --metrics $M -k regex:$K --launch-skip 40 --launch-count 2 $D/bin/tf_bench_moe --format $f > $OUT/ncu-$f.txt 2>&1
  echo "=== $f ncu rc=$? $(el)" >> $OUT/all.txt; pick $OUT/ncu-$f.txt | tail -60 >> $OUT/all.txt
done
rm -rf $D
