# Session 46, run 459 (H100 lent): where the two-team decode loop (TF_ATTN_DECODE_LOOP=4) wins, for a default
# rule. (1) The attention alone (tf_attention_once: Qwen3-8B's 32/8 heads, 36 layers' KV in turn) at 1-32 rows
# and 512 / 2048 / 8192 positions, split schedule (0) against the two-team loop always (4), twice. (2) The
# 30B-A3B MLX 4-bit bench (4 KV heads; b = 1 and 8) with 0 and 4.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for ctx in 512 2048 8192; do
  for b in 1 2 4 8 16 32; do
    [ $ctx = 8192 ] && [ $b -gt 8 ] && continue
    line="ctx $ctx b=$b:"
    for dl in 0 4 0 4; do
      TF_ATTN_DECODE_LOOP=$dl timeout 20 $D/bin/tf_attention_once decode $ctx $b > $OUT/att.txt 2>&1
      line="$line $dl:$(grep -oE '[0-9.]+ us a layer' $OUT/att.txt | cut -d' ' -f1)"
    done
    echo "$line" >> $OUT/all.txt
  done
done
for dl in 0 4; do
  TF_ATTN_DECODE_LOOP=$dl timeout 100 $D/bin/tf_bench_moe --quick --format mlx4 > $OUT/moe$dl.txt 2>&1
  echo "moe decode loop $dl rc=$?" >> $OUT/all.txt
  grep -E "^\| decode b=(1|8) ctx 512 \|" $OUT/moe$dl.txt >> $OUT/all.txt
done
rm -rf $D
