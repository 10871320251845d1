# Session 49, run 476: run 475 found the gate_up storing its silu_mul a tie in the 8B b=16 forward (18 pairs,
# mean -0.03%) where the "without silu_mul" ablation says the silu_mul launch costs ~1.7%: is the SILU
# instance itself slower than the plain gate_up? tf_bench_quant --linears-m 16 now times 36 gate_ups alone /
# + silu_mul / storing silu_mul (twice). Also the fixed test case (K 4160 had groups of 128) and the forward's
# A/B line with the fused kernel's launch count.
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run476-silu-alone.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|differs|exception" $OUT/test_quant_cuda.txt | head -8 >> $OUT/all.txt
timeout 200 $D/bin/tf_bench_quant --linears-m 16 > $OUT/lin.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
grep -E "gate_up alone|q4_pair off" $OUT/lin.txt | cut -c1-400 >> $OUT/all.txt
for i in 1 2; do
  timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$i.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
  grep -oE "decode b=16 ctx=512, gate_up \+ silu_mul in one kernel.*" $OUT/8b-$i.txt >> $OUT/all.txt
done
grep -E "^\| Qwen3-8B \| decode" $OUT/8b-1.txt >> $OUT/all.txt
grep -oE "mlx 4-bit g64 decode b=16 ctx=512 without:.*" $OUT/8b-1.txt | cut -c1-400 >> $OUT/all.txt
rm -rf $D
