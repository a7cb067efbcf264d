"""Host cost per call from Python on torch CUDA tensors: torch.topk against metaltopk.topk and
against the torch op torch.ops.metaltopk.mtk_topk, back to back, in one run.

Small top-k calls (MoE routing) are host-bound: a caller issuing them in a row pays the host
time of each call, not the kernel's. Each method runs CALLS calls back to back between two
synchronisations, ROUNDS times, interleaved with the other methods; the per-call time is the
burst's wall time over CALLS (median over rounds). metaltopk.topk runs on the compiled torch fast
path (adapters/torch/) and, as its own column, on the Python path that cffi takes where the fast
path is not built. Targets (BENCHMARKS.md): at MoE 1x256 bf16 k=8, one metaltopk.topk call costs
at most half of torch.topk's, and one op call no more than torch.topk's.

    python3 bench/torch_host_cost.py --json bench/results/torch_host_cost_h200.json
"""

import argparse
import json
import statistics
import time

import torch

import metaltopk
from metaltopk.torch import _tensors

SHAPES = [((1, 256), 8, torch.bfloat16), ((128, 256), 8, torch.bfloat16),
          ((4096, 256), 8, torch.bfloat16), ((1, 151936), 50, torch.float32)]
CALLS, ROUNDS = 2000, 9


FAST_PATH = _tensors._fast_topk
PYTHON_PATH = "metaltopk.topk, Python path"


def burst_seconds(name, call, x, k):
    _tensors._fast_topk = None if name == PYTHON_PATH else FAST_PATH
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(CALLS):
        call(x, k)
    torch.cuda.synchronize()
    _tensors._fast_topk = FAST_PATH
    return (time.perf_counter() - start) / CALLS


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    if FAST_PATH is None:
        parser.error("the torch fast path is not built beside the library (run `make`)")
    methods = {
        "torch.topk": torch.topk,
        "metaltopk.topk": metaltopk.topk,
        PYTHON_PATH: metaltopk.topk,
        "torch.ops.metaltopk.mtk_topk": torch.ops.metaltopk.mtk_topk,
    }
    rows = []
    print(f"{'shape':>14} {'k':>4} {'dtype':>9} " + " ".join(f"{m:>29}" for m in methods)
          + "   python/torch  op/torch")
    for shape, k, dtype in SHAPES:
        x = torch.randn(shape, device="cuda").to(dtype)
        for name, call in methods.items():  # warm: plans, allocator blocks, kernels loaded
            assert torch.equal(call(x, k)[0], torch.topk(x, k)[0])
            burst_seconds(name, call, x, k)
        times = {name: [] for name in methods}
        for _ in range(ROUNDS):
            for name, call in methods.items():
                times[name].append(burst_seconds(name, call, x, k))
        us = {name: statistics.median(t) * 1e6 for name, t in times.items()}
        python_ratio = us["metaltopk.topk"] / us["torch.topk"]
        cffi_ratio = us[PYTHON_PATH] / us["torch.topk"]
        op_ratio = us["torch.ops.metaltopk.mtk_topk"] / us["torch.topk"]
        label = "x".join(map(str, shape))
        print(f"{label:>14} {k:>4} {str(dtype)[6:]:>9} "
              + " ".join(f"{us[m]:>29.2f}" for m in methods)
              + f"   {python_ratio:>12.2f} {op_ratio:>9.2f}")
        rows.append({"shape": label, "k": k, "dtype": str(dtype)[6:],
                     "us_per_call": us, "python_over_torch": python_ratio,
                     "python_path_over_torch": cffi_ratio, "op_over_torch": op_ratio})
    if args.json:
        meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                "metaltopk": metaltopk.__version__, "calls": CALLS, "rounds": ROUNDS,
                "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
