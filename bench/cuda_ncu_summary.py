#!/usr/bin/env python3
"""Summarize an `ncu --csv --print-units base` run with gpu__time_duration.sum and
dram__bytes_read.sum: per kernel name, the launch count, total microseconds, total
DRAM bytes read and the achieved GB/s (one decode token when the launch window covers
one token). --by-grid: per kernel name and grid size (the dense calls of one name: q / k /
v, wo and the output head)."""
import csv, sys, collections

rows = list(csv.reader(l for l in open(sys.argv[1]) if l.startswith('"')))
hdr = rows[0]
ki, mi, vi = hdr.index("Kernel Name"), hdr.index("Metric Name"), hdr.index("Metric Value")
idx = hdr.index("ID")
gi = hdr.index("Grid Size") if "--by-grid" in sys.argv and "Grid Size" in hdr else None
per = collections.defaultdict(dict)
names = {}
for r in rows[1:]:
    try:
        per[r[idx]][r[mi]] = float(r[vi].replace(",", ""))
    except ValueError:
        continue
    names[r[idx]] = (r[ki].replace("(anonymous namespace)::", "").replace("<unnamed>::", "").replace("brass::backend::cuda::", "")
                      .replace("void ", "").split("(")[0].split("<")[0])[:60 if gi is None else 44]
    if gi is not None:
        names[r[idx]] += " " + r[gi].replace(" ", "")
agg = collections.defaultdict(lambda: [0, 0.0, 0.0])
for i, m in per.items():
    a = agg[names[i]]
    a[0] += 1
    a[1] += m.get("gpu__time_duration.sum", 0) / 1e3
    a[2] += m.get("dram__bytes_read.sum", 0)
tot = sum(a[1] for a in agg.values())
print(f"{'kernel':60s} {'n':>5s} {'us':>9s} {'%':>6s} {'MB':>9s} {'GB/s':>7s}")
for n, a in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"{n:60s} {a[0]:5d} {a[1]:9.1f} {100*a[1]/tot:6.1f} {a[2]/1e6:9.2f} {a[2]/1e3/max(a[1],1e-9):7.0f}")
print(f"{'total':60s} {sum(a[0] for a in agg.values()):5d} {tot:9.1f}")
