# Session 49, run 483: is tf_bench_moe's headline row (timed first in the process) biased? Runs 470 and 482
# had most same-bits ablation rows 1-2% under it. The b=1 MLX 4-bit rows now end with the first row's setting
# timed again. Two processes. Run 484: the same with the headline timed twice, the first discarded (not kept:
# the gap stayed).
#   BINS="bench/cuda/tf_bench_moe" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run483-moe-order.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for i in 1 2; do
  timeout 150 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe-$i.txt 2>&1; echo "tf_bench_moe rc=$?" >> $OUT/all.txt
  grep -E "decode b=1 ctx 512" $OUT/moe-$i.txt | cut -c1-160 >> $OUT/all.txt
done
rm -rf $D
