# Session 56, run 522: moe_decode_bf16 with its issue paced (bit 0: gate_up items one ahead by landing) and the
# down's code warmed during the barrier (bit 1), TF_MOE_BF16_MODE 3 / 1 / 2 / 0 (processes in turn), then
# the stamps of mode 3 and the new test. Run 521 (H100): mode 0 3.756 ms vs the chain's 3.437.
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p522.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
export TF_MOE_DECODE_BF16=1
for m in 3 1 2 0 3; do
  TF_MOE_BF16_MODE=$m timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-m$m.txt 2>&1
  echo "mode $m rc=$? $(el) $(grep -E '^\| decode b=1 ctx 512 \||routed chain' $OUT/moe-bf16-m$m.txt | tr '\n' ' ')" >> $OUT/all.txt
done
TF_MOE_DECODE_STAMPS=1 timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-stamps.txt 2>&1
echo "stamps rc=$? $(el)" >> $OUT/all.txt
grep -E "one-kernel MoE" $OUT/moe-bf16-stamps.txt | head -3 >> $OUT/all.txt
timeout 90 $D/bin/test_moe_cuda --gtest_filter='*Bf16EqualsTheRoutedChain*' > $OUT/test_new.txt 2>&1
echo "new test rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_new.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|row" $OUT/test_new.txt | head -8 >> $OUT/all.txt
rm -rf $D
