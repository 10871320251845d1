# Session 64, run 554: the 4-bit MoE step's producer with a tile's stage sources read once a tile (Q4TileSrc;
# run 551's ncu: ~30% of the producer in ~130 instructions a stage, now ~60) and every free slot in flight
# for the MoE shape (the default now); i3 = the old cap. bf16: every free slot (default now) against i3 and a8.
# Pack p554: tf_bench_moe only. Run: ln -sfn p554.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run554.sh
# Prediction (H100): the 4-bit step 3.45 (run 550's i0) -> 3.0-3.2 ms, still slower than its chain (2.14).
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin
nvidia-smi --query-gpu=name --format=csv,noheader
TF_MOE_BENCH_STEP_AB=i3 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format mlx4 --quick 2>&1 | grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG"
TF_MOE_BENCH_STEP_AB=i3,a8 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format bf16 --quick 2>&1 | grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG"
rm -rf $D
