# Session 55, run 513: the prefill attention on warpgroup MMAs (attention_wgmma.cu, TF_ATTN_WGMMA, off by
# default) -- its bit test against the wide loop kernel, tf_attention_once (wide vs wgmma, same call, and
# whether the outputs differ), every backend test with it on, then the 8B bf16 prefill rows with it off / on
# and tf_bench_moe mlx4 (prefill 4096 with the attention on the other kernel, same call).
#   BINS="tests/ops/gpu/test_cuda_backend bench/cuda/tf_attention_once bench/cuda/tf_bench_cuda
#     bench/cuda/tf_bench_moe" TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p513.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 120 $D/bin/test_cuda_backend --gtest_brief=1 --gtest_filter='*AttentionWgmma*' > $OUT/wg-test.txt 2>&1
echo "wg-test rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/wg-test.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "Failure|first at|Which is|did not run|trace:|hq " $OUT/wg-test.txt | head -24 >> $OUT/all.txt
for n in 4096 16384; do timeout 60 $D/bin/tf_attention_once $n 4 >> $OUT/once.txt 2>&1; done
cat $OUT/once.txt >> $OUT/all.txt; el >> $OUT/all.txt
TF_ATTN_WGMMA=1 timeout 200 $D/bin/test_cuda_backend --gtest_brief=1 > $OUT/backend-wg.txt 2>&1
echo "test_cuda_backend (TF_ATTN_WGMMA=1) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/backend-wg.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]" $OUT/backend-wg.txt | head -8 >> $OUT/all.txt
for W in 0 1; do
  TF_ATTN_WGMMA=$W timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16 --prefill > $OUT/pf-$W.txt 2>&1
  echo "8B bf16 prefill TF_ATTN_WGMMA=$W rc=$? $(el)" >> $OUT/all.txt
  grep -E "^prefill|attention one layer" $OUT/pf-$W.txt >> $OUT/all.txt
done
timeout 200 $D/bin/tf_bench_moe --format mlx4 > $OUT/moe.txt 2>&1
echo "moe mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| prefill|^prefill" $OUT/moe.txt >> $OUT/all.txt
rm -rf $D
