# Session 53, run 505 (prepared, not run: no device could be started after run 504): q4_wg's x by stage_x_own
# (each warp its warpgroup's chunks by 16-byte cp.async, all in flight at once, permuted in place; a named
# barrier a warpgroup) against stage_x_perm (two batches of loads through registers, then the CTA's barrier):
# TF_Q4_WG_XCP 1 / 0; the same for q4_ks's x slice (the down at 9-32 rows), TF_Q4_KS_XCP 1 / 0. Both default
# to 0 in the tree; the script sets them explicitly. Processes alternate.
# Predicted (run 498's ablations put x's staging at ~2.4-2.9 us of a narrow 32-row call; k on 32 CTAs, so
# latency, not L2 bandwidth): one load round trip fewer, ~1 us a call: at 32 rows q and k -10%, gate_up -3%;
# the 8B MLX 4-bit b=32 forward -2%, b=16 -0.5..-1% (gate_up, lm_head and the down only).
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs
#     bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda" TF_PACK_DICT=1GiB tools/device_step.sh --pack
#   mv .devpack/step.tar.xz .devpack/p505.tar.xz
#   run(command="ln -sfn p505.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run505-xcp.sh; cat $OUT/all.txt",
#       carry=[".devpack/p505.tar.xz"])
# If 1 wins: default 1 for both switches (or stage_x_perm removed and stage_x_own everywhere, the XCP template
# parameters gone: the other configurations take the same change).
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for X in 1 0; do
  TF_Q4_WG_XCP=$X TF_Q4_KS_XCP=$X timeout 200 $D/bin/test_quant_cuda --gtest_brief=1 > $OUT/test_quant_cuda-$X.txt 2>&1
  echo "test_quant_cuda XCP=$X rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_quant_cuda-$X.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|Expected|Which is|differs" $OUT/test_quant_cuda-$X.txt | head -8 >> $OUT/all.txt
done
for rep in 1 2; do
  for X in 00 11 10; do  # (wg, ks)
    TF_Q4_WG_XCP=${X:0:1} TF_Q4_KS_XCP=${X:1:1} TF_BENCH_QUANT_ONLY_WGC=1 timeout 120 $D/bin/tf_bench_quant --linears-m 32,16 > $OUT/q-$X-$rep.txt 2>&1
    echo "quant XCP wg/ks=$X rep $rep rc=$?" >> $OUT/all.txt
    grep -E "^\| (32|16) |clusters" $OUT/q-$X-$rep.txt | cut -c1-330 >> $OUT/all.txt
  done
done
for X in 0 1 0 1; do
  TF_Q4_WG_XCP=$X TF_Q4_KS_XCP=$X TF_BENCH_ONLY_WGC=1 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$X.txt 2>&1
  echo "8b XCP=$X rc=$? $(grep -E '^\| Qwen3-8B \| decode b=(1|16|32) ' $OUT/8b-$X.txt | cut -d'|' -f3,4,5,9 | tr '\n' ' ')" >> $OUT/all.txt
done
for t in test_cuda_model test_cuda_graphs; do
  TF_Q4_WG_XCP=1 TF_Q4_KS_XCP=1 timeout 150 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t (XCP 1) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ')" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
rm -rf $D
