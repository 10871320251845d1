# Session 67, run 576 (inline, on run 575's pack; asked of an H200, the warm H100 ran it): the L2 prefetch's
# tile count once more (0, 2, 4, 6, 8), Qwen3-8B MLX 4-bit and bf16 b=1 ctx 512.
D=$(mktemp -d); xz -dc .devpack/p575.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
TF_BENCH_STEP_ONLY=1 TF_STEP_L2PF=0,2,4,6,8 timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
