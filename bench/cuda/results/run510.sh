# Session 54, run 510: the second review mend (824b31d: q4_wg without stage_x_own, the MoE wgmma tile check reordered) -- the tests
# that take that path.
#   BINS="tests/models/test_quant_cuda tests/models/test_moe_cuda tests/ops/gpu/test_cuda_backend"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p510.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_quant_cuda test_moe_cuda test_cuda_backend; do
  timeout 120 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|differs|did not run" $OUT/$t.txt | head -8 >> $OUT/all.txt
done
rm -rf $D
