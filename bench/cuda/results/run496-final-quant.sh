# Session 50, run 496 (prepared, not run: the device budget ran out): the final tree's pieces rule (groups >= 64 with bf16 scales only): test_quant_cuda,
# test_cuda_model, test_cuda_graphs.
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run496-final-quant.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_quant_cuda test_cuda_model test_cuda_graphs; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
rm -rf $D
