# Session 66, run 570 (pack p568b: session 65's final tree, tf_bench_moe + tf_tma_probe): the MLX 4-bit MoE
# step's skeleton -- a1 (no tile arithmetic), a3 (no routing wait: experts 0 .. top_k - 1), both timing only --
# beside the step's layer-10 stamps and the chain's one-kernel MoE stamps on the same H100: which phases of
# the step's MoE (o -> router -> routing -> gate_up -> down, ~31 us a layer) are slower than moe_decode's.
# Run: ln -sfn p568b.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run570.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_MOE_BENCH_STEP_AB=a1,a3 TF_STEP_STAMPS=1 TF_MOE_DECODE_STAMPS=1 TF_MOE_BENCH_WARM_S=2 timeout 150 \
  $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe-mlx4.txt 2>&1
echo "mlx4 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel step|step logits|rror|HANG" $OUT/moe-mlx4.txt >> $OUT/all.txt
rm -rf $D
