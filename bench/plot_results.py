"""Plots and README tables from the latest benchmark results in bench/results/.

Reads cpu.json and router_cpu.json (`make bench`), cuda_h200.json and router_cuda_h200.json
(`tests/gpu/run_all.sh` on an H200) and writes one PNG per device into docs/: the speed-up of
metaltopk over torch on every shape, grouped by shape class (MoE routing, sampling, select) next
to the fused router's against the torch composite. peers_h200.json (`bench/peers/run.sh`) gives
docs/peers_h200.png: metaltopk against the fastest serving-engine kernel on every top-k, router,
large-k and ragged shape.
With --markdown it also prints the README's performance tables (torch_host_cost_h200.json, from
bench/torch_host_cost.py, too), so that the tables and the plots come from the same files.

Usage: python3 bench/plot_results.py [--results DIR] [--out DIR] [--markdown]
"""

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLASS_COLOURS = {"MoE": "#4c72b0", "sampling": "#dd8452", "select": "#55a868",
                 "softmax": "#8172b3", "deepseek-v3": "#c44e52", "ragged": "#937860",
                 "large-k": "#da8bc3"}
DTYPES = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}


def load(path):
    return json.loads(path.read_text()) if path.exists() else None


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def shape_label(family, rows, n, k, dtype, dim):
    """How the README names a shape: rows x n (the tensor is n x rows for dim 0)."""
    size = {2**22: "2^22", 2**24: "2^24", 2**26: "2^26", 2**28: "2^28"}.get(n, str(n))
    shape = f"{n}x{rows} dim 0" if dim == 0 else f"{rows}x{size}"
    return f"{shape} k={k} {DTYPES.get(dtype, dtype)}"


def shape_class(family):
    family = family.lower()
    for name in ("moe", "sampling", "select"):
        if family.startswith(name):
            return "MoE" if name == "moe" else name
    return family


# ---- rows of each results file, in one form: (class, label, {series: speed-up}) ---------------


def cuda_topk_rows(doc):
    rows = []
    for r in doc["results"]:
        label = shape_label(r["family"], r["rows"], r["n"], r["k"], r["dtype"], r["dim"])
        rows.append((shape_class(r["family"]), label,
                     {"graph replay": r["speedup_vs_torch_graph"],
                      "C loop": r["c_abi_speedup_vs_torch_loop"]}))
    return rows


def cuda_router_rows(doc):
    return [(r["router"], f"{r['router']} T={r['tokens']} E={r['experts']} k={r['k']}",
             {"graph replay": r["graph_ratio"], "C loop": r["c_abi_ratio"]})
            for r in doc["rows"]]


def cpu_topk_rows(doc):
    return [(shape_class(r["family"]),
             shape_label(r["family"], r["rows"], r["n"], r["k"], r["dtype"], r["dim"]),
             {"vs torch.topk": r["speedup_vs_torch"]}) for r in doc["results"]]


def cpu_router_rows(doc):
    return [(r["router"], f"{r['router']} T={r['tokens']} E={r['experts']} k={r['k']}",
             {"vs torch composite": r["ratio"]}) for r in doc["rows"]]


# ---- plots --------------------------------------------------------------------------------------


