# Session 46, run 460: the two-team decode loop's rule as the default (TF_ATTN_DECODE_LOOP=3: blocks >= 3/4 of
# the SMs, no upper bound, <= 32 chunks). (1) The graph and model tests on the default. (2) Alone at 4096 /
# 8192 positions, 16 and 32 rows (the rule's untested corner), 0 against 4, twice. (3) The 8B forward on the
# default (the table's rows) with the decode-loop lines beside it.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_cuda_graphs test_cuda_model; do
  timeout 50 $D/bin/$t --gtest_brief=1 > $OUT/t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure" $OUT/t.txt | head -6 >> $OUT/all.txt
done
timeout 60 $D/bin/test_cuda_backend --gtest_brief=1 --gtest_filter='*DecodeLoop*:*SixteenRows*:*LongContext*:*RowInvariant*' > $OUT/t.txt 2>&1
echo "test_cuda_backend decode loop rc=$?" >> $OUT/all.txt; grep -E "PASSED|FAILED|Failure" $OUT/t.txt | head -6 >> $OUT/all.txt
for ctx in 4096 8192; do
  for b in 16 32; do
    line="ctx $ctx b=$b:"
    for dl in 0 4 0 4; do
      TF_ATTN_DECODE_LOOP=$dl timeout 30 $D/bin/tf_attention_once decode $ctx $b > $OUT/att.txt 2>&1
      line="$line $dl:$(grep -oE '[0-9.]+ us a layer' $OUT/att.txt | cut -d' ' -f1)"
    done
    echo "$line" >> $OUT/all.txt
  done
done
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode" $OUT/8b.txt >> $OUT/all.txt
grep -E "attention decode loop" $OUT/8b.txt | cut -c1-200 >> $OUT/all.txt
rm -rf $D
