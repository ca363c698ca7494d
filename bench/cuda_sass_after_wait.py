#!/usr/bin/env python3
"""The loads, branches and barriers a kernel issues right after its PDL wait, from SASS.

Usage: cuobjdump -sass <binary> | python3 bench/cuda_sass_after_wait.py <name substring>...

For each function whose mangled name contains one of the substrings, prints the LDG / LDS /
BRA / BAR lines from ACQBULK (griddepcontrol.wait) to the first BAR.SYNC after it (at most
40 lines). A branch between two loads of one row means each waits for the one before: the
latency chain of a small kernel (session 25: norm_router's residual loads, one L2 round
trip apiece, until they were written unconditionally).
"""
import re
import sys


def main() -> None:
    keys = sys.argv[1:]
    if not keys:
        sys.exit(__doc__)
    inside = after = False
    shown = 0
    for line in sys.stdin:
        if "Function :" in line:
            inside = any(k in line for k in keys)
            after = False
            if inside:
                print("fn", line.split("Function :")[1].strip()[:140])
            continue
        if not inside:
            continue
        if "ACQBULK" in line:
            after, shown = True, 0
            print("    ACQBULK")
            continue
        if after and re.search(r"\b(LDG|LDS|BRA|BAR)\b", line):
            print("   ", re.sub(r"\s+", " ", line.strip().split(";")[0]))
            shown += 1
            if "BAR.SYNC" in line or shown >= 40:
                after = inside = False


if __name__ == "__main__":
    main()
