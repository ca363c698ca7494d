#!/usr/bin/env python3
"""Where the one-token MoE's blocks ran, from a -DBRASS_PROBE build's marks (marks 6 and 7
of each block: its SM id + 1 and the time it entered; BRASS_PROBE_ENTRY in cuda_probe.cuh).

Usage: cuda_probe_sm.py marks.csv [sms]   (sms: how many SMs to list block by block, 2)
Prints, for the last layer of the last token (us after the first q/k/v wait, as
cuda_probe_marks.py):
- gate/up's blocks an SM and the most at once on one SM;
- for each down block, how many gate/up blocks were still on its SM when it entered;
- gate/up's row pairs summed per 0.5 us (a block's 8 rows' bytes at its 'summed' mark) as
  TB/s: where the DRAM idles between waves;
- the first SMs' gate/up blocks in order: entered, wait done, ids read, summed.
"""
import collections
import sys

from cuda_probe_marks import SM_MARK, load_blocks, this_launch_by_block


def main():
    t, t0 = load_blocks(sys.argv[1])
    if (1, SM_MARK) not in t:
        sys.exit("no SM marks (a probe build from before BRASS_PROBE_ENTRY?)")

    def us(k, m):
        return this_launch_by_block(t, t0, k, m)

    def sms(k):
        return {b: v - 1 for b, v in t.get((k, SM_MARK), [])}

    gin, gwait, gids, gsum, gtick = us(1, SM_MARK + 1), us(1, 1), us(1, 2), us(1, 3), us(1, 4)
    gsm = sms(1)
    gend = {b: max(gtick.get(b, gsum.get(b, 0)), gsum.get(b, 0)) for b in gin}
    per = collections.defaultdict(list)
    for b in gin:
        per[gsm[b]].append(b)

    def most_at_once(bl):
        ev = sorted([(gin[b], 1) for b in bl] + [(gend[b], -1) for b in bl])
        c = m = 0
        for _, d in ev:
            c += d
            m = max(m, c)
        return m

    print("gate/up blocks an SM:", sorted(collections.Counter(len(v) for v in per.values()).items()))
    print("most at once on an SM:", sorted(collections.Counter(most_at_once(v) for v in per.values()).items()))
    din, dsm = us(2, SM_MARK + 1), sms(2)
    alive = collections.Counter(
        sum(1 for g in per[dsm[b]] if gin[g] <= din[b] < gend[g]) for b in din if b in dsm)
    if din:
        ds = sorted(din.values())
        print(f"down entered {ds[0]:.2f} .. {ds[-1]:.2f} (median {ds[len(ds) // 2]:.2f}); gate/up blocks on its SM"
              f" then: {sorted(alive.items())}")
    row_bytes = 8 * (1440 + 45)  # a block's 4 gate + 4 up rows of gpt-oss (codes + scales)
    h = collections.Counter(int(v * 2) for v in gsum.values())
    if h:
        print("bin(us)  summed TB/s  blocks entered / summed")
        for k in range(min(h), max(h) + 1):
            e = sum(1 for v in gin.values() if k <= v * 2 < k + 1)
            print(f"{k / 2:6.1f}  {h[k] * row_bytes / 0.5e-6 / 1e12:5.2f}  {e:5d} {h[k]:5d}")
    for s in sorted(per)[: int(sys.argv[2]) if len(sys.argv) > 2 else 2]:
        print(f"SM {s}")
        for b in sorted(per[s], key=lambda b: gin[b]):
            print(f"  block {b:5d} entered {gin[b]:6.2f} wait {gwait.get(b, 0):6.2f} ids {gids.get(b, 0):6.2f}"
                  f" summed {gsum.get(b, 0):6.2f}")


if __name__ == "__main__":
    main()
