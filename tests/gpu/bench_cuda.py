"""metaltopk's CUDA backend against torch.topk on every GPU shape of BENCHMARKS.md, in one run.

For each shape: median CUDA-event time of single eager calls, and of calls replayed from a CUDA
graph (graph of `--graph-calls` calls, time per call), for torch.topk(sorted=True) and
metaltopk.topk with sorted=True and sorted=False. Reports achieved TB/s (the floor's byte
count over the time), the ratio to torch and to the floor (bytes / copy bandwidth, at least
2 us), the sorted/unsorted ratio, checks every result against torch, and saves JSON.

    python3 tests/gpu/bench_cuda.py --json bench.json [--only moe|sampling|select]
"""

import argparse
import json
import statistics
import sys
import time

import torch

import metaltopk

COPY_BANDWIDTH = 4.21e12  # bytes/s, device-to-device copy measured on the project's H200
LAUNCH_FLOOR = 2e-6

# (family, rows, n, k, dtype, dim) as in BENCHMARKS.md; dim 0 means the tensor is [n, rows].
SHAPES = [
    ("moe", 1, 256, 8, "bfloat16", -1),
    ("moe", 128, 256, 8, "bfloat16", -1),
    ("moe", 4096, 256, 8, "bfloat16", -1),
    ("moe", 4096, 256, 8, "float32", -1),
    ("moe", 16384, 256, 8, "bfloat16", -1),
    ("moe", 4096, 512, 10, "bfloat16", -1),
    ("moe", 4096, 128, 8, "bfloat16", -1),
    ("moe", 4096, 256, 8, "bfloat16", 0),
    ("sampling", 1, 151936, 50, "float32", -1),
    ("sampling", 1, 151936, 1024, "float32", -1),
    ("sampling", 64, 151936, 50, "float32", -1),
    ("sampling", 64, 151936, 50, "bfloat16", -1),
    ("sampling", 256, 151936, 50, "float32", -1),
    ("sampling", 256, 151936, 1024, "float32", -1),
    ("sampling", 256, 262144, 256, "float32", -1),
    ("select", 1, 2 ** 28, 100, "float32", -1),
    ("select", 1, 2 ** 28, 10000, "float32", -1),
    ("select", 1, 2 ** 26, 1000, "bfloat16", -1),
]


def floor_seconds(rows, n, k, itemsize):
    total = rows * n * itemsize + rows * k * (itemsize + 8)
    return total, max(total / COPY_BANDWIDTH, LAUNCH_FLOOR)


def median_event_time(fn, iters):
    """Median of per-call CUDA-event times (seconds) after a warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def median_graph_time(fn, calls, replays):
    """Median per-call time of `calls` captured calls replayed `replays` times."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()  # plans and scratch exist before capture
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    # Capture on the warmed stream: metaltopk's own scratch is per stream and cannot grow
    # during capture.
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / calls)
    del graph
    return statistics.median(times)


