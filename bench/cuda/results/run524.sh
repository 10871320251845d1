# Session 56, run 524: the chain's bf16 gate_up on moe_decode_bf16.cu's ring kernel alone (moe_gate_up_bf16,
# TF_MOE_GATE_UP_RING=1; the one-kernel MoE off): run 522's stamps had its gate_up phase streaming ~450 KB an
# SM in 17.4 us (~3.3 TB/s) where moe_routed_gemm's gate_up streams ~2.35 TB/s (run 519's ablation, 23.7 us a
# layer). Predicted: 30B-A3B bf16 b=1 3.42 -> ~3.2 ms. The test first (bits), then the bench twice.
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p524.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 90 $D/bin/test_moe_cuda --gtest_filter='*Bf16EqualsTheRoutedChain*' > $OUT/test_new.txt 2>&1
echo "new test rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_new.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|row" $OUT/test_new.txt | head -8 >> $OUT/all.txt
export TF_MOE_DECODE_BF16=0 TF_MOE_GATE_UP_RING=1
for m in 3 2; do
  TF_MOE_BF16_MODE=$m timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-m$m.txt 2>&1
  echo "mode $m rc=$? $(el)" >> $OUT/all.txt
  grep -E '^\| decode b=1 ctx 512 \||not the ring|not one kernel|^b=1 abl' $OUT/moe-bf16-m$m.txt >> $OUT/all.txt
done
rm -rf $D
