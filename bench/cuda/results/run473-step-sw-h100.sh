# Session 48, run 473 (same pack as 471-472): the MLX 4-bit one-kernel step's stage shape on the card that
# comes (TF_STEP_Q4_SW = 2 / 4 / 8 slices a stage: 12 x 10 KB, 6 x 20 KB, 3 x 40 KB ring slots), interleaved,
# twice. "4 measured best" was the H200's (sessions 21, 30); never checked on an H100.
#   run(command="bash bench/cuda/results/run473-step-sw-h100.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for sw in 4 2 8 4 2 8; do
  TF_STEP_Q4_SW=$sw timeout 60 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/sw.txt 2>&1
  echo "TF_STEP_Q4_SW=$sw rc=$? $(grep -E '^decode step b=1' $OUT/sw.txt | tail -1)" >> $OUT/all.txt
done
rm -rf $D