def copy_bandwidth():
    src = torch.empty(2 ** 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = median_event_time(lambda: dst.copy_(src), 20)
    return 2 * src.numel() / t


def check(x, k, dim, values, indices):
    ref_values, _ = torch.topk(x, k, dim=dim)
    assert torch.equal(values, ref_values), "values differ from torch.topk"
    assert torch.equal(torch.gather(x, dim, indices), values), "indices do not gather the values"


def run_shape(family, rows, n, k, dtype_name, dim, args):
    dtype = getattr(torch, dtype_name)
    g = torch.Generator(device="cuda").manual_seed(rows * 31 + n + k)
    shape = (n, rows) if dim == 0 else (rows, n)
    x = torch.randn(shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)
    big = rows * n >= 2 ** 26
    iters = 10 if big else args.iters
    calls = 2 if big else args.graph_calls
    replays = 5 if big else args.replays

    values, indices = metaltopk.topk(x, k, dim=dim)
    check(x, k, dim, values, indices)

    result = {"family": family, "rows": rows, "n": n, "k": k, "dtype": dtype_name, "dim": dim}
    total_bytes, floor = floor_seconds(rows, n, k, x.element_size())
    result["bytes"] = total_bytes
    result["floor_us"] = floor * 1e6
    runs = {
        "torch": lambda: torch.topk(x, k, dim=dim),
        "mtk_sorted": lambda: metaltopk.topk(x, k, dim=dim, sorted=True),
        "mtk_unsorted": lambda: metaltopk.topk(x, k, dim=dim, sorted=False),
    }
    for name, fn in runs.items():
        result[f"{name}_us"] = median_event_time(fn, iters) * 1e6
        result[f"{name}_graph_us"] = median_graph_time(fn, calls, replays) * 1e6
    for mode in ("", "_graph"):
        mtk = result[f"mtk_sorted{mode}_us"]
        result[f"speedup_vs_torch{mode}"] = result[f"torch{mode}_us"] / mtk
        result[f"x_floor{mode}"] = mtk / result["floor_us"]
        result[f"tb_per_s{mode}"] = total_bytes / (mtk * 1e-6) / 1e12
        result[f"sorted_over_unsorted{mode}"] = mtk / result[f"mtk_unsorted{mode}_us"]
    return result


def profile_kernels(shapes, calls=10):
    """Per-kernel device time of metaltopk on a few shapes (torch.profiler / CUPTI): where the
    time goes, without a second tool."""
    from torch.profiler import ProfilerActivity, profile
    for family, rows, n, k, dtype_name, dim in shapes:
        shape = (n, rows) if dim == 0 else (rows, n)
        x = torch.randn(shape, device="cuda").to(getattr(torch, dtype_name))
        for _ in range(2):
            metaltopk.topk(x, k, dim=dim)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                metaltopk.topk(x, k, dim=dim)
            torch.cuda.synchronize()
        print(f"## profile {family} {rows} x {n} k={k} {dtype_name} dim={dim}, {calls} calls")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default="bench_cuda.json")
    parser.add_argument("--only", choices=["moe", "sampling", "select"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--graph-calls", type=int, default=20)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--profile", action="store_true",
                        help="also print per-kernel times of a few shapes")
    args = parser.parse_args()

    props = torch.cuda.get_device_properties(0)
    bandwidth = copy_bandwidth()
    meta = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "metaltopk": metaltopk.__version__, "measured_copy_tb_per_s": bandwidth / 1e12,
            "floor_copy_tb_per_s": COPY_BANDWIDTH / 1e12,
            "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}; "
          f"device copy {bandwidth / 1e12:.2f} TB/s (floor uses {COPY_BANDWIDTH / 1e12:.2f})",
          flush=True)
    results = []
    for shape in SHAPES:
        if args.only and shape[0] != args.only:
            continue
        try:
            r = run_shape(*shape, args)
        except Exception as error:  # keep measuring the other shapes; the failure is reported
            r = {"family": shape[0], "rows": shape[1], "n": shape[2], "k": shape[3],
                 "dtype": shape[4], "dim": shape[5], "error": f"{type(error).__name__}: {error}"}
            print(f"{shape}: FAILED {r['error']}", flush=True)
        results.append(r)
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)

    header = (f"{'family':8} {'rows x n':>16} {'k':>5} {'dtype':>8} {'dim':>3} {'floor':>7} "
              f"{'torch':>8} {'mtk':>8} {'unsort':>8} {'x torch':>7} {'x floor':>7} {'TB/s':>5} | "
              f"{'torch g':>8} {'mtk g':>8} {'x torch':>7} {'x floor':>7} {'TB/s':>5} {'s/u':>5}")
    print(header)
    for r in results:
        if "error" in r:
            print(f"{r['family']:8} {r['rows']:>6} x {r['n']:<9} {r['k']:>5} {r['dtype']:>8} "
                  f"{r['dim']:>3} ERROR {r['error']}")
            continue
        print(f"{r['family']:8} {r['rows']:>6} x {r['n']:<9} {r['k']:>5} {r['dtype']:>8} "
              f"{r['dim']:>3} {r['floor_us']:7.1f} {r['torch_us']:8.1f} {r['mtk_sorted_us']:8.1f} "
              f"{r['mtk_unsorted_us']:8.1f} {r['speedup_vs_torch']:7.1f} {r['x_floor']:7.2f} "
              f"{r['tb_per_s']:5.2f} | {r['torch_graph_us']:8.1f} {r['mtk_sorted_graph_us']:8.1f} "
              f"{r['speedup_vs_torch_graph']:7.1f} {r['x_floor_graph']:7.2f} "
              f"{r['tb_per_s_graph']:5.2f} {r['sorted_over_unsorted_graph']:5.2f}")
    if args.profile:
        profile_kernels([s for s in SHAPES if s[1:4] in ((16384, 256, 8), (256, 151936, 50),
                                                         (1, 2 ** 28, 100), (1, 151936, 1024))])
    stats = metaltopk.cache_stats("cuda")
    print(f"# cuda plan cache: {stats}")
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
