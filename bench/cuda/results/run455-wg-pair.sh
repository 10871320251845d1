# Session 44's second device call: run 454 showed, with q4_ks on the down (the new default), q4_wg mode 1
# (the gate_up too) at 3.283 ms and q4_pair mode 2 at 3.349 against the default's 3.397 on their own same-call
# lines. Here the combinations in one call, twice interleaved, in two processes; the model tests and the
# product (`tensorfold bench --parallel 16`, drafted = serial) with each candidate set by environment.
# Build and pack: as run454-ks-default.sh.
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt
for p in 1 2; do
  timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$p.txt 2>&1
  echo "8b process $p rc=$?" >> $OUT/all.txt
  grep -E "mlx 4-bit g64 decode b=16 ctx=512 \(graph\)" $OUT/8b-$p.txt | cut -c1-200 >> $OUT/all.txt
  grep -o "q4_wg off[^|]*ms  q4_ks" $OUT/8b-$p.txt >> $OUT/all.txt
  grep -o "q4_pair/q4_wg modes[^|]* ms" $OUT/8b-$p.txt >> $OUT/all.txt
done
for env in "TF_Q4_WG=1" "TF_Q4_WG=1 TF_Q4_PAIR=2"; do
  env $env timeout 150 $D/bin/test_cuda_model --gtest_brief=1 > $OUT/model.txt 2>&1; echo "test_cuda_model $env rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED" $OUT/model.txt | head -5 >> $OUT/all.txt
  env $env timeout 150 $D/bin/test_cuda_graphs --gtest_brief=1 > $OUT/graphs.txt 2>&1; echo "test_cuda_graphs $env rc=$?" >> $OUT/all.txt
  grep -E "PASSED|FAILED" $OUT/graphs.txt | head -5 >> $OUT/all.txt
done
M=/dev/shm/q8b4
python3 tools/make_random_checkpoint.py --shape qwen3-8b --out $M --tokenizer $D/tok --mlx-bits 4 2>&1 | tail -1 >> $OUT/all.txt
for env in "TF_Q4_WG=3" "TF_Q4_WG=1" "TF_Q4_WG=1 TF_Q4_PAIR=2" "TF_Q4_WG=3"; do
  env $env timeout 150 $D/bin/tensorfold bench $M --backend cuda --workload random --tokens 128 --parallel 16 --prompt-tokens 256 --context 2048 > $OUT/e2e.txt 2>&1
  echo "e2e $env rc=$?" >> $OUT/all.txt; grep -E "\| random|forward" $OUT/e2e.txt | head -3 >> $OUT/all.txt
done
rm -rf $M $D
