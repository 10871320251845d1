# Session 48, run 471: the down's silu_mul inside q4_ks_kernel's x staging (TF_Q4_KS_SILU, off until this
# run): test_quant_cuda (its new Quant4BitKSliceSiluEqualsSiluMulThenLinear: bits of silu_mul then the
# linear, the fused call proven by an untouched activation buffer), then the 8B MLX 4-bit forward at b=16 with
# it off / on, interleaved, two processes each.
# Prediction: one launch (silu_mul, ~16 x 12288) and the activation's write + read fewer a layer: -1.5..-2.5%
# at b=16 (36 x ~1.5-2 us of 2.93 ms on the H200), nothing at b=1 (the one-kernel step) or b=8 (q4_ks does
# not take 1-8 rows in mode 3).
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run471-ks-silu.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 120 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/quant-test.txt 2>&1; echo "test_quant_cuda rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|rror" $OUT/quant-test.txt | head -12 >> $OUT/all.txt
for i in 1 2; do
  for v in 0 1; do
    TF_Q4_KS_SILU=$v timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$v-$i.txt 2>&1
    echo "TF_Q4_KS_SILU=$v ($i) rc=$?" >> $OUT/all.txt
    grep -E "^\| Qwen3-8B \| decode b=(1|8|16) .*mlx" $OUT/8b-$v-$i.txt >> $OUT/all.txt
  done
done
rm -rf $D
