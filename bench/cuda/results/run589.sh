# Session 71, run 589: code size -- the product bench binary against one built with TF_STEP_ONLY_GS=1 (by_qsel's
# group-64 variants only), alternated, the 8B MLX 4-bit decode step (TF_BENCH_STEP_ONLY=2), three rounds each.
# Pack: .devpack/p589.tar.xz (BINS="bench/cuda/tf_bench_cuda bench/cuda/tf_bench_cuda_gs1"). The gs1 binary:
#   cmake -B build-cuda -DTF_STEP_ONLY_GS=1 && ninja -C build-cuda tf_bench_cuda &&
#   cp build-cuda/bench/cuda/tf_bench_cuda build-cuda/bench/cuda/tf_bench_cuda_gs1 &&
#   cmake -B build-cuda -DTF_STEP_ONLY_GS= && ninja -C build-cuda tf_bench_cuda
nvidia-smi --query-gpu=name --format=csv,noheader
D=$(mktemp -d); xz -dc .devpack/p589.tar.xz | tar -xf - -C $D
export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
for r in ${ROUNDS:-1 2 3}; do
  for b in tf_bench_cuda tf_bench_cuda_gs1; do
    TF_BENCH_STEP_ONLY=2 timeout 120 $D/bin/$b --shape qwen3-8b --format mlx4 --decode --quick > $OUT/$b.$r.txt 2>&1
    echo "$b round $r rc=$? $(grep -E 'one kernel' $OUT/$b.$r.txt | cut -c1-160)"
  done
done
