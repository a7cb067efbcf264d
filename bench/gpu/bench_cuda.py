"""metaltopk's CUDA backend against torch.topk on the GPU shapes below, in one run.

For each shape: median CUDA-event time of single eager calls, and of calls replayed from a CUDA
graph (graph of `--graph-calls` calls, time per call), for torch.topk(sorted=True) and
metaltopk.topk with sorted=True and sorted=False. Reports achieved TB/s (the floor's byte
count over the time), the ratio to torch and to the floor (bytes / copy bandwidth, at least
2 us), the sorted/unsorted ratio, checks every result against torch, and saves JSON.

"loop" times are back-to-back calls with events around the whole burst (time per call): what a
caller issuing calls in a row pays, max(host cost, device time). The C-ABI columns come from
bench/gpu/bench_c_abi (`--c-abi-bench` or $METALTOPK_BENCH_C_ABI), which calls mtk_topk straight
from C++ on the same shapes (passed to it from SHAPES below) and checks each result against the
CPU backend first; its "eager" is the loop method, its "single" the single-call method above.

    python3 bench/gpu/bench_cuda.py --json bench.json [--only moe|sampling|select]
        [--c-abi-bench build-gpu/bench/gpu/bench_c_abi]
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch

import metaltopk
from c_abi_runner import run_json_lines

COPY_BANDWIDTH = 4.21e12  # bytes/s, device-to-device copy measured on the project's H200
LAUNCH_FLOOR = 2e-6

# (family, rows, n, k, dtype, dim); dim 0 means the tensor is [n, rows].
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


def median_loop_time(fn, calls, reps):
    """Median over `reps` bursts of `calls` back-to-back calls of the time per call (seconds)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / calls)
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
    for name in ("torch", "mtk_sorted"):
        result[f"{name}_loop_us"] = median_loop_time(runs[name], iters, 3 if big else 7) * 1e6
    for mode in ("", "_graph"):
        mtk = result[f"mtk_sorted{mode}_us"]
        result[f"speedup_vs_torch{mode}"] = result[f"torch{mode}_us"] / mtk
        result[f"x_floor{mode}"] = mtk / result["floor_us"]
        result[f"tb_per_s{mode}"] = total_bytes / (mtk * 1e-6) / 1e12
        result[f"sorted_over_unsorted{mode}"] = mtk / result[f"mtk_unsorted{mode}_us"]
    return result


def run_c_abi_bench(binary, shapes, timeout):
    """Runs bench_c_abi on `shapes`; {(family, rows, n, k, dtype, dim, sorted): its JSON line}
    (see c_abi_runner.run_json_lines)."""
    specs = [":".join(str(field) for field in shape) for shape in shapes]
    return run_json_lines(binary, specs, ("family", "rows", "n", "k", "dtype", "dim", "sorted"),
                          timeout)


def merge_c_abi(result, c_abi):
    """Adds the C-ABI times of result's shape, with ratios against torch timed the same way."""
    key = tuple(result[f] for f in ("family", "rows", "n", "k", "dtype", "dim"))
    sorted_run, unsorted_run = c_abi.get(key + (True,)), c_abi.get(key + (False,))
    if sorted_run is None or unsorted_run is None:
        return
    result["c_abi_eager_us"] = sorted_run["eager_us"]
    result["c_abi_eager_unsorted_us"] = unsorted_run["eager_us"]
    result["c_abi_single_us"] = sorted_run["single_us"]
    result["c_abi_host_us"] = sorted_run["host_us"]
    result["c_abi_speedup_vs_torch_loop"] = result["torch_loop_us"] / sorted_run["eager_us"]
    result["c_abi_speedup_vs_torch"] = result["torch_us"] / sorted_run["single_us"]


def optional(r, key, spec):
    return format(r[key], spec) if key in r else format("-", f">{spec.split('.')[0]}")


