#!/usr/bin/env python3
"""Warp-stall samples of one kernel by source line, from ncu's SASS source page (docs/cuda-notes.md
"Session 23"). ncu's `--page source --print-source cuda` printed no metrics for the one-kernel step, so the
SASS csv (`ncu -i R.ncu-rep --page source --print-source sass --csv > R.csv`) is mapped to lines by
instruction offset with the line table nvdisasm prints for the same cubin:

  cuobjdump -xelf decode_step.sm_90a.cubin build-cuda/bench/cuda/tf_bench_cuda
  nvdisasm -gi -c decode_step.sm_90a.cubin > step.sass
  tools/ncu_step_lines.py step.sass '_ZN2tf4cuda4step18decode_step_kernelILi0ELb0EEEvNS1_6ParamsE' R.csv

Rows: the kernel-level call line (the outermost frame in FILE, default decode_step_kernel.cuh) with its
share of the samples, instructions executed and top stall reasons. The binary must be the profiled one.
"""
import collections
import csv
import re
import sys


def line_table(sass, fn):
    lines = open(sass).read().split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(".text." + fn + ":"))
    cur, offs = None, {}
    for l in lines[start + 1:]:
        if l.startswith(".text."):
            break
        m = re.match(r'\s*//## File "([^"]+)", line (\d+)(.*)', l)
        if m:
            cur = [(m.group(1).split("/")[-1], int(m.group(2)))]
            cur += [(f.split("/")[-1], int(n)) for f, n in re.findall(r'inlined at "([^"]+)", line (\d+)', m.group(3))]
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", l)
        if m:
            offs[int(m.group(1), 16)] = (cur, m.group(2).split()[0] if m.group(2) else "")
    return offs


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    sass, fn, prof = sys.argv[1:4]
    src_file = sys.argv[4] if len(sys.argv) > 4 else "decode_step_kernel.cuh"
    offs = line_table(sass, fn)
    rows = list(csv.reader(open(prof)))
    hdr, data = rows[1], rows[2:]
    ix = {h: i for i, h in enumerate(hdr)}
    num = lambda s: 0.0 if s in ("-", "") else float(s.replace(",", ""))
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(num(r[ix["# Samples"]]) for r in data) or 1.0
    agg = collections.defaultdict(lambda: [0.0, 0.0, collections.Counter()])
    mismatched = 0
    for i, r in enumerate(data):
        chain, op = offs.get(i * 16, (None, ""))
        words = r[ix["Source"]].split()
        if words and op and words[0] != op and not words[0].startswith("@"):
            mismatched += 1
        frames = [n for f, n in (chain or []) if f == src_file]
        key = frames[-1] if frames else -1
        a = agg[key]
        a[0] += num(r[ix["# Samples"]])
        a[1] += num(r[ix["Instructions Executed"]])
        for h in stalls:
            a[2][h[6:]] += num(r[ix[h]])
    print(f"{len(data)} instructions, {int(total)} samples, {mismatched} opcodes not matching the cubin")
    for key, (s, ex, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:40]:
        top = ", ".join(f"{k} {int(v)}" for k, v in c.most_common(3))
        print(f"{src_file}:{key:<6} {100 * s / total:5.1f}%  exec {int(ex):>11}  {top}")


if __name__ == "__main__":
    main()
