# Session 46's second prepared call: where below 3/4 of the SMs the two-team decode loop still wins (session 46
# Next 2). Runs 458-460: at 8 rows x 8 KV heads (64 blocks) the 8B forward at 512 positions gains 3-7% with the
# loop always (both formats, H100 and H200), but the attention alone at 2048 positions loses 30.5 -> 40.7 us.
# (1) Alone (tf_attention_once, split / two teams always, us a layer, twice): 8 and 12 rows at 512, 768,
# 1024, 1536 and 2048 positions. (2) The product (random Qwen3-8B MLX 4-bit, `tensorfold bench --parallel 8`,
# prompts of 256 and 1536 tokens) with the default (mode 3: 8 rows stay on the split schedule) against mode 4
# (always two teams), alternating. A rule by chunks a team (e.g. <= 4 chunks a team from half the SMs) would
# follow from where (1) and (2) cross.
# Build and pack (one pack for runs 463 and 464; session 46 packed it at HEAD):
#   export PATH=/usr/local/cuda/bin:$PATH; ninja -C build-cuda test_quant_cuda tf_bench_quant tf_bench_cuda \
#     tf_attention_once tensorfold
#   BINS="tests/models/test_quant_cuda bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda \
#     bench/cuda/tf_attention_once tensorfold" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run464-teams-b8.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for b in 8 12; do
  for ctx in 512 768 1024 1536 2048; do
    line="b=$b ctx $ctx:"
    for dl in 0 4 0 4; do
      TF_ATTN_DECODE_LOOP=$dl timeout 20 $D/bin/tf_attention_once decode $ctx $b > $OUT/att.txt 2>&1
      line="$line $dl:$(grep -oE '[0-9.]+ us a layer' $OUT/att.txt | cut -d' ' -f1)"
    done
    echo "$line" >> $OUT/all.txt
  done
done
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for prompt in 256 1536; do
  for dl in 3 4 3 4; do
    TF_ATTN_DECODE_LOOP=$dl timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 8 --prompt-tokens $prompt --context 2048 > $OUT/e2e.txt 2>&1
    echo "e2e parallel 8 prompt $prompt decode loop $dl rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
  done
done
rm -rf $M $D
