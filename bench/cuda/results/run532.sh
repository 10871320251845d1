# Session 57, run 532: the one-kernel decode step's producer with at most N ring stages requested and not yet
# landed (DecodeStep::set_inflight, TF_STEP_INFLIGHT): whether the hops' dependent accesses (x polls, tagged
# words, the attention's K/V) wait behind fewer queued weight bytes without the stream losing bandwidth.
# Qwen3-8B b=1 ctx 512, bf16 and MLX 4-bit, caps alternating with the default, twice, twice (two processes);
# then the 4-bit probe's stamps at the default and at 4 stages.
#   BINS="bench/cuda/tf_bench_cuda"
#     rm -f .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p532.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for rep in 1 2; do
  TF_BENCH_STEP_ONLY=1 TF_STEP_INFLIGHT=2,3,4,6,8 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-$rep.txt 2>&1
  echo "8b rep $rep rc=$? $(el)" >> $OUT/all.txt
  grep -E "^decode step b=1|stages in flight" $OUT/8b-$rep.txt | cut -c1-900 >> $OUT/all.txt
done
TF_BENCH_STEP_ONLY=2 TF_STEP_STAMPS=1 TF_STEP_STAMPS_INFLIGHT=4 timeout 100 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-stamps.txt 2>&1
echo "8b stamps rc=$? $(el)" >> $OUT/all.txt
grep -E "^decode step b=1|layer 10 ->|waits|last tiles|stages in flight" $OUT/8b-stamps.txt | cut -c1-400 >> $OUT/all.txt
rm -rf $D
