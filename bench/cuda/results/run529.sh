# Session 56, run 529: why the chain's gate_up on the ring kernel alone lost (run 524: 3.900 vs 3.473 ms) --
# its stamps (TF_MOE_DECODE_STAMPS=1; the patch run520-524-lost-bf16-ring.patch re-applied with the stamps
# passed to the gate_up-only launch), paced (TF_MOE_BF16_MODE=3) and all at once (2).
#   BINS="bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p529.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
export TF_MOE_DECODE_BF16=0 TF_MOE_GATE_UP_RING=1 TF_MOE_DECODE_STAMPS=1
for m in 3 2; do
  TF_MOE_BF16_MODE=$m timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-m$m.txt 2>&1
  echo "mode $m rc=$? $(el)" >> $OUT/all.txt
  grep -E '^\| decode b=1 ctx 512 \||not the ring|^attention|one-kernel MoE' $OUT/moe-bf16-m$m.txt | cut -c1-1500 >> $OUT/all.txt
done
rm -rf $D
