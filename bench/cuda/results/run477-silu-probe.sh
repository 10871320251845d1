# Session 49, run 477: run 476 (H100) timed 36 gate_ups at M = 16: alone 0.903 ms, + silu_mul 1.010-1.013,
# storing silu_mul (q4_pair's SILU instance) 0.980-0.982: the SILU instance is +8.5% on the gate_up alone
# though its main loop is the plain one's instruction for instruction (SASS: 558 vs 562, same HMMA/LDG).
# Which part: TF_Q4_PAIR_SILU=2 runs the SILU epilogue on the plain kernel's adjacent row groups (wrong
# outputs, timing only). plain -> probe = the epilogue; probe -> SILU = gate and up rows 24 MB apart in a warp.
#   BINS="bench/cuda/tf_bench_quant" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run477-silu-probe.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for mode in 1 2 1 2; do
  TF_Q4_PAIR_SILU=$mode timeout 200 $D/bin/tf_bench_quant --linears-m 16 > $OUT/lin-$mode.txt 2>&1
  echo "TF_Q4_PAIR_SILU=$mode rc=$? $(grep -E 'gate_up alone' $OUT/lin-$mode.txt | cut -c1-300)" >> $OUT/all.txt
done
rm -rf $D
