"""The fused CUDA MoE router against the torch composites it replaces, in one run.

Shapes: T in {1, 128, 4096, 16384} x (E, k) in {(64, 8), (128, 8), (256, 8), (512, 10)} with the
softmax router (torch: `softmax(x.float()) -> topk -> w / w.sum() -> ids.int()`), plus the
DeepSeek-V3 router (sigmoid, bias, 8 groups keep 4; E = 256, k = 8) at every T. bf16 logits.

Columns (median of per-call CUDA-event times, µs):
  torch eager / torch graph: the composite called from Python / replayed from a CUDA graph;
  mtk api:   metaltopk.moe_route on torch tensors (Python adapter, outputs allocated per call);
  mtk call:  mtk_moe_route called directly with prepared descriptors and outputs, which is how a
             runtime (e.g. an AOTInductor shim) calls it: one launch plus cffi's call overhead;
  mtk graph: the call replayed from a CUDA graph, i.e. the kernel alone.
Ratios: eager = torch eager / mtk call (target >= 10 at T >= 128), graph = torch graph /
mtk graph. Every shape's result is checked against torch before it is timed.

    python3 tests/gpu/bench_router_cuda.py [--json PATH] [--iters N] [--graph-calls G]
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import metaltopk
from metaltopk._core import _describe, context
from metaltopk._ffi import ffi, lib

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "router"))
from torch_routers import torch_deepseek_v3, torch_softmax_composite  # noqa: E402

TOKENS = [1, 128, 4096, 16384]
EXPERTS_K = [(64, 8), (128, 8), (256, 8), (512, 10)]
DEEPSEEK = {"n_group": 8, "topk_group": 4, "scale": 2.5}
TARGET_RATIO = 10.0


def median_event_us(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3


def graph_us(fn, iters, calls):
    """Time per call of `calls` calls captured into one CUDA graph and replayed."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()  # warm-up off the capture (allocator, lazy init)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return median_event_us(graph.replay, iters) / calls


def tensor_descriptor(t):
    name = str(t.dtype).replace("torch.", "")
    return _describe(t.data_ptr(), name, tuple(t.shape), tuple(t.stride()))