def bar_panel(ax, rows, title):
    """Horizontal bars, one group per shape (a bar per series), classes coloured and labelled."""
    series = list(rows[0][2])
    height = 0.8 / len(series)
    hatches = ["", "///"]
    labels, y = [], 0.0
    ys = []
    previous = None
    for cls, label, values in rows:
        if previous is not None and cls != previous:
            y += 0.6  # a gap between classes
        ys.append(y)
        labels.append(label)
        for i, name in enumerate(series):
            value = values[name]
            offset = (i - (len(series) - 1) / 2) * height
            ax.barh(y + offset, value, height=height * 0.95, color=CLASS_COLOURS.get(cls, "grey"),
                    alpha=1.0 if i == 0 else 0.55, hatch=hatches[i % 2], edgecolor="white",
                    linewidth=0)
            text = f"{value:.2f}x" if value < 10 else f"{value:.1f}x"
            ax.text(value * 1.04, y + offset, text, va="center", fontsize=7.5)
        previous = cls
        y += 1.0
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=8.5)
    ax.invert_yaxis()
    ax.set_xscale("log")
    top = max(v for _, _, values in rows for v in values.values())
    ax.set_xlim(0.8, top * 1.6)
    ticks = [t for t in (1, 2, 5, 10, 20, 50, 100) if t <= top * 1.6]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.set_title(title, fontsize=10.5)
    ax.set_xlabel("speed-up over torch (log scale; 1x = as fast as torch)", fontsize=8.5)
    # Legend: the classes' colours, then what each bar of a group measures.
    # Each class's label carries its geometric mean, per series.
    handles = []
    for cls in dict.fromkeys(cls for cls, _, _ in rows):
        means = ", ".join((f"{name} " if len(series) > 1 else "") +
                          f"{geomean([v[name] for c, _, v in rows if c == cls]):.1f}x"
                          for name in series)
        handles.append(plt.Rectangle((0, 0), 1, 1, color=CLASS_COLOURS.get(cls, "grey"),
                                     label=f"{cls} (geometric mean {means})"))
    if len(series) > 1:
        for i, name in enumerate(series):
            handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="#888888",
                                         alpha=1.0 if i == 0 else 0.55, hatch=hatches[i % 2],
                                         edgecolor="white", label=name))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.07), ncol=2,
              fontsize=8.5, frameon=False)


def device_figure(topk_rows, router_rows, title, path):
    height = max(len(topk_rows), len(router_rows)) * 0.36 + 3.0
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, height))
    bar_panel(left, topk_rows, "top-k, per shape")
    bar_panel(right, router_rows, "fused MoE router, per shape (T tokens, E experts)")
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


# ---- README tables ------------------------------------------------------------------------------


def markdown_cpu(topk, router):
    meta = topk["meta"]
    print(f"CPU: {meta['time'][:10]}, {meta['host']['cpu']}, {meta['host']['logical_cpus']} "
          f"logical CPUs, torch {meta['torch']} on {meta['torch_threads']} threads\n")
    print("| shape | k | dtype | torch.topk ms | metaltopk ms | numpy ms | x torch | x numpy |")
    print("|---|---|---|---|---|---|---|---|")
    for r in topk["results"]:
        shape = shape_label(r["family"], r["rows"], r["n"], r["k"], r["dtype"], r["dim"])
        shape = shape.rsplit(" k=", 1)[0]
        star = "*" if r["numpy_on_float32_upcast"] else ""
        print(f"| {shape_class(r['family'])} {shape} | {r['k']} | {DTYPES[r['dtype']]} | "
              f"{r['torch_ms']:.3f} | {r['metaltopk_ms']:.3f} | {r['numpy_ms']:.3f}{star} | "
              f"{r['speedup_vs_torch']:.2f}x | {r['speedup_vs_numpy']:.2f}x |")
    print(f"\ngeometric mean over torch: {topk['geomean_speedup_vs_torch']:.2f}x\n")
    print("| router | T | E | k | torch µs | metaltopk µs | x torch |")
    print("|---|---|---|---|---|---|---|")
    for r in router["rows"]:
        print(f"| {r['router']} | {r['tokens']} | {r['experts']} | {r['k']} | "
              f"{r['torch_us']:.1f} | {r['metaltopk_us']:.1f} | {r['ratio']:.2f}x |")
    print(f"\ngeometric mean: {router['geomean_speedup']:.2f}x\n")


