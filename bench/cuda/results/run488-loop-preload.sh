# Session 50, run 488: the decode loop's block-table loads for chunk c + 2's copies issued at chunk c's start
# (set_attention_loop_preload; run 487's ncu: long-scoreboard stalls 40% of the kernel's, and the only global
# loads in its loop are those table loads). Predicted: -2..-4% of the attention alone at 512 positions (one
# later chunk a team), more at 2048 (seven); the 8B b=16 forward -0.3..-0.7%. Then where the loop's stalls
# are, by SASS line (ncu source counters).
#   BINS="tests/ops/gpu/test_cuda_backend bench/cuda/tf_attention_once bench/cuda/tf_bench_cuda" tools/device_step.sh --pack
#   run(command="bash bench/cuda/results/run488-loop-preload.sh; cat $OUT/all.txt", carry=[".devpack"])
set -u
D=$(mktemp -d); xz -dc .devpack/step.tar.xz | tar -xf - -C $D; export LD_LIBRARY_PATH=$D/bin:${LD_LIBRARY_PATH:-}
date -u > $OUT/all.txt; nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/all.txt
timeout 200 $D/bin/test_cuda_backend --gtest_brief=1 --gtest_filter='*Attention*' > $OUT/test.txt 2>&1
echo "test_cuda_backend (attention) rc=$? $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $OUT/test.txt | tr '\n' ' ')" >> $OUT/all.txt
grep -E "FAILED  \]|Failure" $OUT/test.txt | head -8 >> $OUT/all.txt
for ctx in 512 2048 512 2048; do
  timeout 60 $D/bin/tf_attention_once decode $ctx 16 > $OUT/once.txt 2>&1
  grep -E "us a layer|table loads" $OUT/once.txt | sed "s/^/ctx $ctx: /" >> $OUT/all.txt
done
timeout 200 $D/bin/tf_bench_cuda --shape qwen3-8b --format mlx4 --decode --quick > $OUT/8b.txt 2>&1
echo "8b rc=$?" >> $OUT/all.txt
grep -E "table loads|^\| Qwen3-8B \| decode b=(1|16)" $OUT/8b.txt | cut -c1-300 >> $OUT/all.txt
TF_ATTN_LOOP_PRELOAD=0 timeout 120 ncu --clock-control none --section SourceCounters --page source --print-source sass --csv \
  -k regex:attention_decode_loop --launch-skip 36 --launch-count 1 $D/bin/tf_attention_once decode 512 16 > $OUT/src.csv 2>/dev/null
echo "ncu rc=$?" >> $OUT/all.txt
python3 - "$OUT/src.csv" >> $OUT/all.txt <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hi = next((i for i, r in enumerate(rows) if any("Source" == c for c in r)), None)
if hi is None:
    print("no source table"); sys.exit()
h = rows[hi]; body = [r for r in rows[hi + 1:] if len(r) == len(h)]
src = h.index("Source")
col = next(i for i, c in enumerate(h) if c.startswith("Warp Stall Sampling (All"))
tot = sum(float(r[col] or 0) for r in body)
print(f"{len(body)} SASS lines, {tot:.0f} stall samples; the top 40:")
top = sorted(range(len(body)), key=lambda i: -float(body[i][col] or 0))[:40]
for i in sorted(top):
    print(f"{i:5d} {100 * float(body[i][col] or 0) / tot:5.1f}% {body[i][src][:90]}")
PY
rm -rf $D
