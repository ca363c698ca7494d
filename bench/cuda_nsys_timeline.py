#!/usr/bin/env python3
"""Per-kernel share of a decode token from an nsys GPU trace (graph nodes traced).

Usage: cuda_nsys_timeline.py TRACE.csv [--tokens N] [--marker REGEX] [--parity]
TRACE.csv: `nsys stats --report cuda_gpu_trace --format csv` of a run profiled with
`nsys profile -t cuda --cuda-graph-trace=node`. Kernels are taken in start order; a token
ends at each kernel whose name matches the marker (default: the greedy pick, the argmax
kernel or the output head that picks in the same launch, head_*_kernel<true, ...>). For the last N
tokens it prints, per kernel name: launches per token, mean duration, and the mean
"increment" end(k) - end(k - 1): how much later the chain finishes because of kernel k
(with PDL the kernels overlap, so durations overstate and increments sum to the token
time), and the mean "lead" start(k) - end(k - 1) (negative: k started early).
--parity: a kernel launched more than once a token is split by its launch's parity
within the token ([even] / [odd]: gpt-oss's sliding and full attention layers).
--layers: then a table of the mean increment of each kernel launched once a layer, one
row a layer (its launch index within the token).
"""
import csv
import re
import sys
from collections import defaultdict


def short(name):
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"brass::backend::cuda::(\(anonymous namespace\)::)?", "", name)
    depth, out = 0, ""
    for ch in name:  # drop template arguments and parameter lists
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out += ch
    return out.strip() or name[:60]


def main():
    args = sys.argv[1:]
    path = args[0]
    n_tok = int(args[args.index("--tokens") + 1]) if "--tokens" in args else 16
    marker = args[args.index("--marker") + 1] if "--marker" in args else r"argmax|head_\w+_kernel<true"
    parity = "--parity" in args
    layers = "--layers" in args
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            name = r.get("Name", "")
            if "Start (ns)" not in r or not r.get("Duration (ns)") or "[CUDA" in name:
                continue  # memcpy / memset rows
            rows.append((int(r["Start (ns)"]), int(r["Duration (ns)"]), name))
    rows.sort()
    ends = [i for i, (_, _, n) in enumerate(rows) if re.search(marker, n)]
    if len(ends) < n_tok + 1:
        sys.exit(f"only {len(ends)} tokens (kernels named *{marker}*) in {path}")
    first, last = ends[-n_tok - 1] + 1, ends[-1]
    end_set = set(ends)
    inc, dur, lead, cnt = defaultdict(float), defaultdict(float), defaultdict(float), defaultdict(int)
    order = []
    seen = defaultdict(int)  # launches of a name so far in the current token
    by_layer = defaultdict(float)  # (short name, launch index) -> summed increment
    order_l = []
    for i in range(first, last + 1):
        s, d, n = rows[i]
        pe = rows[i - 1][0] + rows[i - 1][1]
        k = short(n)
        if i - 1 in end_set:
            seen.clear()
        j = seen[k]  # the launch's index within the token (a layer, for per-layer kernels)
        seen[k] += 1
        by_layer[(k, j)] += s + d - pe
        if k not in order_l:
            order_l.append(k)
        if parity:
            k += " [odd]" if j % 2 else " [even]"
        if k not in cnt:
            order.append(k)
        inc[k] += s + d - pe
        dur[k] += d
        lead[k] += s - pe
        cnt[k] += 1
    total = (rows[last][0] + rows[last][1] - rows[first - 1][0] - rows[first - 1][1]) / n_tok / 1e3
    print(f"{n_tok} tokens, {total:.1f} us per token ({1e6 / total:.1f} tok/s)")
    print(f"{'kernel':44s} {'per tok':>7s} {'dur us':>8s} {'incr us':>8s} {'lead us':>8s} {'incr/tok':>9s}")
    for k in sorted(order, key=lambda k: -inc[k]):
        c = cnt[k]
        print(f"{k[:44]:44s} {c / n_tok:7.1f} {dur[k] / c / 1e3:8.2f} {inc[k] / c / 1e3:8.2f} "
              f"{lead[k] / c / 1e3:8.2f} {inc[k] / n_tok / 1e3:9.1f}")
    if layers:
        names = [k for k in order_l if (k, 1) in by_layer]
        n_layer = 1 + max(j for _, j in by_layer)
        print("layer " + " ".join(f"{k[:12]:>12s}" for k in names))
        for j in range(n_layer):
            print(f"{j:5d} " + " ".join(f"{by_layer.get((k, j), 0) / n_tok / 1e3:12.2f}" for k in names))


if __name__ == "__main__":
    main()
