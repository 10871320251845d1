# Session 58, run 539: the 4-bit ring lent the attention's staging region (Ks, Vs, Qs: ~72 KB, right after the
# ring now) in CTAs with no attention unit and no merge in the launch (~92 of 132 at 512 positions): 11 slots
# there (SW 4), 7 elsewhere. The tests, then same-process A/Bs at Qwen3-8B MLX 4-bit b=1 ctx 512: TF_STEP_RING=7
# (7 slots everywhere: no lending) against 0 (the default: lending), with the caps; SW 2 (14 / 23); the table.
#   BINS="tests/ops/gpu/test_cuda_decode_step tests/ops/gpu/test_cuda_graphs bench/cuda/tf_bench_cuda"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p539.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_decode_step > $OUT/test_step.txt 2>&1
echo "test_cuda_decode_step rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_step.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test_step.txt | head -20 >> $OUT/all.txt
timeout 100 $D/bin/test_cuda_graphs --gtest_brief=1 > $OUT/test_graphs.txt 2>&1
echo "test_cuda_graphs rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test_graphs.txt | tr '\n' ' ') $(el)" >> $OUT/all.txt
TF_BENCH_STEP_ONLY=2 TF_STEP_RING=7,702,703,0 TF_STEP_INFLIGHT=2,3 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-sw4-lend.txt 2>&1
echo "8b sw4 lend rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|ring|stages in flight" $OUT/8b-sw4-lend.txt | cut -c1-900 >> $OUT/all.txt
TF_STEP_Q4_SW=2 TF_BENCH_STEP_ONLY=2 TF_STEP_RING=14,1403,0 TF_STEP_INFLIGHT=3,4 timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-sw2-lend.txt 2>&1
echo "8b sw2 lend rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|ring|stages in flight" $OUT/8b-sw2-lend.txt | cut -c1-900 >> $OUT/all.txt
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then  # the H200's caps: bf16 too (every slot there)
  TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT=0,2,3,4,6 timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-h200-caps.txt 2>&1
  echo "8b h200 caps rc=$? $(el)" >> $OUT/all.txt
  grep -E "^decode step b=1|stages in flight" $OUT/8b-h200-caps.txt | cut -c1-900 >> $OUT/all.txt
fi
timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-table.txt 2>&1
echo "8b table rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|^\| Qwen3-8B \| decode|^target" $OUT/8b-table.txt | cut -c1-300 >> $OUT/all.txt
rm -rf $D
