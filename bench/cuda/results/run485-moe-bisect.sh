# Session 49, run 485: which of tf_bench_moe's same-bits rows leaves state that makes the later default step
# ~2% faster (runs 483-484)? TF_MOE_BENCH_BISECT=1 times the default again after each row. Two processes.
#   BINS="bench/cuda/tf_bench_moe" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run485-moe-bisect.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for i in 1 2; do
  TF_MOE_BENCH_BISECT=1 timeout 150 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe-$i.txt 2>&1; echo "tf_bench_moe rc=$?" >> $OUT/all.txt
  grep -E "decode b=1 ctx 512" $OUT/moe-$i.txt | cut -c1-120 >> $OUT/all.txt
done
rm -rf $D
