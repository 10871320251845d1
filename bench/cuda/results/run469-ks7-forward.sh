# Session 48, run 469 (after run 468, same call): the 8B MLX 4-bit forward with q4_ks configuration 7 (two K
# slices a CTA) on every linear of width <= 8192 (qkv, o, down: TF_Q4_KS=4 -- at 16 rows the o's 64 wgmma
# tiles x 4 slice pairs = 256 CTAs fill the grid where q4_pair's 128 tiles do not). One process: its b=16
# table line is (4, 7); its modes lines, same process, give the down only (3) in configurations 0-4 and 7 and
# "widths <= 8192 only (cfg 1)" = (4, 1).
# Prediction: (4, 7) -2..-5% against (3, 1) if the fold's cost stays under the idle half-card q4_pair leaves
# (q4_pair's qkv/o run ~1.2-1.4 TB/s against the gate_up's 2.65); (4, 1) lost on the H100 in run 455.
#   run(command="bash bench/cuda/results/run468-ks-trim.sh; bash bench/cuda/results/run469-ks7-forward.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
echo "== run 469" >> $OUT/all.txt
TF_Q4_KS=4 TF_Q4_KS_CFG=7 timeout 150 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b-ks4-cfg7.txt 2>&1
echo "TF_Q4_KS=4 TF_Q4_KS_CFG=7 rc=$?" >> $OUT/all.txt
grep -E "^\| Qwen3-8B \| decode" $OUT/8b-ks4-cfg7.txt >> $OUT/all.txt
grep -oE "q4_ks (off|on the down)[^:]*:( [0-9.]+ ms)*" $OUT/8b-ks4-cfg7.txt >> $OUT/all.txt
rm -rf $D
