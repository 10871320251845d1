# Session 48, run 474 (prepared for session 49's first call; packed at the commit that adds it): on an H200,
# (1) the 4-bit one-kernel step's stage shape, TF_STEP_Q4_SW = 4 / 2 / 8 interleaved, twice (run 473: SW 2
# -1.7% on the H100; the H200 last measured before the consumer teams) -- if SW 2 wins here too, make it the
# default (decode_step.cu); (2) the 8B MLX 4-bit and bf16 forwards' "without" lines, now with the silu_mul
# ablation (what the separate silu_mul launch costs at b=8/16: the ceiling of any silu fusion, e.g. the
# gate_up storing silu_mul from gate/up rows paired inside its 64-row tiles); (3) test_cuda_decode_step.
#   BINS="tests/ops/gpu/test_cuda_decode_step bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run474-h200-sw-silu.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for sw in 4 2 8 4 2 8; do
  TF_STEP_Q4_SW=$sw timeout 60 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/sw-$sw.txt 2>&1
  echo "TF_STEP_Q4_SW=$sw rc=$? $(grep -E '^decode step b=1' $OUT/sw-$sw.txt | tail -1)" >> $OUT/all.txt
done
grep -oE "(bf16|mlx 4-bit g64) decode b=(8|16) ctx=512 without:.*" $OUT/sw-4.txt | cut -c1-400 >> $OUT/all.txt
for sw in 4 2; do
  TF_STEP_Q4_SW=$sw timeout 200 $D/bin/test_cuda_decode_step --gtest_brief=1 > $OUT/step-test-$sw.txt 2>&1
  echo "test_cuda_decode_step SW $sw rc=$? $(grep -E '^\[  (PASSED|FAILED)' $OUT/step-test-$sw.txt | tr '\n' ' ')" >> $OUT/all.txt
done
rm -rf $D
