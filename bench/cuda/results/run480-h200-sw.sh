# Session 49, run 480: the 4-bit step's stage shape on an H200 if one comes (run 474's question; the default
# is now 2 under 100 GiB, 4 above): TF_STEP_Q4_SW = 4 / 2 / 8 interleaved, twice. Built with the
# run475-lost-pair-silu.patch applied (the step is untouched by it; the b=16 line is the fused q4_pair gate_up
# against the default q4_wg gate_up + silu_mul).
#   BINS="bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run480-h200-sw.sh; cat $OUT/all.txt", carry=[".devpack"], kind="nvidia-h200")
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
i=0
for sw in 4 2 8 4 2 8; do
  i=$((i+1))
  TF_STEP_Q4_SW=$sw timeout 60 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/sw-$i.txt 2>&1
  echo "TF_STEP_Q4_SW=$sw rc=$? $(grep -E '^decode step b=1' $OUT/sw-$i.txt | tail -1)" >> $OUT/all.txt
  grep -oE "decode b=16 ctx=512, gate_up \+ silu_mul in one kernel.*" $OUT/sw-$i.txt >> $OUT/all.txt
done
grep -E "^\| Qwen3-8B \| decode" $OUT/sw-1.txt >> $OUT/all.txt
grep -oE "(bf16|mlx 4-bit g64) decode b=(8|16) ctx=512 without:.*" $OUT/sw-1.txt | cut -c1-400 >> $OUT/all.txt
rm -f $OUT/sw-[3-6].txt
rm -rf $D
