# Ran in session 52 (H100, logs run498/): four quads ahead (cfg 2) won and landed (kWgcAhead); see docs/cuda-notes.md "Session 52".
# Session 51, run 498: q4_wg's cluster instances at 17-64 rows only (run 497: 16-row clusters and two slices a
# warpgroup lost, removed), their weight quads ahead (TF_Q4_WGC_CFG 0 / 1 / 2: 2 / 3 / 4; 3: 2 with two chunks a wgmma group), the 33-64-row pieces
# rule (mode 1: wide weights; 2: every width), ablations of configuration 0 at 32 rows (TF_Q4_WG_ABLATE 1 no x
# staging, 2 no dequantisation, 3 no MMAs: wrong outputs), the b=32 / b=64 forward off / on, and the tests.
# Predicted: more quads ahead -3..-8% on the gate_up at 32 rows if the weight stream is short of bytes in flight
# (~36 KB an SM at two quads); the ablations say which of x / dequantisation / MMAs binds.
# Prepared in session 51 and not run (no device was lent after run 497). The variants are not in the tree:
#   git apply bench/cuda/results/run498-wgc-variants.patch   (TF_Q4_WGC_CFG 0-3, the cluster ablations, the test
#   over every configuration, the bench table's columns), build, pack, run, then `git apply -R` it.
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs
#     bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run498-wgc-ah.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda.txt 2>&1
echo "test_quant_cuda rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure|Expected|Which is|differs|rows|configuration|N [0-9]" $OUT/test_quant_cuda.txt | head -16 >> $OUT/all.txt
TF_BENCH_QUANT_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_quant --linears-m 32,64,24 > $OUT/quant.txt 2>&1
echo "quant rc=$?" >> $OUT/all.txt
grep -E "^\| (32|64|24) |clusters" $OUT/quant.txt | cut -c1-420 >> $OUT/all.txt
for a in 1 2 3; do
  TF_Q4_WG_ABLATE=$a TF_BENCH_QUANT_ONLY_WGC=1 timeout 100 $D/bin/tf_bench_quant --linears-m 32 > $OUT/quant-abl$a.txt 2>&1
  echo "ablation $a rc=$?: $(grep -E 'clusters' $OUT/quant-abl$a.txt | cut -c1-300)" >> $OUT/all.txt
done
TF_BENCH_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode|clusters" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
for t in test_cuda_model test_cuda_graphs; do
  timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
rm -rf $D
