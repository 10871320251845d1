# Session 64, run 552 (NEVER RAN: no machine came; its work went into run 553): run 551's ncu reports (carried in .devpack/*.ncu-rep.xz) as ncu's SASS source pages (csv);
# mapped to source lines here by tools/ncu_step_lines.py with nvdisasm's line table of p551's tf_bench_moe
# (decode_step_moe.sm_90a.cubin). Run: bash bench/cuda/results/run552.sh
for f in mlx4 bf16; do
  [[ -f .devpack/$f.ncu-rep.xz ]] || continue
  xz -dc .devpack/$f.ncu-rep.xz > /tmp/$f.ncu-rep
  ncu -i /tmp/$f.ncu-rep --page source --print-source sass --csv 2> $OUT/$f-err.txt | xz -9 > $OUT/$f-sass.csv.xz
  echo "$f: $(xz -dc $OUT/$f-sass.csv.xz | wc -l) csv lines"
done
# and, with p552 (p551's tf_bench_moe and its libraries: ln -sfn p552.tar.xz .devpack/step.tar.xz; P=1): the bf16 step's stages in flight now that
# ~112 CTAs have 12 slots (H100 default 3 stages of 16 KB; 0: every free slot), and the lent ring's A/B again.
[[ -n ${P:-} ]] || exit 0
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
TF_MOE_BENCH_STEP_AB=i2,i4,i6,i0,a8 TF_MOE_BENCH_WARM_S=2 timeout 120 $D/bin/tf_bench_moe --format bf16 --quick > $OUT/moe-bf16.txt 2>&1
echo "moe bf16 rc=$?"; grep -E "^\| decode b=1 ctx 512 \||one-kernel|step logits|rror" $OUT/moe-bf16.txt
rm -rf $D
