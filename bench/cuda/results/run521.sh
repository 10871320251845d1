# Session 56, run 521: moe_decode_bf16 lost in run 520 (H200: 3.313 ms vs the chain's 2.985). Its stamps
# (TF_MOE_DECODE_STAMPS=1) and timing ablations (TF_MOE_DECODE_ABLATE: 3 no gate_up arithmetic, 1 no down
# phase, 4 no routing), each a process of tf_bench_moe bf16 --quick with TF_MOE_DECODE_BF16=1.
#   BINS="tests/models/test_moe_cuda bench/cuda/tf_bench_moe"
#     TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p521.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
export TF_MOE_DECODE_BF16=1
TF_MOE_DECODE_STAMPS=1 timeout 100 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-stamps.txt 2>&1
echo "stamps rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| decode b=1 ctx 512 \||routed chain" $OUT/moe-bf16-stamps.txt >> $OUT/all.txt
for a in 3 1 4; do
  TF_MOE_DECODE_ABLATE=$a timeout 60 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16-ab$a.txt 2>&1
  echo "ablate $a rc=$? $(el) $(grep -E '^\| decode b=1 ctx 512 \|' $OUT/moe-bf16-ab$a.txt)" >> $OUT/all.txt
done
rm -rf $D
