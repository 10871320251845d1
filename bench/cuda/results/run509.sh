# Session 54, run 509: the review mend (671f00e: the 4-bit prefill's host checks in one helper) -- the tests
# that take that path.
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_backend"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p509.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_quant_cuda test_cuda_model test_cuda_backend; do
  timeout 120 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|differs|did not run" $OUT/$t.txt | head -8 >> $OUT/all.txt
done
rm -rf $D
