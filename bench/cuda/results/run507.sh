# Session 54, run 507: after run 506 (linear_wgmma_mlx4 won at 512 tokens, -12.7%, and lost at 4096, +25%:
# the bf16 linear's TmaXW 128-byte-row tiles at M >= 4096 against the 4-bit path's 128 x 128):
# (a) the 8B MLX 4-bit prefill at 1024 / 2048 / 4096 tokens with the 4-bit path at every M
# (TF_Q4_PREFILL_MAX_M=0) on its new 128 x 192 tile (the grid estimate's pick) and on 128 x 128, against the
# dequantized copy (TF_Q4_PREFILL=0): where the default limit (2048) should sit;
# (b) the 30B-A3B table with the grouped wgmma experts on and the default 4-bit prefill limit;
# (c) the 8B 4-bit decode forward with stage_x_own for q4_ks only (wg/ks XCP 0/1), against 00 and 11
# (run 506: 11 gave b=16 -0.9%, b=32 +0.8%; its linears table put the gain on q4_ks's down).
# Predicted (a): 192 at or below 128 from 2048 on; the 4-bit path ahead of the copy up to ~1300 tokens.
#   BINS="tests/models/test_quant_cuda tests/models/test_moe_cuda bench/cuda/tf_bench_cuda
#     bench/cuda/tf_bench_moe" TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p507.tar.xz
#   run(command="ln -sfn p507.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run507.sh; cat $OUT/all.txt",
#       carry=[".devpack/p507.tar.xz"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
T0=$(date +%s)
for t in test_quant_cuda test_moe_cuda; do
  TF_Q4_PREFILL=1 TF_MOE_WGMMA=1 timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t (paths on) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
  grep -E "FAILED  \]|Failure|Expected|Which is|differs|did not run" $OUT/$t.txt | head -10 >> $OUT/all.txt
done
for V in "1 0" "1 128" "0 0"; do
  set -- $V
  TF_BENCH_PREFILL_LENS=1024,2048,4096 TF_Q4_PREFILL=$1 TF_Q4_PREFILL_MAX_M=0 TF_Q4_PREFILL_BN=$2 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --prefill > $OUT/pf-$1-$2.txt 2>&1
  echo "prefill TF_Q4_PREFILL=$1 BN=$2 rc=$? $(grep -E '^\| Qwen3-8B \| prefill' $OUT/pf-$1-$2.txt | cut -d'|' -f3,4,5 | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
done
TF_MOE_WGMMA=1 TF_Q4_PREFILL=1 timeout 150 $D/bin/tf_bench_moe --format mlx4 > $OUT/moe.txt 2>&1
echo "moe mlx4 (wgmma experts, 4-bit prefill up to 2048 rows) rc=$? t=$(($(date +%s)-T0))" >> $OUT/all.txt
grep -E "prefill 4096|^\| decode b=(1|8|32) ctx 512 \|" $OUT/moe.txt | cut -c1-200 >> $OUT/all.txt
for X in 01 00 11 01 00 11; do
  TF_Q4_WG_XCP=${X:0:1} TF_Q4_KS_XCP=${X:1:1} TF_BENCH_ONLY_WGC=1 timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$X.txt 2>&1
  echo "8b XCP wg/ks=$X rc=$? $(grep -E '^\| Qwen3-8B \| decode b=(16|32) .*mlx' $OUT/8b-$X.txt | cut -d'|' -f3,5 | tr '\n' ' ') t=$(($(date +%s)-T0))" >> $OUT/all.txt
done
rm -rf $D
