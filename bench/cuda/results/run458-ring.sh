# Session 45's first device call, prepared without a machine (loans paused all session): part a of two.
# (1) q4_ks's new ring configurations' test (7-9: the weights' quads ahead in shared memory by cp.async instead
# of registers; Quant4BitKSliceRingEqualsDecodeKernel; the ring's bench lines are skipped if it fails). (2) The
# 16-, 9- and 1-row linears alone with the ring configurations' line (tf_bench_quant --linears-m 16,9,1): prediction in
# docs/cuda-notes.md "Session 45". (3) The 8B b=16 forward, same call: q4_ks on the down in configurations 0-4
# and 7-9, and on every linear / widths <= 8192 in 7-9; the decode loop kernel with one and two teams (session
# 45's other change) alone (tf_attention_once, 16 rows at 512 / 2048 positions) and in the forward (b = 8 /
# 16 / 32 lines). (4) The tests run 457 was to run (test_cuda_backend with
# session 44's AttentionDecodeLoopEqualsSplit, test_cuda_graphs, test_moe_cuda, test_cuda_model: q4_pair mode 3
# is the default since run 456), and test_quant_cuda's others.
# Part b (the MoE, run 457's plan) is bench/cuda/results/run458b-moe.sh; part c (ncu of both variants) run458c-ncu.sh.
# Build and pack:
#   export PATH=/usr/local/cuda/bin:$PATH; ninja -C build-cuda test_quant_cuda test_cuda_backend test_cuda_graphs \
#     test_moe_cuda test_cuda_model tf_bench_quant tf_bench_cuda tf_bench_moe tf_attention_once tensorfold
#   BINS="tests/models/test_quant_cuda tests/ops/gpu/test_cuda_backend tests/ops/gpu/test_cuda_graphs \
#     tests/models/test_moe_cuda tests/ops/gpu/test_cuda_model bench/cuda/tf_bench_quant bench/cuda/tf_bench_cuda \
#     bench/cuda/tf_bench_moe bench/cuda/tf_attention_once tensorfold" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run458-ring.sh; cut -c1-900 $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $OUT/all.txt
timeout 60 $D/bin/test_quant_cuda --gtest_brief=1 --gtest_filter='*KSliceRing*' > $OUT/ring-test.txt 2>&1
rc=$?; echo "ring test rc=$rc" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differs|did not|configuration|rows" $OUT/ring-test.txt | head -16 >> $OUT/all.txt
[ $rc -ne 0 ] && export TF_BENCH_KS_RING=0
timeout 60 $D/bin/test_cuda_backend --gtest_brief=1 --gtest_filter='*DecodeLoop*:*SixteenRows*:*LongContext*' > $OUT/teams-test.txt 2>&1
rc=$?; echo "decode loop tests (one and two teams) rc=$rc" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|did not|mode|Expected|Which" $OUT/teams-test.txt | head -12 >> $OUT/all.txt
[ $rc -ne 0 ] && export TF_BENCH_DECODE_TEAMS=0
# (the order puts what matters most first; the timeouts add up to ~600 s only if something hangs)
timeout 100 $D/bin/tf_bench_quant --linears-m 16,9,1 > $OUT/linears.txt 2>&1; echo "linears rc=$?" >> $OUT/all.txt
grep -E "^\||q4_ks" $OUT/linears.txt | cut -c1-600 >> $OUT/all.txt
for dl in 0 2 4 0 2 4; do  # the decode loop kernel alone, one team / two teams (session 45), 16 rows
  [ $dl = 4 ] && [ "${TF_BENCH_DECODE_TEAMS:-1}" = 0 ] && continue
  for ctx in 512 2048; do
    TF_ATTN_DECODE_LOOP=$dl timeout 10 $D/bin/tf_attention_once decode $ctx 16 > $OUT/att.txt 2>&1
    echo "attention once decode loop $dl ctx $ctx rc=$? $(grep -o 'b=16.*KV' $OUT/att.txt)" >> $OUT/all.txt
  done
done
timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1; echo "8b rc=$?" >> $OUT/all.txt
grep -E "decode b=(1|16) ctx=512 \(" $OUT/8b.txt | grep -v ours | cut -c1-200 >> $OUT/all.txt
grep -oE "q4_ks on (the down only|every linear)[^:]*:( [0-9.]+ ms)*" $OUT/8b.txt >> $OUT/all.txt
grep -E "attention decode loop" $OUT/8b.txt | cut -c1-200 >> $OUT/all.txt
F='--gtest_filter=-*DecodeLoop*:*SixteenRows*:*LongContext*'  # test_cuda_backend: the rest (those ran first)
for t in test_cuda_backend test_cuda_graphs test_moe_cuda test_cuda_model; do
  timeout 50 $D/bin/$t --gtest_brief=1 $([ $t = test_cuda_backend ] && echo "$F") > $OUT/t.txt 2>&1; echo "$t rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure|Expected|Which|differ" $OUT/t.txt | head -10 >> $OUT/all.txt
done
for dl in 3 4; do  # CUDA graphs captured with the two-team kernel (3: where the rule takes it, 4: always)
  [ "${TF_BENCH_DECODE_TEAMS:-1}" = 0 ] && break
  TF_ATTN_DECODE_LOOP=$dl timeout 40 $D/bin/test_cuda_graphs --gtest_brief=1 > $OUT/t.txt 2>&1; echo "test_cuda_graphs decode loop $dl rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED|Failure" $OUT/t.txt | head -6 >> $OUT/all.txt
done
timeout 40 $D/bin/test_quant_cuda --gtest_brief=1 --gtest_filter='-*KSliceRing*' > $OUT/t.txt 2>&1; echo "test_quant_cuda (the rest) rc=$?" >> $OUT/all.txt
grep -E "PASSED|FAILED|Failure|differ" $OUT/t.txt | head -10 >> $OUT/all.txt
rm -rf $D
