# Session 56, run 528: the routed chain's gate_up and down grids at one block an SM instead of two
# (TF_MOE_ROUTED_HALF=1: half the bytes in flight; run 521's lesson: queued bytes lengthen every dependent
# access). 30B-A3B bf16 --quick, alternating processes 0 / 1 / 0 / 1. Predicted: a tie or -1..2%.
#   BINS="bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p528.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for h in 0 1 0 1; do
  TF_MOE_ROUTED_HALF=$h timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-h$h.txt 2>&1
  echo "half $h rc=$? $(el) $(grep -E '^\| decode b=1 ctx 512 \|' $OUT/moe-bf16-h$h.txt)" >> $OUT/all.txt
  grep -E '^b=1 abl' $OUT/moe-bf16-h$h.txt | cut -c1-400 >> $OUT/all.txt
done
rm -rf $D
