"""Summarises an ncu CSV log of gpu__time_duration.sum over a whole program (run_all.sh's
split-ragged step, on bench/peers/bin/peers_bench): every kernel by name, in order of first
launch, with its launch count and median and least duration, metaltopk's and the peers' alike.

Usage: kernel_durations.py NCU_CSV_LOG
"""
import csv
import sys


def main():
    rows = list(csv.reader(line for line in open(sys.argv[1]) if line.startswith('"')))
    head = rows[0]
    name_at, value_at = head.index("Kernel Name"), head.index("Metric Value")
    durations = {}
    for row in rows[1:]:
        name = row[name_at].split("(")[0][-60:]
        durations.setdefault(name, []).append(float(row[value_at].replace(",", "")))
    for name, ns in durations.items():
        ns.sort()
        print(f"{name:<60} launches {len(ns):4d}  median {ns[len(ns) // 2]:9.0f} ns"
              f"  least {ns[0]:9.0f} ns")


if __name__ == "__main__":
    main()
