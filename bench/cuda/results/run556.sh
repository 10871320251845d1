# Session 64, run 556 (scripted for a later session; not run): ncu of the dense Qwen3-8B MLX 4-bit one-kernel
# step (issue 11: b=1 at 77.2% of its roofline, 2.77x bf16 in run 539; 3x needs ~84%), as run 551 did for the
# MoE step -- warp-stall samples by source line, to see whether its producer, its x polls or its team
# barriers set the pace -- plus the probe's layer timeline (TF_STEP_STAMPS) of the same build.
#   BINS="bench/cuda/tf_bench_cuda"; rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack
#     mv .devpack/step.tar.xz .devpack/p556.tar.xz
# Run: ln -sfn p556.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run556.sh; cat $OUT/all.txt
# Here afterwards: the reports' SASS pages come back as $OUT/*-sass.csv.xz; map them with nvdisasm's line table
# of the packed binary's decode_step cubin (tools/ncu_step_lines.py's docstring; cuobjdump and nvdisasm from
# the nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm wheels, session 64 had them in /tmp/nvw/x/nvidia/cu13/bin).
# The kernel: tf::cuda::step::decode_step_kernel<2, false> (kWMlx4Sw4, the product's 4-bit instance).
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_BENCH_STEP_ONLY=1 TF_STEP_STAMPS=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-mlx4.txt 2>&1
echo "8b mlx4 rc=$?" >> $OUT/all.txt; grep -E "one-kernel|step logits|stamps|layer|rror|HANG" $OUT/8b-mlx4.txt | head -30 >> $OUT/all.txt
TF_BENCH_STEP_ONLY=2 timeout 300 ncu --clock-control none --kernel-name regex:decode_step_kernel --launch-skip 3 \
  --launch-count 1 --section WarpStateStats --section SourceCounters --section SpeedOfLight \
  --section MemoryWorkloadAnalysis -o $D/d4 -f $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick \
  > $OUT/ncu.txt 2>&1
echo "ncu rc=$?" >> $OUT/all.txt; grep -E "==PROF==|==ERROR==" $OUT/ncu.txt | head -4 >> $OUT/all.txt
ncu -i $D/d4.ncu-rep --page details > $OUT/d4-details.txt 2>&1
ncu -i $D/d4.ncu-rep --page source --print-source sass --csv 2> $OUT/d4-err.txt | xz -9 > $OUT/d4-sass.csv.xz
grep -E "Duration|DRAM Throughput|Warp Cycles Per Issued" $OUT/d4-details.txt | head -4 >> $OUT/all.txt
rm -rf $D
