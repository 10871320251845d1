# Session 57, run 536: the step's GPU tests with the producer's stages in flight forced to 0 (every free slot)
# and 1 (TF_STEP_INFLIGHT_STAGES, new), bf16 and MLX 4-bit, against the chain bit for bit.
#   BINS="tests/ops/gpu/test_cuda_decode_step"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p536.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_decode_step > $OUT/test_step.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "^\[       OK|FAILED  \]|Failure" $OUT/test_step.txt | head -20 >> $OUT/all.txt
rm -rf $D
