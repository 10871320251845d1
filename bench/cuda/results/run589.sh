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
# Session 72 addition: the same call then takes the 8B table (bf16 and MLX 4-bit, b=1 and b=16) from the product
# binary, and on an H200 its L2 prefetch / in-flight caps (off there by default; unmeasured since run 497).
if [ -z "${SKIP_TABLE:-}" ]; then
  TF_BENCH_STEP_ONLY=1 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
  echo "table rc=$?"; grep -E "one kernel|Qwen3-8B \||target" $OUT/8b.txt
  if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    TF_BENCH_STEP_ONLY=2 TF_STEP_L2PF=0,2,4 TF_STEP_INFLIGHT=0,2,3 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/h200.txt 2>&1
    echo "h200 rc=$?"; grep -E "one kernel|L2|in flight" $OUT/h200.txt
  fi
fi
rm -rf $D
