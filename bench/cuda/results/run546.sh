# Session 61, run 546 (NOT RUN: the session's device time ran out; for the next session): the combine's
# routing moved (variant 4: warp 0 routes the layer at the gate_up's x, not at the down's, where it holds
# every consumer warp at make_x's barrier), with the tensor-map stages and the MoE step on by default.
# test_cuda_moe_step (8 cases: bits against the chain, variants 4 and 5 among them); tf_bench_moe bf16's step row,
# a4 (the variant, same bits) and a5 (every expert's tensor maps prefetched during the producer's routing
# wait, not only the 8 picks' after it; same bits) in the same process, a1 / a3 ablations; twice. If a4 (or
# a5) wins: make it the default
# (decode_step_kernel.cuh: `prm.ablate == 4` -> `!= 4` with the old place as the variant).
# Prediction (H100): -0.02..-0.05 ms (route_vals ~0.5-1 us a layer off the critical path, 48 layers):
# 2.98-3.00 -> ~2.94-2.97 ms with a4; a5: unknown (the descriptor fetch may be ~0.5-1 us of each layer's
# routing wait, or 256 prefetches may thrash the descriptor cache): +-0.05.
#   BINS="tests/ops/gpu/test_cuda_moe_step bench/cuda/tf_bench_moe"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p546.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 150 $D/bin/test_cuda_moe_step --gtest_brief=1 > $OUT/test_moe_step.txt 2>&1
echo "test_moe_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_moe_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differ|HANG|aligned|tensor map" $OUT/test_moe_step.txt | head -20 >> $OUT/all.txt
for i in 1 2; do
  TF_MOE_BENCH_STEP_AB=a4,a5,a1,a3 TF_MOE_BENCH_WARM_S=2 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-$i.txt 2>&1
  echo "moe bf16 ($i) rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|HANG|rror|aligned|tensor map" $OUT/moe-bf16-$i.txt >> $OUT/all.txt
done
rm -rf $D
