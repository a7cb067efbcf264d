"""Places a kernel's warp samples between its barriers: splits the SASS listing of an Nsight
Compute source page (the input of sass_stalls.py) at every block barrier, memory fence and
exit, and prints each stretch's share of the samples, the most times any of its instructions
ran (runs) and its most sampled instruction. A barrier's own waiting counts in the stretch it ends, so a stretch
that ends at a barrier and holds many samples is either long or waits there for slower warps.
Stretches under MIN percent (default 1) are folded into the next one.

Usage: python3 bench/gpu/sass_segments.py NCU_CSV_LOG [MIN]
"""
import sys

from sass_stalls import SAMPLES, number, read_samples

BOUNDARIES = ("BAR.SYNC", "ERRBAR", "EXIT")


def main():
    rows, total = read_samples(sys.argv[1])
    least = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    print(f"{'share':>6} {'cum':>6} {'rows':>11} {'runs':>7}  ends at | most sampled")
    start, cumulative, samples, runs, top = 0, 0.0, 0.0, 0.0, None
    for i, r in enumerate(rows):
        s = number(r[SAMPLES])
        samples += s
        runs = max(runs, number(r["Instructions Executed"]))
        if top is None or s > number(top[SAMPLES]):
            top = r
        source = r["Source"].strip()
        if not any(b in source for b in BOUNDARIES) and i + 1 < len(rows):
            continue
        if 100 * samples / total < least and i + 1 < len(rows):
            continue
        cumulative += samples
        print(f"{100 * samples / total:5.1f}% {100 * cumulative / total:5.1f}% "
              f"{start:5d}-{i:<5d} {runs:7.0f}  "
              f"{source[:32]:32} | {top['Source'].strip()[:40]}")
        start, samples, runs, top = i + 1, 0.0, 0.0, None


if __name__ == "__main__":
    main()
