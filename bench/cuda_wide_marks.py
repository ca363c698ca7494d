#!/usr/bin/env python3
"""Summarize matmul_h16_wide_kernel's in-kernel marks (kernel 5 of a -DBRASS_PROBE build's
BRASS_PROBE_OUT csv): the last split call's blocks (q / k / v or wo). Times in us after the
first block started; per mark the earliest block, the median and the latest, then per-block
spans and how many blocks shared an SM. Usage: cuda_wide_marks.py marks.csv
"""
import collections
import csv
import statistics
import sys

NAMES = ["start", "wait done", "first chunk", "loop done", "partials ready", "end"]


def main():
    blocks = collections.defaultdict(dict)
    for r in csv.DictReader(open(sys.argv[1])):
        if int(r["kernel"]) == 5:
            blocks[int(r["block"])][int(r["mark"])] = int(r["ns"])
    # the last launch: blocks that started within 10 us of the latest start
    latest = max(b[0] for b in blocks.values() if 0 in b)
    live = {k: b for k, b in blocks.items() if 0 in b and latest - b[0] < 10e3 and all(m in b for m in range(6))}
    if not live:
        sys.exit("no wide-kernel marks")
    t0 = min(b[0] for b in live.values())
    print(f"blocks {len(live)}; SMs used {len({b.get(6, 0) for b in live.values()})}")
    print(f"{'mark':<16} {'first':>8} {'median':>8} {'last':>8}")
    for m, name in enumerate(NAMES):
        us = [(b[m] - t0) / 1e3 for b in live.values()]
        print(f"{name:<16} {min(us):8.2f} {statistics.median(us):8.2f} {max(us):8.2f}")
    print("per-block spans (us): min / median / max")
    for a, b, name in [(0, 1, "start->wait"), (1, 2, "wait->chunk 1"), (2, 3, "rest of loop"), (3, 4, "cluster sync"),
                       (4, 5, "sum + sync"), (0, 5, "whole block")]:
        d = [(x[b] - x[a]) / 1e3 for x in live.values()]
        print(f"  {name:<16} {min(d):8.2f} {statistics.median(d):8.2f} {max(d):8.2f}")
    per_sm = collections.Counter(b.get(6, 0) for b in live.values())
    print("blocks per SM:", dict(sorted(collections.Counter(per_sm.values()).items())))


if __name__ == "__main__":
    main()
