# Session 47, run 467: (1) the two-team decode loop's rule widened from run 464 (two teams from 2/3 of the SMs at
# any context, or from 45% at up to 4 chunks: 8 and 12 rows of 8 KV heads now take it) -- test_cuda_backend and
# test_cuda_graphs on the default; the product (random Qwen3-8B MLX 4-bit, tensorfold bench, 128 tokens) at 8
# streams (prompt 256) and 12 streams (prompt 1536), TF_ATTN_DECODE_LOOP 0 (the split schedule: the old
# rule's choice for 8 and 12 rows) against 3 (the new rule), alternating. (2) The 8B forward table on this
# build (the lean 16-row kernels of runs 466 and the rule) for issue 11's numbers.
# Prediction: 8 streams at 256-384 positions -2..-3% a round (run 464: 2.633/2.666 -> 2.572/2.589 ms), at
# 1536-1664 positions unchanged (the rule leaves them split); 12 streams at 1536+ positions -5..-10% of the
# attention's share (alone 45.9 -> 31.7 us a layer at 1536).
#   BINS="tensorfold tests/ops/gpu/test_cuda_backend tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda" \
#     tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run467-rule-lean.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for t in test_cuda_backend test_cuda_graphs; do
  timeout 100 $D/bin/$t --gtest_brief=1 > $OUT/$t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure" $OUT/$t.txt | head -6 >> $OUT/all.txt
done
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for pp in "8 256" "12 1536"; do
  set -- $pp
  for dl in 0 3 0 3; do
    TF_ATTN_DECODE_LOOP=$dl timeout 60 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel $1 --prompt-tokens $2 --context 2048 > $OUT/e2e.txt 2>&1
    echo "e2e parallel $1 prompt $2 decode loop $dl rc=$?: $(grep -E 'forward' $OUT/e2e.txt | head -1)" >> $OUT/all.txt
  done
done
rm -rf $M
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode" $OUT/8b.txt >> $OUT/all.txt
rm -rf $D
