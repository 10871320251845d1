# Session 56, run 527 -- NOT RUN (no H200 came; two refusals) -- (run 525 again, needs_h200: none measured on an H200 since run 497): the landed tree's tables for
# issues 11 and 12 -- the 8B bf16 and MLX 4-bit decode (b=1/8/16/32), the 30B-A3B MoE b=1/8/32 both formats --
# and the 4-bit step's ring ablation on this card (TF_STEP_ABLATE=1: the probe with all, 2/3 and 1/3 of its
# ring, with and without tile arithmetic; session 53 Next 2: whether lending the attention region to the ring
# could pay on the H200, where the ring covers fewer microseconds of stream).
#   BINS="bench/cuda/tf_bench_cuda bench/cuda/tf_bench_moe"
#     rm .devpack/step.tar.xz; TF_PACK_DICT=1GiB tools/device_step.sh --pack; mv .devpack/step.tar.xz .devpack/p525.tar.xz
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
T0=$(date +%s)
el() { echo "t=$(( $(date +%s) - T0 ))"; }
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_STEP_ABLATE=1 timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-mlx4.txt 2>&1
echo "8b mlx4 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode|step ablations|^target" $OUT/8b-mlx4.txt | cut -c1-700 >> $OUT/all.txt
timeout 120 $D/bin/tf_bench_cuda --shape qwen3-8b --format bf16 --decode --quick > $OUT/8b-bf16.txt 2>&1
echo "8b bf16 rc=$? $(el)" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode" $OUT/8b-bf16.txt | cut -c1-300 >> $OUT/all.txt
for f in bf16 mlx4; do
  timeout 100 $D/bin/tf_bench_moe --format $f --quick > $OUT/moe-$f.txt 2>&1
  echo "moe $f rc=$? $(el)" >> $OUT/all.txt
  grep -E "^\| decode b=(1|8|32) ctx 512 \|" $OUT/moe-$f.txt >> $OUT/all.txt
done
rm -rf $D
