"""CPU benchmark: metaltopk's CPU backend against torch.topk and numpy, in one process.

Runs the CPU shapes below (MoE routing, LLM sampling, large k, huge selects; bench/CPU_NOTES.md)
through `metaltopk.topk(..., backend="cpu")`, `torch.topk` (2 threads) and numpy (argpartition,
then a stable sort of the k), and prints the median times, the ratios and the geometric-mean speedup
over torch. Before timing a shape it checks that metaltopk's values equal torch's, so a wrong
answer is never timed. numpy has no bfloat16 ordering, so for bf16 shapes the numpy anchor runs
on the float32 upcast (marked "*"). The results also go to a JSON file (default
bench/results/cpu.json) with the run's date, host and library versions.

Usage: python3 bench/bench_cpu.py [--seconds S] [--threads T] [--json PATH]
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

import metaltopk

# (family, rows, n, k, dtype, dim); dim 0 means the input is (n, rows) and the top-k runs down
# its columns.
SHAPES = [
    ("MoE", 4096, 256, 8, "float32", -1),
    ("MoE", 4096, 256, 8, "bfloat16", -1),
    ("MoE", 16384, 128, 8, "float32", -1),
    ("MoE, experts on dim 0", 4096, 256, 8, "float32", 0),
    ("sampling", 64, 151936, 50, "float32", -1),
    ("sampling", 8, 151936, 1024, "float32", -1),
    # Large k on long batched rows (issue #32), the GPU's large-k shapes scaled to two cores.
    ("large k", 8, 262144, 2048, "float32", -1),
    ("large k", 8, 262144, 4096, "float32", -1),
    ("large k", 64, 131072, 2048, "float32", -1),
    ("select", 1, 2**24, 100, "float32", -1),
    ("select", 1, 2**22, 10000, "float32", -1),
]

RESULTS_DIR = Path(__file__).resolve().parent / "results"

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
NUMPY_DTYPES = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def median_seconds(fn, budget_s, min_runs=5, max_runs=200):
    """Median wall time of fn() over repeated runs after one warm-up, within about budget_s."""
    return interleaved_medians([fn], budget_s, min_runs, max_runs)[0]


def interleaved_medians(fns, budget_s, min_runs=5, max_runs=200):
    """Median wall time of each fn, timed in rounds that run every fn once, so that load from
    other processes on the machine falls on all of them alike. One warm-up round first."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    deadline = time.perf_counter() + budget_s
    while len(times[0]) < min_runs or (len(times[0]) < max_runs and
                                       time.perf_counter() < deadline):
        for fn, samples in zip(fns, times):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    return [statistics.median(samples) for samples in times]


def copy_bandwidth():
    """Host copy bandwidth in bytes/s (bytes read + written), from numpy copies of 256 MiB."""
    src = np.ones(2**26, dtype=np.float32)
    dst = np.empty_like(src)
    seconds = median_seconds(lambda: np.copyto(dst, src), 1.0, max_runs=20)
    return 2 * src.nbytes / seconds


def numpy_topk(x, k, axis):
    """The numpy anchor: argpartition for the k largest, then a stable descending sort of them."""
    part = np.argpartition(x, x.shape[axis] - k, axis=axis)
    part = np.take(part, np.arange(x.shape[axis] - k, x.shape[axis]), axis=axis)
    vals = np.take_along_axis(x, part, axis=axis)
    order = np.argsort(-vals, axis=axis, kind="stable")
    return np.take_along_axis(vals, order, axis=axis), np.take_along_axis(part, order, axis=axis)


def make_input(rows, n, dtype, dim, rng):
    shape = (n, rows) if dim == 0 else (rows, n)
    base = rng.standard_normal(shape, dtype=np.float32)
    x = base.astype(NUMPY_DTYPES[dtype])
    # torch rounds float32 to bfloat16 the same way ml_dtypes does (to nearest even); the bit
    # comparison below makes sure both libraries see identical inputs.
    t = torch.from_numpy(base).to(TORCH_DTYPES[dtype])
    if dtype == "bfloat16":
        if not np.array_equal(t.view(torch.int16).numpy(), x.view(np.int16)):
            raise SystemExit("bench: torch and ml_dtypes round float32 to bfloat16 differently")
        upcast = x.astype(np.float32)
    else:
        upcast = x
    return x, t, upcast


