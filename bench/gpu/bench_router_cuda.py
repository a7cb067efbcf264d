"""The fused CUDA MoE router against the torch composites it replaces, in one run.

Shapes: T in {1, 128, 4096, 16384} x (E, k) in {(64, 8), (128, 8), (256, 8), (512, 10)} with the
softmax router (torch: `softmax(x.float()) -> topk -> w / w.sum() -> ids.int()`), plus the
DeepSeek-V3 router (sigmoid, bias, 8 groups keep 4; E = 256, k = 8) at every T. bf16 logits.

Columns (median of per-call CUDA-event times, µs):
  torch eager / torch graph: the composite called from Python / replayed from a CUDA graph;
  torch loop: the composite called back to back from Python, events around each burst (time
             per call: max(host cost, device time), what a caller issuing calls in a row pays);
  mtk api:   metaltopk.moe_route on torch tensors (Python adapter, outputs allocated per call);
  mtk call:  mtk_moe_route called directly with prepared descriptors and outputs, which is how a
             runtime (e.g. an AOTInductor shim) calls it: one launch plus cffi's call overhead;
  mtk graph: the call replayed from a CUDA graph, i.e. the kernel alone;
  C loop:    mtk_moe_route called back to back from C++ by bench/gpu/bench_router_c_abi
             (--c-abi-bench), timed like torch loop; it gets this script's shape list and checks
             each result against the CPU backend before timing it.
Ratios: eager = torch eager / mtk call, graph = torch graph / mtk graph, C = torch loop / C loop
(c_abi_ratio). Target: >= 10 at T >= 128, reported for the eager ratio and for the C ratio.
Every shape's result is checked against torch before it is timed.

    python3 bench/gpu/bench_router_cuda.py [--json PATH] [--iters N] [--graph-calls G]
        [--c-abi-bench build-gpu/bench/gpu/bench_router_c_abi]
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

import metaltopk
from metaltopk._abi import context, describe as _describe
from metaltopk._ffi import ffi, lib

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "router"))
from torch_routers import torch_deepseek_v3, torch_softmax_composite  # noqa: E402

from c_abi_runner import run_json_lines  # noqa: E402

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


def loop_us(fn, calls, reps=7):
    """Median over `reps` bursts of `calls` back-to-back calls, events around each burst: time per
    call (the method of bench_router_c_abi's eager_us)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    bursts = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        bursts.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in bursts) * 1e3 / calls


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
        "struct_size": ffi.sizeof("mtk_router_params"), "k": k, "scoring": getattr(lib, f"MTK_SCORING_{scoring.upper()}"), "bias": bias_t,
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
           "torch_loop_us": loop_us(composite, args.loop_calls),
           "torch_graph_us": graph_us(composite, args.iters, args.graph_calls),
           "mtk_api_us": median_event_us(api, args.iters),
           "mtk_call_us": median_event_us(call, args.iters),
           "mtk_graph_us": graph_us(call, args.iters, args.graph_calls)}
    row["eager_ratio"] = row["torch_eager_us"] / row["mtk_call_us"]
    row["graph_ratio"] = row["torch_graph_us"] / row["mtk_graph_us"]
    row["meets_target"] = tokens < 128 or row["eager_ratio"] >= TARGET_RATIO
    return row


def router_kwargs(router):
    """The C-ABI harness's description of a router (scoring, n_group, topk_group, scale, bias)."""
    if router == "deepseek-v3":
        return "sigmoid", DEEPSEEK["n_group"], DEEPSEEK["topk_group"], DEEPSEEK["scale"], 1
    return "softmax", 0, 0, 1.0, 0


def run_c_abi_bench(binary, cases, timeout):
    """Runs bench_router_c_abi on `cases`; {(router, tokens, experts, k): its JSON line} (see
    c_abi_runner.run_json_lines)."""
    specs = [":".join(str(field) for field in (router, tokens, experts, k, *router_kwargs(router)))
             for router, tokens, experts, k in cases]
    return run_json_lines(binary, specs, ("router", "tokens", "experts", "k"), timeout)


