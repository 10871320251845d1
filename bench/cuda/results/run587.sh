# (Session 70's tree, 1be1b1f: TF_STEP_DX_AB and set_dx were retired in 140c613.)
# Session 70, run 587: the dense 4-bit down's x in parts (TF_STEP_DPERM at make, set_dx; bench
# TF_STEP_DX_AB) -- its bits (test_cuda_decode_step's 4-bit case) and its time against the default step in
# the same process (plans pair * 10 + late parts: 0-3, 10, 11); run 586's pack (the tree before, run 578's
# kernels) timed first on the same card.
# Both packs with the tree pass 64 MiB: PACKS=587 carries only the new one (plan -1 is the default step,
# whose SASS is run 578's). Packs: .devpack/p586.tar.xz (before), .devpack/p587.tar.xz (BINS="bench/cuda/tf_bench_cuda
# tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_moe_step").
nvidia-smi --query-gpu=name --format=csv,noheader
for p in ${PACKS:-586 587}; do
  D=$(mktemp -d); xz -dc .devpack/p$p.tar.xz | tar -xf - -C $D
  if [ $p = 586 ]; then
    LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-} TF_BENCH_STEP_ONLY=2 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/old.txt 2>&1
    echo "old rc=$?"; grep -E "one kernel" $OUT/old.txt
  else
    LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-} timeout 240 $D/bin/test_cuda_decode_step --gtest_brief=1 --gtest_filter='*Mlx4Linears*' > $OUT/t4.txt 2>&1
    echo "t4 rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/t4.txt | tr '\n' ' ')"
    grep -E "Failure|differ|HANG|parts" $OUT/t4.txt | head -8
    LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-} TF_BENCH_STEP_ONLY=2 TF_STEP_DX_AB=0,1,2,3,10,11 timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/new.txt 2>&1
    echo "new rc=$?"; grep -E "one kernel|in parts" $OUT/new.txt
  fi
  rm -rf $D
done