def cpu_model():
    """The CPU's model name, where the platform says it."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_meta(threads):
    """What a results file needs to be read later: when, where, and with which versions."""
    return {
        "time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "host": {"cpu": cpu_model(), "logical_cpus": os.cpu_count(),
                 "system": f"{platform.system()} {platform.release()}",
                 "machine": platform.machine(),
                 # other processes' load at the time of the call: 1, 5 and 15 minute averages
                 "load_average": [round(x, 2) for x in os.getloadavg()]},
        "python": platform.python_version(),
        "metaltopk": metaltopk.__version__,
        "torch": torch.__version__,
        "torch_threads": threads,
        "numpy": np.__version__,
    }


def write_json(path, document):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1) + "\n")
    print(f"results written to {path}")


def as_float32(values):
    return np.asarray(values).astype(np.float32)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0,
                        help="timing budget per shape and library")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads (metaltopk uses one per hardware thread)")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "cpu.json",
                        help="where the results go (default: %(default)s)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    meta = run_meta(torch.get_num_threads())  # the date and load average of the run's start
    rng = np.random.default_rng(2026)
    bandwidth = copy_bandwidth()
    print(f"metaltopk {metaltopk.__version__} ({metaltopk.library_path}), "
          f"torch {torch.__version__} with {torch.get_num_threads()} threads, "
          f"numpy {np.__version__}")
    print(f"host copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write, numpy, one thread); "
          f"floor = input and output bytes / that bandwidth")
    header = (f"{'family':22} {'shape':>13} {'k':>5} {'dtype':>8} {'dim':>3} | {'floor ms':>8} "
              f"{'mtk ms':>8} {'torch ms':>8} {'numpy ms':>9} | {'vs torch':>8} {'vs numpy':>8} "
              f"{'floor/mtk':>9}")
    print(header)
    print("-" * len(header))
    speedups, failures, rows_out = [], [], []
    for family, rows, n, k, dtype, dim in SHAPES:
        x, t, upcast = make_input(rows, n, dtype, dim, rng)
        ours_values, ours_indices = metaltopk.topk(x, k, dim, backend="cpu")
        torch_values, _ = torch.topk(t, k, dim)
        if not np.array_equal(as_float32(ours_values), torch_values.float().numpy()):
            failures.append(f"{family} {rows}x{n} {dtype}: values differ from torch.topk")
            continue
        if not np.array_equal(np.take_along_axis(x, ours_indices, axis=dim).view(np.uint8),
                              np.asarray(ours_values).view(np.uint8)):
            failures.append(f"{family} {rows}x{n} {dtype}: indices do not point at the values")
            continue
        ours, theirs, numpy_s = interleaved_medians(
            [lambda: metaltopk.topk(x, k, dim, backend="cpu"), lambda: torch.topk(t, k, dim),
             lambda: numpy_topk(upcast, k, dim)], 3 * args.seconds)
        itemsize = x.dtype.itemsize
        floor = (rows * n * itemsize + rows * k * (itemsize + 8)) / bandwidth
        speedups.append(theirs / ours)
        rows_out.append({"family": family, "rows": rows, "n": n, "k": k, "dtype": dtype,
                         "dim": dim, "floor_ms": floor * 1e3, "metaltopk_ms": ours * 1e3,
                         "torch_ms": theirs * 1e3, "numpy_ms": numpy_s * 1e3,
                         "numpy_on_float32_upcast": dtype == "bfloat16",
                         "speedup_vs_torch": theirs / ours, "speedup_vs_numpy": numpy_s / ours})
        shape = f"{n}x{rows}" if dim == 0 else f"{rows}x{n}"
        star = "*" if dtype == "bfloat16" else " "
        print(f"{family:22} {shape:>13} {k:>5} {dtype:>8} {dim:>3} | {floor * 1e3:8.3f} "
              f"{ours * 1e3:8.3f} {theirs * 1e3:8.3f} {numpy_s * 1e3:8.3f}{star} | "
              f"{theirs / ours:7.2f}x {numpy_s / ours:7.2f}x {floor / ours:8.0%}")
    geomean = None
    if speedups:
        geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        print(f"geometric-mean speedup over torch.topk: {geomean:.2f}x over {len(speedups)} shapes "
              f"(target >= 2x, and > 1x on each)")
        print("* numpy anchor on the float32 upcast of the bfloat16 input")
    for failure in failures:
        print("WRONG RESULT:", failure, file=sys.stderr)
    meta["host"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    meta["host_copy_gb_per_s"] = bandwidth / 1e9
    write_json(args.json, {"meta": meta, "results": rows_out,
                           "geomean_speedup_vs_torch": geomean, "failures": failures})
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