def markdown_cuda(topk, router):
    meta = topk["meta"]
    print(f"H200: {meta['time'][:10]}, {meta['device']}, torch {meta['torch']}\n")
    print("| shape | k | dtype | torch graph | metaltopk graph | x graph | torch loop | "
          "metaltopk C loop | x loop |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in topk["results"]:
        shape = shape_label(r["family"], r["rows"], r["n"], r["k"], r["dtype"], r["dim"])
        shape = shape.rsplit(" k=", 1)[0]
        print(f"| {shape_class(r['family'])} {shape} | {r['k']} | {DTYPES[r['dtype']]} | "
              f"{r['torch_graph_us']:.1f} | {r['mtk_sorted_graph_us']:.1f} | "
              f"{r['speedup_vs_torch_graph']:.1f}x | {r['torch_loop_us']:.1f} | "
              f"{r['c_abi_eager_us']:.1f} | {r['c_abi_speedup_vs_torch_loop']:.1f}x |")
    graph = geomean([r["speedup_vs_torch_graph"] for r in topk["results"]])
    loop = geomean([r["c_abi_speedup_vs_torch_loop"] for r in topk["results"]])
    print(f"\ngeometric means: graph {graph:.1f}x, C loop {loop:.1f}x\n")
    print("| router | T | E | k | torch graph | metaltopk graph | x graph | torch loop | "
          "metaltopk C loop | x loop |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in router["rows"]:
        print(f"| {r['router']} | {r['tokens']} | {r['experts']} | {r['k']} | "
              f"{r['torch_graph_us']:.1f} | {r['mtk_graph_us']:.1f} | {r['graph_ratio']:.1f}x | "
              f"{r['torch_loop_us']:.1f} | {r['c_abi_eager_us']:.1f} | {r['c_abi_ratio']:.1f}x |")
    graph = geomean([r["graph_ratio"] for r in router["rows"]])
    loop = geomean([r["c_abi_ratio"] for r in router["rows"]])
    print(f"\ngeometric means: graph {graph:.1f}x, C loop {loop:.1f}x\n")


def best_peer_rows(rows):
    """Per shape, the fastest peer that ran and matched metaltopk's result, in file order."""
    best = {}
    for r in rows:
        if r.get("peer_us") is None or not r["status"].startswith("match"):
            continue
        key = (r["shape"], r["k"], r["dtype"])
        if key not in best or r["peer_us"] < best[key]["peer_us"]:
            best[key] = r
    return list(best.values())


def peers_figure(rows, path):
    rows = [r for r in rows if r.get("metaltopk_us")]  # a ragged shape metaltopk refused: no bar
    fig, ax = plt.subplots(figsize=(11, 0.28 * len(rows) + 1.2))
    labels = [f"{r['shape']} k={r['k']} {r['dtype']}" for r in rows]
    ratios = [r["peer_us"] / r["metaltopk_us"] for r in rows]
    colours = [CLASS_COLOURS[shape_class(r["family"])] if r["family"] in ("moe", "sampling",
               "select", "ragged", "large-k") else CLASS_COLOURS["deepseek-v3" if "deepseek" in r["shape"]
                                                      else "softmax"] for r in rows]
    y = range(len(rows))
    ax.barh(y, ratios, color=colours)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_yticks(list(y), labels, fontsize=7)
    ax.invert_yaxis()
    for i, (ratio, r) in enumerate(zip(ratios, rows)):
        ax.text(ratio, i, f" {ratio:.2f}x {r['peer']}", va="center", fontsize=6)
    ax.set_xlabel("fastest peer's time / metaltopk's time (CUDA graph replay; > 1: metaltopk "
                  "faster)")
    ax.set_title("H200: metaltopk against the fastest of FlashInfer, CUB, vLLM and SGLang "
                 "(bench/peers/run.sh)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown_ragged(rows):
    """Issue #31's ragged shapes: also how far each time is from reading the scores once."""
    def us(v):
        return "-" if v is None else f"{v:.1f}"
    print("| shape | k | fastest peer | peer µs | metaltopk µs | x | scores read once µs | "
          "metaltopk |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        mtk = r.get("metaltopk_us")
        x = "-" if mtk is None else f"{r['peer_us'] / mtk:.2f}x"
        print(f"| {r['shape']} | {r['k']} | {r['peer']} | {r['peer_us']:.1f} | {us(mtk)} | {x} | "
              f"{us(r.get('read_once_us'))} | {r.get('metaltopk_status', '')} |")
    ratios = [r["peer_us"] / r["metaltopk_us"] for r in rows if r.get("metaltopk_us")]
    if ratios:
        print(f"\ngeometric mean {geomean(ratios):.2f}x over {len(ratios)} shapes; "
              f"behind on {sum(x < 1 for x in ratios)}\n")
    else:
        print("\nmetaltopk ran none of these shapes\n")


def markdown_peers(rows):
    ragged = [r for r in rows if r["family"] == "ragged"]
    rows = [r for r in rows if r["family"] != "ragged"]
    print("| shape | k | dtype | fastest peer | peer µs | metaltopk µs | x |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['k']} | {r['dtype']} | {r['peer']} | {r['peer_us']:.1f} | "
              f"{r['metaltopk_us']:.1f} | {r['peer_us'] / r['metaltopk_us']:.2f}x |")
    ratios = [r["peer_us"] / r["metaltopk_us"] for r in rows]
    print(f"\ngeometric mean {geomean(ratios):.2f}x over {len(rows)} shapes; "
          f"behind on {sum(x < 1 for x in ratios)}\n")
    if ragged:
        markdown_ragged(ragged)


def markdown_host_cost(doc):
    meta = doc["meta"]
    print(f"{meta['device']}: {meta['time'][:10]}, torch {meta['torch']}\n")
    print("| shape | k | dtype | torch.topk µs | metaltopk.topk µs | x | Python path µs | x "
          "| torch op µs | x |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        us = r["us_per_call"]
        print(f"| {r['shape']} | {r['k']} | {r['dtype']} | {us['torch.topk']:.1f} | "
              f"{us['metaltopk.topk']:.1f} | {r['python_over_torch']:.2f} | "
              f"{us['metaltopk.topk, Python path']:.1f} | {r['python_path_over_torch']:.2f} | "
              f"{us['torch.ops.metaltopk.mtk_topk']:.1f} | {r['op_over_torch']:.2f} |")
    print()
    if not doc.get("router_rows"):
        return
    print("| router | T | E | k | torch composite µs | metaltopk.moe_route µs | x | Python path µs "
          "| torch op µs |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in doc["router_rows"]:
        us = r["us_per_call"]
        print(f"| {r['router']} | {r['tokens']} | {r['experts']} | {r['k']} | "
              f"{us['torch composite']:.1f} | {us['metaltopk.moe_route']:.1f} | "
              f"{r['moe_route_over_torch']:.2f} | {us['metaltopk.moe_route, Python path']:.1f} | "
              f"{us['torch.ops.metaltopk.mtk_moe_route']:.1f} |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "docs")
    parser.add_argument("--markdown", action="store_true", help="also print the README tables")
    args = parser.parse_args()

    cpu, cpu_router = load(args.results / "cpu.json"), load(args.results / "router_cpu.json")
    cuda = load(args.results / "cuda_h200.json")
    cuda_router = load(args.results / "router_cuda_h200.json")
    if cpu and cpu_router:
        meta = cpu["meta"]
        device_figure(cpu_topk_rows(cpu), cpu_router_rows(cpu_router),
                      f"CPU ({meta['host']['logical_cpus']} logical CPUs): metaltopk against "
                      f"torch {meta['torch'].split('+')[0]} ({meta['torch_threads']} threads), "
                      f"make bench, {meta['time'][:10]}", args.out / "speedup_cpu.png")
        if args.markdown:
            markdown_cpu(cpu, cpu_router)
    if cuda and cuda_router:
        meta = cuda["meta"]
        device_figure(cuda_topk_rows(cuda), cuda_router_rows(cuda_router),
                      f"{meta['device']}: metaltopk against torch {meta['torch'].split('+')[0]}, "
                      f"tests/gpu/run_all.sh, {meta['time'][:10]}", args.out / "speedup_h200.png")
        if args.markdown:
            markdown_cuda(cuda, cuda_router)
    # The top-k, router, large-k and ragged shapes; the sampling operations have their own
    # table in the README.
    peers = [r for r in (load(args.results / "peers_h200.json") or []) if not r.get("op")]
    if peers:
        rows = best_peer_rows(peers)
        peers_figure(rows, args.out / "peers_h200.png")
        if args.markdown:
            markdown_peers(rows)
    host_cost = load(args.results / "torch_host_cost_h200.json")
    if host_cost and args.markdown:
        markdown_host_cost(host_cost)


if __name__ == "__main__":
    main()
