# Session 65, run 568 (scripted for a later session; not run -- the device time ran out): ncu of the MoE
# step's MLX 4-bit instance as session 65 left it (2.32 ms against its chain's 2.09; producer four stages a
# warp instruction, the down by halves, the routing warmed) and of the bf16 instance, warp-stall samples by
# SASS line as run 556 did for the dense step: where the 4-bit layer's ~48 us go now (the router's ~5.5 us
# after o on one team, the picks, the gate_up tiles' ~1.9 us of arithmetic each).
#   BINS="bench/cuda/tf_bench_moe"; rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack
#     mv .devpack/step.tar.xz .devpack/p568.tar.xz   (packed from session 65's final tree)
# Run: ln -sfn p568.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run568.sh; cat $OUT/all.txt
# Here afterwards: $OUT/*-sass.csv.xz mapped by tools/ncu_step_lines.py with nvdisasm's line table of the
# packed tf_bench_moe's decode_step_moe.sm_90a.cubin; the kernels: tf::cuda::step_moe::decode_step_kernel<1,
# false> (4-bit), <0, false> (bf16).
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16; do
  TF_MOE_BENCH_WARM_S=0 timeout 240 ncu --clock-control none --kernel-name regex:decode_step_kernel \
    --launch-skip 3 --launch-count 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    --section MemoryWorkloadAnalysis -o $D/$f -f $D/bin/tf_bench_moe --format $f --quick > $OUT/ncu-$f.txt 2>&1
  echo "$f ncu rc=$?" >> $OUT/all.txt; grep -E "==PROF==|==ERROR==" $OUT/ncu-$f.txt | head -4 >> $OUT/all.txt
  ncu -i $D/$f.ncu-rep --page details > $OUT/$f-details.txt 2>&1
  ncu -i $D/$f.ncu-rep --page source --print-source sass --csv 2> $OUT/$f-err.txt | xz -9 > $OUT/$f-sass.csv.xz
  grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued" $OUT/$f-details.txt | head -4 >> $OUT/all.txt
done
rm -rf $D
