#!/usr/bin/env python3
"""Summarize in-kernel marks from a -DBRASS_PROBE build (BRASS_PROBE_OUT=marks.csv).

Each kernel's marks are from its last launch (marks older than 50 us before t0 are
earlier launches' and skipped), i.e. the last layer of the last token, in
chain order q/k/v -> attention -> wo -> norm_router -> gate/up -> down. Times are us after
the first q/k/v block passed its PDL wait; per mark: the earliest block, the median, the
latest. Usage: cuda_probe_marks.py marks.csv
"""
import csv
import statistics
import sys

KERNELS = {3: "qkv", 6: "attention", 4: "wo (matvec_pre)", 0: "norm_router / wo_router", 1: "gate/up", 2: "down"}
MARKS = {
    3: ["start", "wait done", "x normed+quantized", "q/k/v stored", "(warp 0 dots)"],
    4: ["start", "wait done", "x quantized", "y stored"],
    0: ["start", "wait done", "logit+ticket (wo_router: sums added)", "last: logits read (wo_router: ticket)", "last: done"],
    1: ["start", "wait done", "ids read", "row pair summed", "ticket drawn", "last: group quantized"],
    2: ["start", "wait done", "act in smem", "out stored"],
    6: ["start", "wait done", "keys summed", "ticket drawn", "last: merged", "last: 1st loads"],
}


# cuda_probe.cuh's BRASS_PROBE_ENTRY: mark 6 holds the block's SM id + 1 (not a time), mark 7
# the time the block entered its kernel.
SM_MARK = 6
EARLIER_US = 50  # marks older than this before t0 are earlier launches'


def load_blocks(path):
    """The marks as {(kernel, mark): [(block, ns), ...]} and t0, the first q/k/v wait."""
    t = {}
    for r in csv.DictReader(open(path)):
        t.setdefault((int(r["kernel"]), int(r["mark"])), []).append((int(r["block"]), int(r["ns"])))
    if (3, 1) not in t:
        sys.exit("no q/k/v marks")
    return t, min(v for _, v in t[(3, 1)])


def load(path):
    """The marks as {(kernel, mark): [ns, one a block]} and t0, the first q/k/v wait."""
    tb, t0 = load_blocks(path)
    return {km: [v for _, v in bv] for km, bv in tb.items()}, t0


def this_launch_us(t, t0, k, m):
    """Mark m of kernel k in us after t0, for the blocks of the last launch only (marks
    only the last block writes keep older launches' values elsewhere)."""
    return [(v - t0) / 1e3 for v in t.get((k, m), []) if v - t0 > -EARLIER_US * 1e3]


def this_launch_by_block(tb, t0, k, m):
    """this_launch_us of load_blocks' marks, as {block: us}."""
    return {b: (v - t0) / 1e3 for b, v in tb.get((k, m), []) if v - t0 > -EARLIER_US * 1e3}


def main():
    t, t0 = load(sys.argv[1])
    vals = sorted({v for (_, m), vs in t.items() if m != SM_MARK for v in vs})
    steps = [b - a for a, b in zip(vals, vals[1:]) if b > a]
    print(f"timer: {len(vals)} distinct values, smallest step {min(steps) if steps else 0} ns")
    print(f"{'kernel':<16} {'mark':<20} {'blocks':>6} {'first':>8} {'median':>8} {'last':>8}")
    for k in [3, 6, 4, 0, 1, 2]:
        for m, name in enumerate(MARKS[k]):
            us = this_launch_us(t, t0, k, m)
            if not us:
                continue
            print(f"{KERNELS[k]:<16} {name:<20} {len(us):>6} {min(us):8.2f} {statistics.median(us):8.2f} {max(us):8.2f}")


if __name__ == "__main__":
    main()
