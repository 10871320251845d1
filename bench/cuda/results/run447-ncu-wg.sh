set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
cd $D
date -u > $OUT/all.txt
for cfg in 2 1; do
TF_Q4_WG_CFG=$cfg timeout 200 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SourceCounters --section SchedulerStats -k regex:q4_wg --launch-count 1 -o $OUT/wg$cfg bin/tf_bench_quant --linears-m 16 > $OUT/ncu-run$cfg.txt 2>&1
echo "ncu cfg=$cfg rc=$?" >> $OUT/all.txt
ncu -i $OUT/wg$cfg.ncu-rep --page details > $OUT/wg$cfg-details.txt 2>&1
ncu -i $OUT/wg$cfg.ncu-rep --page source --print-source sass --csv > $OUT/wg$cfg-sass.csv 2>&1
rm -f $OUT/wg$cfg.ncu-rep
done
