#!/usr/bin/env python3
"""Per-microsecond counts of the one-token MoE's blocks from a probe build's marks.csv
(BRASS_PROBE_OUT; cuda_probe.cuh records up to kProbeBlocks blocks a kernel, enough for all
of gpt-oss-20b's 2,880 gate/up blocks), in us after the first q/k/v block passed its PDL
wait (the last layer of the last token, as bench/cuda_probe_marks.py):

  gate/up: blocks started, ids read (rows asked for), row pairs summed (and the GB/s that
  many 12 KB row pairs would be in that microsecond), tickets drawn (the block leaves);
  down: blocks started, outputs stored.

What it showed (session 49, H200): gate/up runs as ~3 waves. A wave's blocks ask for their
rows together, get them in one burst and leave together; the next wave's blocks then start,
and ~2 us pass in which few row pairs complete. Usage: cuda_probe_timeline.py marks.csv
"""
import collections
import math
import sys

from cuda_probe_marks import load, this_launch_us


def main():
    t, t0 = load(sys.argv[1])
    cols = [("gu start", 1, 0), ("gu ids", 1, 2), ("gu summed", 1, 3), ("gu ticket", 1, 4), ("dn start", 2, 0),
            ("dn stored", 2, 3)]
    series = {name: this_launch_us(t, t0, k, m) for name, k, m in cols}
    if not series["gu summed"] or not series["dn stored"]:
        sys.exit("no gate/up or down marks")
    print(f"gate/up blocks marked: {len(series['gu summed'])}, down: {len(series['dn stored'])}")
    hist = {name: collections.Counter(math.floor(x) for x in v) for name, v in series.items()}
    lo, hi = int(min(series["gu ids"])) - 1, int(max(series["dn stored"])) + 1
    print(f"{'us':>4} " + " ".join(f"{name:>9}" for name, _, _ in cols) + f" {'GB/s':>6}")
    for b in range(lo, hi + 1):
        row = " ".join(f"{hist[name][b]:9d}" for name, _, _ in cols)
        print(f"{b:4d} {row} {hist['gu summed'][b] * 12288 / 1e3:6.0f}")


if __name__ == "__main__":
    main()
