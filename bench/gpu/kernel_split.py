"""Summarises an ncu log of per-kernel metrics (run_all.sh's split step): the kernels of the last
top-k call, each with its duration and the share of the elapsed cycles its SMs were active.

Usage: kernel_split.py NCU_LOG
"""
import re
import sys

KERNEL = re.compile(r"^\s+(?:void )?(?:mtk::cuda::)?(\w+)(?:<[^(]*)?\(.*\) \((\d+), \d+, \d+\)x\((\d+), \d+, \d+\)")
METRIC = re.compile(r"^\s+(gpu__time_duration\.sum|sm__cycles_active\.avg|gpc__cycles_elapsed\.max)"
                    r"\s+(\S+)\s+([\d,.]+)")
TO_US = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "nsecond": 1e-3, "msecond": 1e3}


def parse(lines):
    kernels = []
    for line in lines:
        m = KERNEL.match(line)
        if m:
            kernels.append({"name": m.group(1), "grid": int(m.group(2)), "block": int(m.group(3))})
            continue
        m = METRIC.match(line)
        if m and kernels:
            value = float(m.group(3).replace(",", ""))
            if m.group(1) == "gpu__time_duration.sum":
                value *= TO_US.get(m.group(2), float("nan"))
            kernels[-1][m.group(1)] = value
    return kernels


def last_call(kernels):
    """The last period of the launch sequence: one call's kernels."""
    names = [k["name"] for k in kernels]
    for period in range(1, len(names) // 2 + 1):
        if names[-period:] == names[-2 * period:-period]:
            return kernels[-period:]
    return kernels


def main():
    kernels = last_call(parse(open(sys.argv[1])))
    total = 0.0
    print(f"{'kernel':28} {'grid':>6} {'block':>5} {'us':>8} {'SM active':>9}")
    for k in kernels:
        us = k.get("gpu__time_duration.sum", float("nan"))
        total += us
        active = k.get("sm__cycles_active.avg", 0) / max(k.get("gpc__cycles_elapsed.max", 1), 1)
        print(f"{k['name']:28} {k['grid']:6d} {k['block']:5d} {us:8.2f} {100 * active:8.1f}%")
    print(f"{'sum':28} {'':6} {'':5} {total:8.2f}")


if __name__ == "__main__":
    main()
