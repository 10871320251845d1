# Session 56, run 530: run 529's shared-memory split hypothesis -- every kernel asked for the same carveout
# (TF_SMEM_CARVEOUT=100: cudaFuncAttributePreferredSharedMemoryCarveout, set once a kernel at its first
# launch) against the default, alternating processes. 30B-A3B MLX 4-bit b=1 (moe_decode's ~216 KB among the
# chain's kernels) and bf16 b=1. Predicted: 4-bit -2..5% if the split's switches cost its neighbours.
#   BINS="bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p530.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16 mlx4; do
  for c in none 100; do
    if [ $c = none ]; then unset TF_SMEM_CARVEOUT; else export TF_SMEM_CARVEOUT=$c; fi
    timeout 60 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f-$c.txt 2>&1
    echo "$f carveout $c rc=$? $(el) $(grep -E '^\| decode b=(1|8) ctx 512 \|' $OUT/moe-$f-$c.txt | tr '\n' ' ')" >> $OUT/all.txt
  done
done
unset TF_SMEM_CARVEOUT
rm -rf $D
