#!/usr/bin/env python3
"""Summarize norm_router_rows' in-kernel marks (kernel 7 of a -DBRASS_PROBE build's
BRASS_PROBE_OUT csv): the batched MoE prefix of the last launch (the last layer of the
last step). Times in us after the first block passed its PDL wait; per mark the earliest
block, the median and the latest. Marks 4 (a token's last block) and 5 (the launch's last
block) are written by few blocks: values from older launches are skipped.
With the wide kernel's marks in the same file, when the wo call before it ended.
Usage: cuda_rows_marks.py marks.csv
"""
import collections
import csv
import statistics
import sys

NAMES = ["start", "wait done", "rows in smem, normed", "logits + ticket", "last: token written",
         "last of all: grouped"]


def main():
    blocks = collections.defaultdict(dict)
    wide = collections.defaultdict(dict)  # the wide mat-mul's last split call (wo, just before)
    for r in csv.DictReader(open(sys.argv[1])):
        if int(r["kernel"]) == 7:
            blocks[int(r["block"])][int(r["mark"])] = int(r["ns"])
        elif int(r["kernel"]) == 5:
            wide[int(r["block"])][int(r["mark"])] = int(r["ns"])
    waits = [b[1] for b in blocks.values() if 1 in b]
    if not waits:
        sys.exit("no norm_router_rows marks")
    latest = max(waits)
    live = {k: b for k, b in blocks.items() if 1 in b and latest - b[1] < 20e3}
    t0 = min(b[1] for b in live.values())
    print(f"norm_router_rows: {len(live)} blocks")
    ends = [b[5] for b in wide.values() if 5 in b and abs(b[5] - t0) < 100e3]
    if ends:
        print(f"wide kernel (wo) blocks ended: first {(min(ends) - t0) / 1e3:.2f}, last {(max(ends) - t0) / 1e3:.2f}")
    print(f"{'mark':<24} {'blocks':>6} {'first':>8} {'median':>8} {'last':>8}")
    for m, name in enumerate(NAMES):
        us = [(b[m] - t0) / 1e3 for b in live.values() if m in b and b[m] - t0 > -50e3]
        if us:
            print(f"{name:<24} {len(us):>6} {min(us):8.2f} {statistics.median(us):8.2f} {max(us):8.2f}")
    for a, b, name in [(0, 1, "start->wait"), (1, 2, "wait->rows"), (2, 3, "rows->ticket"), (3, 4, "last: tail")]:
        d = [(x[b] - x[a]) / 1e3 for x in live.values() if a in x and b in x and x[b] - t0 > -50e3]
        if d:
            print(f"  {name:<22} {min(d):8.2f} {statistics.median(d):8.2f} {max(d):8.2f}")


if __name__ == "__main__":
    main()
