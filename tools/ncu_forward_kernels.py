#!/usr/bin/env python3
# Per-kernel summary of `ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum` over one forward
# (tf_bench_cuda --profile-forward; see docs/cuda-notes.md session 5): calls, total and mean time, bytes, and
# the first kernels in launch order.  usage: tools/ncu_forward_kernels.py fwd.csv
import csv,collections,sys
rows=list(csv.reader(open(sys.argv[1])))
hi=[i for i,r in enumerate(rows) if r and r[0]=='ID'][0]
h=rows[hi]; data=rows[hi+1:]
ki=h.index('Kernel Name'); mi=h.index('Metric Name'); vi=h.index('Metric Value'); ui=h.index('Metric Unit'); gi=h.index('Grid Size')
ids=collections.OrderedDict()
for r in data:
    ids.setdefault(r[0],{'name':r[ki],'grid':r[gi]})
    ids[r[0]][r[mi]]=(float(r[vi].replace(',','')),r[ui])
U={'ns':1e-3,'us':1,'usecond':1,'ms':1e3,'nsecond':1e-3,'byte':1,'Kbyte':1e3,'Mbyte':1e6,'Gbyte':1e9,'KB':1e3,'MB':1e6,'GB':1e9}
tot=0; byname=collections.defaultdict(lambda:[0,0,0])
seq=[]
for k,v in ids.items():
    t=v['gpu__time_duration.sum']; b=v['dram__bytes_read.sum']
    tu=t[0]*U[t[1]]; bb=b[0]*U[b[1]]
    n=v['name'].split('(')[0][-50:]+' g'+v['grid']
    byname[n][0]+=1; byname[n][1]+=tu; byname[n][2]+=bb; tot+=tu
    seq.append((n,tu,bb))
print(len(ids),'kernels, total us %.1f'%tot)
for n,(c,t,b) in sorted(byname.items(),key=lambda x:-x[1][1]):
    print(f"{c:4d} {t:9.1f}us {t/c:7.2f}us/each {b/c/1e6:9.2f}MB/each {b/t/1e3 if t else 0:7.0f}GB/s  {n}")
print('first layer sequence:')
for n,t,b in seq[:14]: print(f"  {t:7.2f}us {b/1e6:8.2f}MB {n}")
