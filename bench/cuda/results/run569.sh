# Session 65, run 569 (scripted for a later session; not run): the TMA probe again, with (1) one thread's
# cycles for a try_wait / test_wait on a completed mbarrier phase, an arrive and a clock read (is a wait on a
# landed stage -- every consumer's and producer's in the step -- itself ~200-300 cycles?), and (2) mode 5's
# "slot wait" without the loop's index divisions (computed before the first clock read; run 559's ~320
# cycles lumped them in).
#   BINS="bench/cuda/tf_tma_probe"; packed from session 65's final tree as .devpack/p569.tar.xz
# Run: ln -sfn p569.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run569.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/tf_tma_probe 5 > $OUT/tma.txt 2>&1; echo "rc=$?" >> $OUT/all.txt
grep -E "one thread|plain|counted|cycles a stage" $OUT/tma.txt >> $OUT/all.txt
rm -rf $D
