# Session 64, run 553: the MoE step's probe instances (new in session 64: bf16 and MLX 4-bit; the product
# instances' SASS unchanged) -- layer 10's timeline and where the consumers and producer wait
# (TF_STEP_STAMPS, print_step_stamps) for the 4-bit instance (run 550: 3.68 ms against the chain's 2.14) and
# for bf16; the bf16 step's stages in flight (i2 i4 i6 i0) and the 8-slot ring (a8) in one process; and run
# 551's ncu reports (.devpack/*.ncu-rep.xz) as SASS source pages (tools/ncu_step_lines.py maps them here).
# Pack p553: tf_bench_moe only (e1e3d23 + the probe instances) and its libraries.
# Run: ln -sfn p553.tar.xz .devpack/step.tar.xz; bash bench/cuda/results/run553.sh; cat $OUT/all.txt
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
TF_STEP_STAMPS=1 TF_MOE_BENCH_WARM_S=1 timeout 80 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4.txt 2>&1
echo "mlx4 rc=$?" >> $OUT/all.txt; grep -E "one-kernel|step logits|rror|HANG" $OUT/moe4.txt >> $OUT/all.txt
sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe4.txt | head -40 >> $OUT/all.txt
TF_STEP_STAMPS=1 TF_MOE_BENCH_STEP_AB=i2,i4,i6,i0,a8 TF_MOE_BENCH_WARM_S=2 timeout 120 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "bf16 rc=$?" >> $OUT/all.txt; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror|HANG" $OUT/moe-bf16.txt >> $OUT/all.txt
sed -n '/^stamps ctx/,/^| decode b=1 ctx 512, the/p' $OUT/moe-bf16.txt | head -40 >> $OUT/all.txt
TF_STEP_STAMPS=1 TF_STEP_TILE_LOG=1 TF_MOE_BENCH_WARM_S=1 timeout 80 $D/bin/tf_bench_moe --format mlx4 --quick > $OUT/moe4-log.txt 2>&1
echo "mlx4 tile log rc=$?" >> $OUT/all.txt
for f in mlx4 bf16; do
  [[ -f .devpack/$f.ncu-rep.xz ]] || continue
  xz -dc .devpack/$f.ncu-rep.xz > $D/$f.ncu-rep
  ncu -i $D/$f.ncu-rep --page source --print-source sass --csv 2> $OUT/$f-err.txt | xz -9 > $OUT/$f-sass.csv.xz
  echo "$f: $(xz -dc $OUT/$f-sass.csv.xz | wc -l) csv lines" >> $OUT/all.txt
done
rm -rf $D
