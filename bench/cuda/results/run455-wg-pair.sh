# Session 44's second device call. (1) The decode loop kernel (attention_mma.cu, new, off by default: one
# block a (decode row, KV head) over all its chunks, K/V double-buffered, merged in registers, no partials and
# no combine launch): its bits (test_cuda_backend), the 16-row attention alone with it off / on, and the 8B
# forward at b = 8 / 16 / 32 with it off / on in the same call. (2) Run 454 showed, with q4_ks on the down,
# q4_wg mode 1 at 3.283 ms and q4_pair mode 2 at 3.349 against the default's 3.397 on their own same-call
# lines: the combinations in one call, twice interleaved, in two processes. (3) The model tests and the product
# (`tensorfold bench --parallel 16`, drafted = serial) with the candidates set by environment.
# Build and pack: as run454-ks-default.sh, with bench/cuda/tf_attention_once in BINS.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
timeout 150 $D/bin/test_cuda_backend --gtest_brief=1 > $OUT/backend.txt 2>&1; echo "test_cuda_backend rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differ" $OUT/backend.txt | head -12 >> $OUT/all.txt
for dl in 0 2; do  # the 16-row attention alone (36 layers' KV in turn)
  for ctx in 512 2048; do
    TF_ATTN_DECODE_LOOP=$dl timeout 60 $D/bin/tf_attention_once decode $ctx 16 > $OUT/attn-$dl-$ctx.txt 2>&1
    echo "attention $ctx 16 decode loop $dl rc=$?" >> $OUT/all.txt; grep -E "us a layer" $OUT/attn-$dl-$ctx.txt >> $OUT/all.txt
  done
done
TF_ATTN_FUSED_MAX=512 timeout 60 $D/bin/tf_attention_once decode 512 16 > $OUT/attn-fused512.txt 2>&1
echo "attention 512 16 fused max 512 rc=$?" >> $OUT/all.txt; grep -E "us a layer|stamps" $OUT/attn-fused512.txt >> $OUT/all.txt
for p in 1 2; do
  timeout 170 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16,mlx4 --decode --quick > $OUT/8b-$p.txt 2>&1
  echo "8b process $p rc=$?" >> $OUT/all.txt
  grep -E "decode b=[0-9]+ ctx=512 \(graph\):|decode loop" $OUT/8b-$p.txt | grep -v "ours" | cut -c1-200 >> $OUT/all.txt
  grep -o "q4_wg off[^|]*ms  q4_ks" $OUT/8b-$p.txt >> $OUT/all.txt
  grep -o "q4_pair/q4_wg modes[^|]* ms" $OUT/8b-$p.txt >> $OUT/all.txt
done
for env in "TF_Q4_WG=1" "TF_Q4_WG=1 TF_Q4_PAIR=2 TF_ATTN_DECODE_LOOP=1"; do
  env $env timeout 150 $D/bin/test_cuda_model --gtest_brief=1 > $OUT/model.txt 2>&1; echo "test_cuda_model $env rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED" $OUT/model.txt | head -5 >> $OUT/all.txt
  env $env timeout 150 $D/bin/test_cuda_graphs --gtest_brief=1 > $OUT/graphs.txt 2>&1; echo "test_cuda_graphs $env rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED" $OUT/graphs.txt | head -5 >> $OUT/all.txt
done
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for env in "TF_Q4_WG=3" "TF_ATTN_DECODE_LOOP=1" "TF_Q4_WG=1 TF_ATTN_DECODE_LOOP=1" "TF_Q4_WG=3"; do
  env $env timeout 100 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 16 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
  echo "e2e $env rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
done
rm -rf $M $D
