# Session 49, run 475 (run 474's questions plus the gate_up storing its silu_mul): on the card that comes
# (an H200 asked for),
# (1) the new tests: test_quant_cuda (Quant4BitGateUpWithSiluEqualsLinearThenSiluMul and the rest),
#     test_cuda_decode_step (Mlx4SixteenRowsGateUpWithSiluGiveTheTwoOpsBits and the rest: its 4-bit test
#     also runs stages of 2 and 8 slices), test_cuda_graphs;
# (2) the 4-bit one-kernel step's stage shape, TF_STEP_Q4_SW = 4 / 2 / 8 interleaved, twice (run 473: SW 2
#     -1.7% on the H100); each process also prints the b=16 forward's "gate_up + silu_mul in one kernel
#     off / on" line (three pairs a process) and the "without" lines (silu_mul: the fusion's ceiling).
# Prediction (session 49, before the run): the fused gate_up -1.5..-2.5% at b=16 (one launch boundary and the
# gate_up output's round trip fewer a layer; the SILU epilogue's work equals the plain one's).
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs
#     bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run475-silu-sw.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_quant_cuda test_cuda_decode_step test_cuda_graphs; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|HANG|differs|Expected" $OUT/$t.txt | head -8 >> $OUT/all.txt
done
i=0
for sw in 4 2 8 4 2 8; do
  i=$((i+1))
  TF_STEP_Q4_SW=$sw timeout 60 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/sw-$i.txt 2>&1
  echo "TF_STEP_Q4_SW=$sw rc=$? $(grep -E '^decode step b=1' $OUT/sw-$i.txt | tail -1)" >> $OUT/all.txt
  grep -oE "decode b=16 ctx=512, gate_up \+ silu_mul in one kernel.*" $OUT/sw-$i.txt >> $OUT/all.txt
done
grep -E "^\| Qwen3-8B \| decode" $OUT/sw-1.txt >> $OUT/all.txt
grep -oE "(bf16|mlx 4-bit g64) decode b=(8|16) ctx=512 without:.*" $OUT/sw-1.txt | cut -c1-400 >> $OUT/all.txt
rm -f $OUT/sw-[3-6].txt
rm -rf $D
