#!/usr/bin/env python3
"""The README's sampling table from a peers sampling JSON (peers_bench's sampling family):
metaltopk against the fastest FlashInfer kernel of each case, by operation, and the cases under a
bound.

    python3 bench/peers/sampling_summary.py bench/results/peers_sampling_flashinfer_h200.json [BOUND]

x = the fastest peer's time / metaltopk's (graph replay); BOUND (default 1.2) lists the cases
below it."""
import json
import math
import sys


def main():
    rows = json.load(open(sys.argv[1]))
    bound = float(sys.argv[2]) if len(sys.argv) > 2 else 1.2
    fastest = {}  # case -> (peer time, metaltopk time)
    for row in rows:
        if row.get("peer_us") is None or row.get("metaltopk_us") is None:
            continue
        if not row["peer"].startswith("flashinfer"):
            continue
        case = (row["op"], row["shape"], row["dtype"], row["params"])
        if case not in fastest or row["peer_us"] < fastest[case][0]:
            fastest[case] = (row["peer_us"], row["metaltopk_us"])
    ratios = {case: peer / mine for case, (peer, mine) in fastest.items()}
    mismatches = [r for r in rows if not str(r.get("metaltopk_status", "")).startswith("match")]

    def geomean(values):
        return math.exp(sum(math.log(v) for v in values) / len(values))

    print(f"{len(ratios)} cases: geometric mean {geomean(ratios.values()):.2f}x, "
          f"{sum(v >= 1 for v in ratios.values())} at 1x or more, "
          f"{sum(v >= bound for v in ratios.values())} at {bound}x or more; "
          f"{len(rows) - len(mismatches)} of {len(rows)} rows match the CPU backend")
    print("\n| operation | cases | geometric mean x | lowest | highest |\n|---|---|---|---|---|")
    for op in sorted({case[0] for case in ratios}, key=lambda o: -geomean(
            [v for c, v in ratios.items() if c[0] == o])):
        values = [v for case, v in ratios.items() if case[0] == op]
        print(f"| {op} | {len(values)} | {geomean(values):.2f} | {min(values):.2f} | "
              f"{max(values):.2f} |")
    print(f"\nunder {bound}x:")
    for case, v in sorted(ratios.items(), key=lambda item: item[1]):
        if v < bound:
            peer, mine = fastest[case]
            print(f"  {v:.2f}x  {' '.join(case)}: {mine:.1f} us, fastest peer {peer:.1f}")


if __name__ == "__main__":
    main()
