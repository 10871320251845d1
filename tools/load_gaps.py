#!/usr/bin/env python3
"""Where a tf-loadgen level's ITL tail comes from: reads its --json report (every gap per request) and prints, per
level, the gaps above a threshold (ms; default 1.3x the p50) by gap index and by arrival time, and the largest.
    python3 tools/load_gaps.py load.json [threshold_ms]"""
import json, sys, collections
d = json.load(open(sys.argv[1]))
for li, L in enumerate(d['levels']):
    reqs = L['per_request']
    allg = sorted(g for r in reqs for g in r.get('itl_ms', []))
    if not allg: continue
    p50 = allg[len(allg)//2]; p99 = allg[int(0.99*(len(allg)-1))]
    thr = float(sys.argv[2]) if len(sys.argv) > 2 else 1.3 * p50
    print(f"level {li} clients {L['clients']}: gaps {len(allg)} p50 {p50} p99 {p99} tok/s {L['output_tokens_per_s']:.0f} slow(>{thr:.1f}) {sum(g>thr for g in allg)}")
    t0 = min(r['start_s'] for r in reqs)
    byidx = collections.Counter(); events = collections.Counter()
    for r in reqs:
        t = r['start_s'] + r['ttft_ms']/1e3
        for i, g in enumerate(r.get('itl_ms', [])):
            t += g/1e3
            if g > thr:
                byidx[i] += 1; events[round(t - t0, 2)] += 1
    print("  slow by gap index:", sorted(byidx.items())[:40])
    print("  slow by time (s, count, top 30):", sorted(events.items(), key=lambda x: -x[1])[:30])
    print("  top gaps:", allg[-12:])