def direct_call(logits, k, bias, scoring, n_group, topk_group, scale):
    """A closure calling mtk_moe_route on prepared descriptors and outputs, on torch's current
    stream at call time (so graph capture records it)."""
    ctx = context("cuda", logits.device.index or 0)
    weights = torch.empty((logits.shape[0], k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((logits.shape[0], k), dtype=torch.int32, device=logits.device)
    keep = [tensor_descriptor(logits), tensor_descriptor(weights), tensor_descriptor(ids)]
    bias_t = tensor_descriptor(bias) if bias is not None else ffi.NULL
    keep.append(bias_t)
    params = ffi.new("mtk_router_params*", {
        "k": k, "scoring": getattr(lib, f"MTK_SCORING_{scoring.upper()}"), "bias": bias_t,
        "n_group": n_group or 0, "topk_group": topk_group or 0, "renormalize": 1,
        "scale": scale})
    logits_t, weights_t, ids_t = keep[:3]

    def call():
        stream = ffi.cast("void*", torch.cuda.current_stream().cuda_stream)
        status = lib.mtk_moe_route(ctx.handle, logits_t, params, weights_t, ids_t, stream)
        if status != lib.MTK_SUCCESS:
            raise RuntimeError(ffi.string(lib.mtk_last_error_message()).decode())
        return weights, ids

    call.keep_alive = (keep, params)
    return call


def check(label, ours, theirs, ranked_by):
    """Weights equal torch's and the chosen experts' ranking scores equal those torch chose: ids
    may differ among tied scores (bf16 logits tie often; torch's tie order is its own). Rounding
    (torch's sigmoid against ours) may flip a near-tie, so a few tokens in 10^4 may differ."""
    (w, ids), (tw, tids) = ours, theirs
    same_w = torch.isclose(w, tw, rtol=1e-5, atol=1e-7).all(dim=1)
    same_scores = torch.isclose(ranked_by.gather(1, ids.long()), ranked_by.gather(1, tids.long()),
                                rtol=1e-6, atol=0).all(dim=1)
    agree = (same_w & same_scores).float().mean().item()
    if agree < 0.999:
        raise SystemExit(f"{label}: only {agree:.2%} of tokens agree with torch")


def bench_shape(router, tokens, experts, k, args, gen):
    device = torch.device("cuda")
    logits = torch.randn(tokens, experts, generator=gen, device=device).to(torch.bfloat16)
    if router == "deepseek-v3":
        bias = torch.randn(experts, generator=gen, device=device) * 0.1
        kwargs = {"scoring": "sigmoid", "bias": bias, **DEEPSEEK}

        def composite():
            return torch_deepseek_v3(logits, k, bias, DEEPSEEK["n_group"],
                                     DEEPSEEK["topk_group"], DEEPSEEK["scale"])
        ranked_by = torch.sigmoid(logits.float()) + bias
    else:
        bias = None
        kwargs = {}

        def composite():
            return torch_softmax_composite(logits, k)
        ranked_by = torch.softmax(logits.float(), dim=-1)

    def api():
        return metaltopk.moe_route(logits, k, **kwargs)

    call = direct_call(logits, k, bias, kwargs.get("scoring", "softmax"),
                       kwargs.get("n_group"), kwargs.get("topk_group"), kwargs.get("scale", 1.0))
    label = f"{router} T={tokens} E={experts} k={k}"
    expected = composite()
    check(label + " (api)", api(), expected, ranked_by)
    check(label + " (call)", tuple(t.clone() for t in call()), expected, ranked_by)
    torch.cuda.synchronize()
    row = {"router": router, "tokens": tokens, "experts": experts, "k": k,
           "torch_eager_us": median_event_us(composite, args.iters),
           "torch_graph_us": graph_us(composite, args.iters, args.graph_calls),
           "mtk_api_us": median_event_us(api, args.iters),
           "mtk_call_us": median_event_us(call, args.iters),
           "mtk_graph_us": graph_us(call, args.iters, args.graph_calls)}
    row["eager_ratio"] = row["torch_eager_us"] / row["mtk_call_us"]
    row["graph_ratio"] = row["torch_graph_us"] / row["mtk_graph_us"]
    row["meets_target"] = tokens < 128 or row["eager_ratio"] >= TARGET_RATIO
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("bench_router_cuda.json"))
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--graph-calls", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available() or not metaltopk.backends()["cuda"]["available"]:
        raise SystemExit("needs a CUDA GPU, torch with CUDA and metaltopk's CUDA backend")
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [("softmax", t, e, k) for e, k in EXPERTS_K for t in TOKENS]
    cases += [("deepseek-v3", t, 256, 8) for t in TOKENS]
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | metaltopk "
          f"{metaltopk.__version__} | bf16 logits | median µs per call")
    header = (f"{'router':<12}{'T':>6}{'E':>5}{'k':>4}{'torch eager':>13}{'torch graph':>13}"
              f"{'mtk api':>9}{'mtk call':>10}{'mtk graph':>11}{'eager x':>9}{'graph x':>9}")
    print(header)
    rows = []
    for router, tokens, experts, k in cases:
        row = bench_shape(router, tokens, experts, k, args, gen)
        rows.append(row)
        print(f"{router:<12}{tokens:>6}{experts:>5}{k:>4}{row['torch_eager_us']:>13.1f}"
              f"{row['torch_graph_us']:>13.1f}{row['mtk_api_us']:>9.1f}{row['mtk_call_us']:>10.1f}"
              f"{row['mtk_graph_us']:>11.1f}{row['eager_ratio']:>8.1f}x{row['graph_ratio']:>8.1f}x"
              f"{'' if row['meets_target'] else '  < target'}", flush=True)
    missed = [r for r in rows if not r["meets_target"]]
    print(f"target (eager ratio >= {TARGET_RATIO:g} at T >= 128): "
          + ("met on every shape" if not missed else f"missed on {len(missed)} shapes"))
    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                     "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
