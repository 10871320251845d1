# Session 55, run 514: the wgmma prefill attention reworked -- a producer warp, pages cut by the range loaded a
# position a box (no zeroing pass), buffers released by mbarrier, the warpgroups' MMAs optionally in turns
# (TF_ATTN_WGMMA_PP). Its bit test (both), tf_attention_once (wide / wgmma / turns), then the GPU suites with
# the defaults (wgmma on), the 8B bf16 prefill, tf_bench_moe mlx4.
#   BINS="tests/ops/gpu/test_cuda_backend bench/cuda/tf_attention_once bench/cuda/tf_bench_cuda
#     bench/cuda/tf_bench_moe tests/ops/gpu/test_cuda_model tests/ops/gpu/test_cuda_graphs tests/models/test_moe_cuda"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p514.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/test_cuda_backend --gtest_brief=1 --gtest_filter='*AttentionWgmma*' > $OUT/wg-test.txt 2>&1
echo "wg-test rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/wg-test.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "Failure|first at|Which is|did not run|hq " $OUT/wg-test.txt | head -24 >> $OUT/all.txt
for n in 4096 16384; do timeout 60 $D/bin/tf_attention_once $n 4 >> $OUT/once.txt 2>&1; done
cat $OUT/once.txt >> $OUT/all.txt; el >> $OUT/all.txt
for P in 0 1; do
  TF_ATTN_WGMMA_PP=$P timeout 200 $D/bin/test_cuda_backend --gtest_brief=1 > $OUT/backend-$P.txt 2>&1
  echo "test_cuda_backend PP=$P rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/backend-$P.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
  grep -E "FAILED  \]" $OUT/backend-$P.txt | head -8 >> $OUT/all.txt
done
for t in test_cuda_model test_cuda_graphs test_moe_cuda; do
  timeout 200 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1
  echo "$t rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/$t.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
  grep -E "FAILED  \]" $OUT/$t.txt | head -8 >> $OUT/all.txt
done
for P in 0 1; do
  TF_ATTN_WGMMA_PP=$P timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16 --prefill > $OUT/pf-$P.txt 2>&1
  echo "8B bf16 prefill PP=$P rc=$? $(el)" >> $OUT/all.txt
  grep -E "^prefill|attention one layer" $OUT/pf-$P.txt >> $OUT/all.txt
done
timeout 200 $D/bin/tf_bench_moe --format mlx4 > $OUT/moe.txt 2>&1
echo "moe mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| prefill|^prefill" $OUT/moe.txt >> $OUT/all.txt
rm -rf $D