def print_table(results):
    """Per shape: anchors, then metaltopk from C (loop and single call), from Python, and from a
    CUDA graph; ratios against torch measured the same way; floor figures of the graph time."""
    print("times in us. loop: back-to-back calls; C: bench_c_abi (mtk_topk from C++), 1: single "
          "calls; py: metaltopk.topk.\nratios torch / metaltopk: x loop = torch loop / C loop, "
          "x 1 = torch / C 1, x py = torch / py, x graph = graph / graph; x floor, TB/s and s/u "
          "(sorted / unsorted) from graph replay")
    print(f"{'family':8} {'rows x n':>16} {'k':>5} {'dtype':>8} {'dim':>3} {'floor':>6} | "
          f"{'torch':>7} {'loop':>7} {'graph':>7} | {'C loop':>7} {'C 1':>7} {'py':>7} "
          f"{'py loop':>7} {'graph':>7} | {'x loop':>6} {'x 1':>6} {'x py':>6} {'x graph':>7} | "
          f"{'x floor':>7} {'TB/s':>5} {'s/u':>5}")
    for r in results:
        head = (f"{r['family']:8} {r['rows']:>6} x {r['n']:<9} {r['k']:>5} {r['dtype']:>8} "
                f"{r['dim']:>3}")
        if "error" in r:
            print(f"{head} ERROR {r['error']}")
            continue
        print(f"{head} {r['floor_us']:6.1f} | {r['torch_us']:7.1f} {r['torch_loop_us']:7.1f} "
              f"{r['torch_graph_us']:7.1f} | {optional(r, 'c_abi_eager_us', '7.1f')} "
              f"{optional(r, 'c_abi_single_us', '7.1f')} {r['mtk_sorted_us']:7.1f} "
              f"{r['mtk_sorted_loop_us']:7.1f} {r['mtk_sorted_graph_us']:7.1f} | "
              f"{optional(r, 'c_abi_speedup_vs_torch_loop', '6.1f')} "
              f"{optional(r, 'c_abi_speedup_vs_torch', '6.1f')} {r['speedup_vs_torch']:6.1f} "
              f"{r['speedup_vs_torch_graph']:7.1f} | {r['x_floor_graph']:7.2f} "
              f"{r['tb_per_s_graph']:5.2f} {r['sorted_over_unsorted_graph']:5.2f}")


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
    parser.add_argument("--c-abi-bench", default=os.environ.get("METALTOPK_BENCH_C_ABI"),
                        help="path of bench_c_abi (default $METALTOPK_BENCH_C_ABI); without it "
                             "the C-ABI columns stay empty")
    parser.add_argument("--c-abi-timeout", type=float, default=90,
                        help="seconds bench_c_abi may run")
    args = parser.parse_args()
    shapes = [s for s in SHAPES if not args.only or s[0] == args.only]

    props = torch.cuda.get_device_properties(0)
    bandwidth = copy_bandwidth()
    meta = {"device": props.name, "sms": props.multi_processor_count, "torch": torch.__version__,
            "metaltopk": metaltopk.__version__, "measured_copy_tb_per_s": bandwidth / 1e12,
            "floor_copy_tb_per_s": COPY_BANDWIDTH / 1e12,
            "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}; "
          f"device copy {bandwidth / 1e12:.2f} TB/s (floor uses {COPY_BANDWIDTH / 1e12:.2f})",
          flush=True)
    c_abi = {}
    if args.c_abi_bench:
        # Before torch's caching allocator holds memory, and in its own process.
        c_abi = run_c_abi_bench(args.c_abi_bench, shapes, args.c_abi_timeout)
        print(f"# bench_c_abi: {len(c_abi)} of {2 * len(shapes)} shape runs", flush=True)
    results = []
    for shape in shapes:
        try:
            r = run_shape(*shape, args)
            merge_c_abi(r, c_abi)
        except Exception as error:  # keep measuring the other shapes; the failure is reported
            r = {"family": shape[0], "rows": shape[1], "n": shape[2], "k": shape[3],
                 "dtype": shape[4], "dim": shape[5], "error": f"{type(error).__name__}: {error}"}
            print(f"{shape}: FAILED {r['error']}", flush=True)
        results.append(r)
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)

    print_table(results)
    if args.profile:
        profiled = ((16384, 256, 8), (4096, 512, 10), (256, 151936, 50), (256, 151936, 1024),
                    (256, 262144, 256),
                    (1, 2 ** 28, 100), (1, 2 ** 26, 1000), (1, 151936, 1024))
        profile_kernels([s for s in SHAPES if s[1:4] in profiled])
    stats = metaltopk.cache_stats("cuda")
    print(f"# cuda plan cache: {stats}")
    c_abi_complete = not args.c_abi_bench or len(c_abi) == 2 * len(shapes)
    return 0 if c_abi_complete and all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
