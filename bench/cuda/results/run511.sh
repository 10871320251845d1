# Session 55, run 511: bf16 experts on the wgmma pipeline at prefill (moe_wgmma_bf16_kernel, off by default:
# TF_MOE_WGMMA_BF16) -- its bit test, then tf_bench_moe bf16 (decode rows, prefill 4096 off / on same call).
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p511.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 100 $D/bin/test_moe_cuda --gtest_brief=1 --gtest_filter='*GroupedWgmma*' > $OUT/wg-test.txt 2>&1
echo "wg-test rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/wg-test.txt | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differs|did not run|rror" $OUT/wg-test.txt | head -8 >> $OUT/all.txt
timeout 420 $D/bin/tf_bench_moe --format bf16 > $OUT/bench-bf16.txt 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))" >> $OUT/all.txt
grep -E "^\||copy|fused vs|rror" $OUT/bench-bf16.txt | head -40 >> $OUT/all.txt
timeout 150 $D/bin/test_moe_cuda --gtest_brief=1 > $OUT/test.txt 2>&1
echo "test_moe_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ') t=$(( $(date +%s) - T0 ))" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test.txt | head -8 >> $OUT/all.txt
rm -rf $D
