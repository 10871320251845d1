# Session 56, run 531: the review mend -- moe_wgmma.cu's bf16 persistent kernel calls produce_raw per item
# (produce_raw gained consume's running chunk base g0) instead of a copy of its TMA roles; sees_chunk;
# attention_wgmma's one-time configuration. The wgmma MoE and attention bit tests, then the bf16 prefill 4096
# (run 519: 113.0 ms).
#   BINS="tests/models/test_moe_cuda tests/ops/gpu/test_cuda_backend bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p531.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/test_moe_cuda --gtest_filter='*Wgmma*' > $OUT/test_moe.txt 2>&1
echo "test_moe_cuda wgmma rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_moe.txt | head -6 >> $OUT/all.txt
timeout 60 $D/bin/test_cuda_backend --gtest_brief=1 > $OUT/test_backend.txt 2>&1
echo "test_cuda_backend rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_backend.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_backend.txt | head -6 >> $OUT/all.txt
timeout 100 $D/bin/tf_bench_moe --format bf16 > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| (decode b=1 ctx 512 |prefill)" $OUT/moe-bf16.txt >> $OUT/all.txt
rm -rf $D
