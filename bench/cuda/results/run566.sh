# Session 65, run 566: run 565 found the producers' poll done 0.5 us after the router's last tile but their
# routing 2.3 (bf16) / 3.1 us (4-bit) after that. Split: the picks made (stamp) vs the picks' tensor maps
# prefetched; A/Bs in one process: a14 (no prefetch.tensormap), a15 (the routing's code warmed every poll
# round, not once), a12 (no warm-up). Timing and the timelines; same bits (a14, a15 not yet in the test).
#   BINS="bench/cuda/tf_bench_moe"
# Run: ln -sfn p566.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run566.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
for f in mlx4 bf16; do
  TF_MOE_BENCH_STEP_AB=a14,a15,a12,a14 TF_MOE_BENCH_WARM_S=2 timeout 90 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f.txt 2>&1
  echo "$f rc=$?" >> $OUT/all.txt; grep -E "one-kernel|step logits|rror|HANG" $OUT/moe-$f.txt >> $OUT/all.txt
  TF_STEP_STAMPS=1 TF_MOE_BENCH_WARM_S=1 timeout 60 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f-tl.txt 2>&1
  echo "$f stamps rc=$?" >> $OUT/all.txt; grep -E "last tiles|qkv done" $OUT/moe-$f-tl.txt >> $OUT/all.txt
done
rm -rf $D