def merge_c_abi(row, c_abi):
    """Adds the C-ABI loop time of row's shape and its ratio to torch's loop time."""
    line = c_abi.get((row["router"], row["tokens"], row["experts"], row["k"]))
    if line is None:
        return
    row["c_abi_eager_us"] = line["eager_us"]
    row["c_abi_ratio"] = row["torch_loop_us"] / line["eager_us"]
    row["c_abi_meets_target"] = row["tokens"] < 128 or row["c_abi_ratio"] >= TARGET_RATIO


def optional(row, key, spec):
    return format(row[key], spec) if key in row else format("-", f">{spec.split('.')[0]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=Path("bench_router_cuda.json"))
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--graph-calls", type=int, default=20)
    parser.add_argument("--loop-calls", type=int, default=100,
                        help="calls per burst of the torch loop column")
    parser.add_argument("--c-abi-bench", default=os.environ.get("METALTOPK_BENCH_ROUTER_C_ABI"),
                        help="path of bench_router_c_abi (default $METALTOPK_BENCH_ROUTER_C_ABI); "
                             "without it the C-ABI columns stay empty")
    parser.add_argument("--c-abi-timeout", type=float, default=120,
                        help="seconds bench_router_c_abi may run")
    args = parser.parse_args()
    if not torch.cuda.is_available() or not metaltopk.backends()["cuda"]["available"]:
        raise SystemExit("needs a CUDA GPU, torch with CUDA and metaltopk's CUDA backend")
    gen = torch.Generator(device="cuda").manual_seed(0)
    cases = [("softmax", t, e, k) for e, k in EXPERTS_K for t in TOKENS]
    cases += [("deepseek-v3", t, 256, 8) for t in TOKENS]
    c_abi = {}
    if args.c_abi_bench:
        # Before torch's caching allocator holds memory, and in its own process.
        c_abi = run_c_abi_bench(args.c_abi_bench, cases, args.c_abi_timeout)
        print(f"# bench_router_c_abi: {len(c_abi)} of {len(cases)} shapes", flush=True)
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | metaltopk "
          f"{metaltopk.__version__} | bf16 logits | median µs per call")
    header = (f"{'router':<12}{'T':>6}{'E':>5}{'k':>4}{'torch eager':>13}{'torch loop':>12}"
              f"{'torch graph':>13}{'mtk api':>9}{'mtk call':>10}{'mtk graph':>11}{'C loop':>8}"
              f"{'eager x':>9}{'graph x':>9}{'C x':>7}")
    print(header)
    rows = []
    for router, tokens, experts, k in cases:
        row = bench_shape(router, tokens, experts, k, args, gen)
        merge_c_abi(row, c_abi)
        rows.append(row)
        misses = [name for name, key in (("eager", "meets_target"), ("C", "c_abi_meets_target"))
                  if not row.get(key, True)]
        print(f"{router:<12}{tokens:>6}{experts:>5}{k:>4}{row['torch_eager_us']:>13.1f}"
              f"{row['torch_loop_us']:>12.1f}{row['torch_graph_us']:>13.1f}"
              f"{row['mtk_api_us']:>9.1f}{row['mtk_call_us']:>10.1f}{row['mtk_graph_us']:>11.1f}"
              f"{optional(row, 'c_abi_eager_us', '8.1f')}{row['eager_ratio']:>8.1f}x"
              f"{row['graph_ratio']:>8.1f}x{optional(row, 'c_abi_ratio', '6.1f')}"
              f"{'x' if 'c_abi_ratio' in row else ' '}"
              + (f"  < target ({', '.join(misses)})" if misses else ""), flush=True)
    for name, key in (("eager ratio", "meets_target"), ("C ratio", "c_abi_meets_target")):
        measured = [r for r in rows if key in r]
        missed = [r for r in measured if not r[key]]
        print(f"target ({name} >= {TARGET_RATIO:g} at T >= 128): "
              + ("not measured" if not measured else "met on every shape" if not missed
                 else f"missed on {len(missed)} of {len(measured)} shapes"))
    args.json.write_text(json.dumps({"device": torch.cuda.get_device_name(),
                                     "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"wrote {args.json}")
    c_abi_complete = not args.c_abi_bench or len(c_abi) == len(cases)
    return 0 if c_abi_complete else 1


if __name__ == "__main__":
    sys.exit(main())
