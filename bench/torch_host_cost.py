"""Host cost per call from Python on torch CUDA tensors: torch.topk against metaltopk.topk and
against the torch op torch.ops.metaltopk.mtk_topk, back to back, in one run.

Small top-k calls (MoE routing) are host-bound: a caller issuing them in a row pays the host
time of each call, not the kernel's. Each method runs CALLS calls back to back between two
synchronisations, ROUNDS times, interleaved with the other methods; the per-call time is the
burst's wall time over CALLS (median over rounds). metaltopk.topk runs on the compiled torch fast
path (adapters/torch/) and, as its own column, on the Python path that cffi takes where the fast
path is not built. Targets (BENCHMARKS.md): at MoE 1x256 bf16 k=8, one metaltopk.topk call costs
at most half of torch.topk's, and one op call no more than torch.topk's. The router table does
the same for metaltopk.moe_route against the torch composite it replaces
(tests/router/torch_routers.py), at E = 256, k = 8, bf16 logits.

    python3 bench/torch_host_cost.py --json bench/results/torch_host_cost_h200.json
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import metaltopk
from metaltopk.torch import _tensors

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "router"))
from torch_routers import torch_deepseek_v3, torch_softmax_composite  # noqa: E402

SHAPES = [((1, 256), 8, torch.bfloat16), ((128, 256), 8, torch.bfloat16),
          ((4096, 256), 8, torch.bfloat16), ((1, 151936), 50, torch.float32)]
ROUTER_TOKENS = [1, 128]
DEEPSEEK = {"n_group": 8, "topk_group": 4, "scale": 2.5}
CALLS, ROUNDS = 2000, 9

FAST_TOPK, FAST_MOE_ROUTE = _tensors._fast_topk, _tensors._fast_moe_route
PYTHON_PATH = "Python path"


def burst_seconds(name, call):
    python_path = name.endswith(PYTHON_PATH)
    _tensors._fast_topk = None if python_path else FAST_TOPK
    _tensors._fast_moe_route = None if python_path else FAST_MOE_ROUTE
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call()
    torch.cuda.synchronize()
    _tensors._fast_topk, _tensors._fast_moe_route = FAST_TOPK, FAST_MOE_ROUTE
    return (time.perf_counter() - start) / CALLS


def median_us(methods):
    """Per-call host time of each method (name -> argumentless call), in interleaved bursts."""
    for name, call in methods.items():  # warm: plans, allocator blocks, kernels loaded
        burst_seconds(name, call)
    times = {name: [] for name in methods}
    for _ in range(ROUNDS):
        for name, call in methods.items():
            times[name].append(burst_seconds(name, call))
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def topk_rows():
    print(f"{'shape':>14} {'k':>4} {'dtype':>9} {'torch.topk':>11} {'metaltopk':>10} "
          f"{'Python path':>12} {'op':>8}   python/torch  op/torch")
    rows = []
    for shape, k, dtype in SHAPES:
        x = torch.randn(shape, device="cuda").to(dtype)
        methods = {
            "torch.topk": lambda: torch.topk(x, k),
            "metaltopk.topk": lambda: metaltopk.topk(x, k),
            f"metaltopk.topk, {PYTHON_PATH}": lambda: metaltopk.topk(x, k),
            "torch.ops.metaltopk.mtk_topk": lambda: torch.ops.metaltopk.mtk_topk(x, k),
        }
        for call in methods.values():
            assert torch.equal(call()[0], torch.topk(x, k)[0])
        us = median_us(methods)
        rows.append({"shape": "x".join(map(str, shape)), "k": k, "dtype": str(dtype)[6:],
                     "us_per_call": us,
                     "python_over_torch": us["metaltopk.topk"] / us["torch.topk"],
                     "python_path_over_torch":
                         us[f"metaltopk.topk, {PYTHON_PATH}"] / us["torch.topk"],
                     "op_over_torch": us["torch.ops.metaltopk.mtk_topk"] / us["torch.topk"]})
        r = rows[-1]
        print(f"{r['shape']:>14} {k:>4} {r['dtype']:>9} "
              + " ".join(f"{t:>{w}.2f}" for t, w in zip(us.values(), (11, 10, 12, 8)))
              + f"   {r['python_over_torch']:>12.2f} {r['op_over_torch']:>9.2f}")
    return rows


def router_rows():
    print(f"\n{'router':>12} {'T':>5} {'torch composite':>16} {'moe_route':>10} "
          f"{'Python path':>12} {'op':>8}   moe_route/torch")
    rows = []
    for router in ("softmax", "deepseek-v3"):
        for tokens in ROUTER_TOKENS:
            logits = torch.randn(tokens, 256, device="cuda").to(torch.bfloat16)
            if router == "softmax":
                options = {}
                composite = lambda: torch_softmax_composite(logits, 8)  # noqa: E731
            else:
                bias = torch.randn(256, device="cuda") * 0.1
                options = {"scoring": "sigmoid", "bias": bias, **DEEPSEEK}
                composite = lambda: torch_deepseek_v3(  # noqa: E731
                    logits, 8, bias, DEEPSEEK["n_group"], DEEPSEEK["topk_group"],
                    DEEPSEEK["scale"])
            op_args = (options.get("scoring", "softmax"), options.get("bias"),
                       options.get("n_group", 0), options.get("topk_group", 0), True,
                       options.get("scale", 1.0))
            methods = {
                "torch composite": composite,
                "metaltopk.moe_route": lambda: metaltopk.moe_route(logits, 8, **options),
                f"metaltopk.moe_route, {PYTHON_PATH}":
                    lambda: metaltopk.moe_route(logits, 8, **options),
                "torch.ops.metaltopk.mtk_moe_route":
                    lambda: torch.ops.metaltopk.mtk_moe_route(logits, 8, *op_args),
            }
            us = median_us(methods)
            rows.append({"router": router, "tokens": tokens, "experts": 256, "k": 8,
                         "us_per_call": us,
                         "moe_route_over_torch": us["metaltopk.moe_route"] / us["torch composite"]})
            print(f"{router:>12} {tokens:>5} "
                  + " ".join(f"{t:>{w}.2f}" for t, w in zip(us.values(), (16, 10, 12, 8)))
                  + f"   {rows[-1]['moe_route_over_torch']:>15.2f}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if FAST_TOPK is None:
        parser.error("the torch fast path is not built beside the library (run `make`)")
    rows, routers = topk_rows(), router_rows()
    if args.json:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "metaltopk": metaltopk.__version__, "calls": CALLS, "rounds": ROUNDS,
                "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "router_rows": routers}, f, indent=1)


if __name__ == "__main__":
    main()
