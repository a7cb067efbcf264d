"""Summarises an Nsight Compute source page (`ncu --section SourceCounters --page source
--print-source sass --csv`, run_all.sh's ncu-source step): where a kernel's warps were sampled,
by stall reason and by instruction, so a kernel's time can be placed without reading the
whole listing.

Usage: python3 bench/gpu/sass_stalls.py NCU_CSV_LOG [TOP]
"""
import csv
import io
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path):
    lines = open(path).read().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"Address"'))
    return list(csv.DictReader(io.StringIO("\n".join(lines[header:]))))


def read_samples(path):
    """The listing's rows and their warp samples in all; exits where there are none."""
    rows = read_rows(path)
    total = sum(number(r[SAMPLES]) for r in rows)
    if total == 0:
        sys.exit("no warp samples in " + path)
    return rows, total


def main():
    rows, total = read_samples(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    by_reason = sorted(((sum(number(r[c]) for r in rows), c[len("stall_"):]) for c in reasons),
                       reverse=True)
    print(f"{len(rows)} instructions, {total:.0f} warp samples")
    print("by reason: " + ", ".join(f"{name} {100 * s / total:.1f}%" for s, name in by_reason
                                    if s > 0.01 * total))
    print(f"{'share':>6} {'executed':>9} {'threads':>7}  instruction (top reasons)")
    for r in sorted(rows, key=lambda r: -number(r[SAMPLES]))[:top]:
        share = 100 * number(r[SAMPLES]) / total
        main_reasons = sorted(((number(r[c]), c[len("stall_"):]) for c in reasons
                               if number(r[c]) > 0), reverse=True)[:2]
        listed = ", ".join(f"{name} {s:.0f}" for s, name in main_reasons)
        print(f"{share:5.1f}% {r['Instructions Executed']:>9} {r['Avg. Threads Executed']:>7}  "
              f"{r['Source'].strip()[:56]:56} ({listed})")


if __name__ == "__main__":
    main()
