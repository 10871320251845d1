# Session 48, run 472 (diagnostic, same pack as run 471; the product instance unchanged): where the MLX 4-bit
# one-kernel step's time goes on this card -- the probe instance's ablations (none / no tile arithmetic / no
# dequantisation / no consumer fence; the probe spills and runs ~25% slower than the product, so read them
# against its own "none") and one step's stamps (layer 10: the attention's events and the consumers' waits).
# Question: is issue 11's b=1 75% reachable on the H100 by faster tile arithmetic (skeleton >= 75% of the
# floor), or only by fewer / cheaper hops (as on the H200: skeleton 70.3%, session 30)?
#   run(command="bash bench/cuda/results/run472-step-h100.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_STEP_ABLATE=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/ablate.txt 2>&1
echo "ablate rc=$?" >> $OUT/all.txt
grep -E "^decode step|step ablations|one-kernel step\) \| mlx" $OUT/ablate.txt | cut -c1-400 >> $OUT/all.txt
TF_STEP_STAMPS=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/stamps.txt 2>&1
echo "stamps rc=$?" >> $OUT/all.txt
grep -iE "stamp|layer 10|median|wait" $OUT/stamps.txt | head -40 | cut -c1-300 >> $OUT/all.txt
rm -rf $D
