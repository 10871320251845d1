# Session 67, run 574 (inline, on run 573's pack; recorded here): the L2 prefetch's tile count again and the
# stages-in-flight cap under it, with the probe's layer timeline (TF_STEP_STAMPS) at 4 tiles.
D=$(mktemp -d); xz -dc .devpack/p573.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
TF_STEP_L2PF_TILES=4 TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT=0,1,2,3,4,6 TF_STEP_L2PF=0,3,4,5 TF_STEP_STAMPS=1 \
  timeout 300 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
