# Session 50, run 486: (1) how much the 4-bit step's ring depth is worth: the probe instance with all, 2/3 and
# 1/3 of its slots (DecodeStep::set_ring), with and without tile arithmetic -- if fewer slots cost little, a
# deeper ring (lending the attention region to it outside the attention phase) is not worth building;
# (2) whether run 485's drift (the MoE step ~2-3% faster the longer the GPU has run, across processes too) is
# the clocks: nvidia-smi sampled every 250 ms through both benches.
#   BINS="bench/cuda/tf_bench_cuda bench/cuda/tf_bench_moe" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run486-ring-depth.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_event_reasons.active --format=csv,noheader -lms 250 > $OUT/smi.csv 2>&1 &
SMI=$!
echo "moe start $(date +%T.%N)" >> $OUT/all.txt
TF_MOE_BENCH_BISECT=1 timeout 150 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe.txt 2>&1; echo "tf_bench_moe rc=$? end $(date +%T.%N)" >> $OUT/all.txt
grep -E "decode b=1 ctx 512( \||, the default after|, the first row)" $OUT/moe.txt | cut -c1-90 >> $OUT/all.txt
for i in 1 2; do
  echo "8b start $(date +%T.%N)" >> $OUT/all.txt
  TF_STEP_ABLATE=1 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$i.txt 2>&1
  echo "8b rc=$? end $(date +%T.%N)" >> $OUT/all.txt
  grep -E "^decode step b=1|step ablations|^\| Qwen3-8B \| decode" $OUT/8b-$i.txt | cut -c1-700 >> $OUT/all.txt
done
kill $SMI
awk -F', ' 'NR % 8 == 1 {print $1, $2, $3, $4, $5, $7}' $OUT/smi.csv | head -80 >> $OUT/all.txt
rm -rf $D
